package controller_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller/internal/backendtest"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/testbench/p4rt"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/prototext"
)

// Adding a service writes that service's entries and nothing else; so do
// removing it and adding it again, and finishing an add that was cut
// short before the service's row reached the switch.

// apiService is a second service appended to seedConfig, on its own VIP
// and backends; port is the health check's.
func apiService(port int) string {
	return fmt.Sprintf(`  - name: api
    vip: 203.0.113.20
    protocol: TCP
    ports: [8080]
    ringSize: 251
    healthCheck: {type: HTTP, port: %d, requestPath: /healthz, checkIntervalSec: 300, timeoutSec: 300, healthyThreshold: 1, unhealthyThreshold: 1}
    backends:
      - name: ig-e
        endpoints:
          - {name: vm-e1, ip: 127.0.0.141}
          - {name: vm-e2, ip: 127.0.0.142}
          - {name: vm-e3, ip: 127.0.0.143}
`, port)
}

// apiEntries is what the api service is on the switch: 3 backend rows,
// its 251-slot ring in the half its row points at (the other is empty at
// rest), its service row, one VIP row.
const apiEntries = 3 + 251 + 1 + 1

// writesOf sums the updates of the lb tables in the server's log, by
// type, and checks that each is of an entry of svc (its rows in before
// or after, or rows of a service no row names: an add cut short).
func writesOf(t *testing.T, srv *p4rt.Server, before, after *compiler.IR, svc string) (inserts, modifies, deletes int) {
	t.Helper()
	ids, bes := map[uint32]bool{}, map[uint32]bool{}
	vips := map[netip.Addr]bool{}
	for _, ir := range []*compiler.IR{before, after} {
		x := ir.Index()
		for _, s := range ir.Services {
			if s.Name == svc {
				ids[s.ID] = true
			}
		}
		for _, b := range ir.Backends {
			if x.Service(b.ServiceID) == nil || ids[b.ServiceID] {
				ids[b.ServiceID], bes[b.ID] = true, true
			}
		}
		for _, v := range ir.VIPs {
			if ids[v.ServiceID] {
				vips[v.Key.VIP] = true
			}
		}
	}
	var schema *runtime.Schema
	type region struct{ base, n uint64 }
	var others []region // the rings of the services that are not svc
	srv.Snapshot(func(v p4rt.View) {
		schema = v.Schema()
		for _, e := range v.Entries("service") {
			d, err := schema.Decode(e)
			if err != nil {
				t.Fatal(err)
			}
			if !ids[uint32(d.Uint("service_id"))] {
				others = append(others, region{d.Uint("ring_base"), d.Uint("ring_size")})
			}
		}
	})
	for _, e := range srv.Log() {
		if e.Table == "tunnel_source" || e.Table == "egress_mtu" {
			continue
		}
		d, err := schema.Decode(e.Entry)
		if err != nil {
			t.Fatal(err)
		}
		var ok bool
		switch {
		case e.Table == "backend":
			ok = bes[uint32(d.Uint("backend_id"))]
		case strings.HasPrefix(e.Table, "vip_"):
			a, _ := netip.AddrFromSlice(runtime.Pad(d.Key["dst_addr"], 16))
			ok = vips[a.Unmap()]
		case e.Table == "ring":
			// The ring pool: an entry of svc's lies in no other service's
			// region, and names one of svc's backends.
			ok = e.Type == p4v1.Update_DELETE || bes[uint32(d.Uint("backend_id"))]
			for _, r := range others {
				if a := d.Uint("addr"); a >= r.base && a < r.base+r.n {
					ok = false
				}
			}
		default:
			ok = ids[uint32(d.Uint("service_id"))]
		}
		if !ok {
			t.Errorf("%s of a %s entry that is not %s's: %s", e.Type, e.Table, svc, prototext.Format(e.Entry))
		}
		switch e.Type {
		case p4v1.Update_INSERT:
			inserts++
		case p4v1.Update_MODIFY:
			modifies++
		case p4v1.Update_DELETE:
			deletes++
		}
	}
	return
}

// webUnchanged: the web service's rows are those of before.
func webUnchanged(t *testing.T, before, after *compiler.IR) {
	t.Helper()
	b, a := before.ServiceByName("web"), after.ServiceByName("web")
	if b == nil || a == nil || b.ID != a.ID || !slices.Equal(before.ActiveRing(b), after.ActiveRing(a)) {
		t.Fatalf("web changed: %+v → %+v", b, a)
	}
}

// TestAddServiceWritesOnlyItsEntries: with web on the switch, adding api
// to the configuration writes api's entries (inserts only), removing it
// deletes them, and adding it again inserts them under new IDs (IDs are
// never reused); web's entries are never written.
func TestAddServiceWritesOnlyItsEntries(t *testing.T) {
	f := backendtest.Start(t, append(allSeedIPs(), "127.0.0.141", "127.0.0.142", "127.0.0.143")...)
	web := strings.Replace(patientProbes(seedConfig(f.Port, true, 0, 1, 1)), "ringSize: 1021", "ringSize: 257", 1)
	srv := p4rt.StartEmpty(t, "127.0.0.1:0")
	r := startSwitchRig(t, embeddedSwitchOptions(srv.Addr()), web)
	r.ann.waitServing(t, true, r.logs)
	reload := func(cfg string) {
		t.Helper()
		if err := os.WriteFile(r.cfg, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		srv.ResetLog()
		if err := r.c.Reload(r.ctx); err != nil {
			t.Fatalf("reload: %v\n%s", err, r.logs)
		}
	}
	first := r.held(t)
	var ids []uint32
	for i, step := range []struct {
		name          string
		cfg           string
		ins, mod, del int
	}{
		{"add api", web + apiService(f.Port), apiEntries, 0, 0},
		{"remove api", web, 0, 0, apiEntries},
		{"add api again", web + apiService(f.Port), apiEntries, 0, 0},
	} {
		before := r.held(t)
		reload(step.cfg)
		after := r.held(t)
		r.wants(t, after)
		ins, mod, del := writesOf(t, srv, before, after, "api")
		if ins != step.ins || mod != step.mod || del != step.del {
			t.Errorf("step %d (%s): %d inserts, %d modifies, %d deletes; want %d, %d, %d\n%s", i+1, step.name, ins, mod, del, step.ins, step.mod, step.del, r.logs)
		}
		webUnchanged(t, first, after)
		if s := after.ServiceByName("api"); s != nil {
			ids = append(ids, s.ID)
		}
	}
	if len(ids) != 2 || ids[0] == ids[1] {
		t.Errorf("api's IDs when added, then added again: %v; want two different (IDs are never reused)", ids)
	}
}

// TestAddServiceCutShortFinishedMinimally: the push that adds api stops
// after its k-th update, before api's service row reached the switch
// (the controller killed there: StopAfter), for k inside its backend
// rows, after them, after the first ring slot, inside the ring and after
// it (the cut points are found in the add's own diff). A new controller
// on the switch (lbc run restarted, or lbc push) finishes the add writing
// only the entries that are missing, under the IDs the cut push chose: it
// used to give api new IDs (nothing on the switch named the ones
// written), write it whole and delete what the cut push had written.
func TestAddServiceCutShortFinishedMinimally(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  func(t *testing.T, d compiler.Diff) int // updates applied
	}{
		{"inside the backend rows", func(*testing.T, compiler.Diff) int { return 1 }},
		{"one backend row left", func(t *testing.T, d compiler.Diff) int {
			return changeAt(t, d, compiler.TableRing, compiler.Insert) - 1
		}},
		{"the backend rows written", func(t *testing.T, d compiler.Diff) int {
			return changeAt(t, d, compiler.TableRing, compiler.Insert)
		}},
		{"one ring slot written", func(t *testing.T, d compiler.Diff) int {
			return changeAt(t, d, compiler.TableRing, compiler.Insert) + 1
		}},
		{"inside the ring", func(t *testing.T, d compiler.Diff) int {
			first := changeAt(t, d, compiler.TableRing, compiler.Insert)
			return first + (changeAt(t, d, compiler.TableService, compiler.Insert)-first)/2
		}},
		{"the ring written, no service row", func(t *testing.T, d compiler.Diff) int {
			return changeAt(t, d, compiler.TableService, compiler.Insert)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := backendtest.Start(t, append(allSeedIPs(), "127.0.0.141", "127.0.0.142", "127.0.0.143")...)
			web := strings.Replace(patientProbes(seedConfig(f.Port, true, 0, 1, 1)), "ringSize: 1021", "ringSize: 257", 1)
			cfgPath := filepath.Join(t.TempDir(), "lb.yaml")
			if err := os.WriteFile(cfgPath, []byte(web), 0o644); err != nil {
				t.Fatal(err)
			}
			srv := p4rt.StartEmpty(t, "127.0.0.1:0")
			kc := runController(t, srv, cfgPath, nil)
			select {
			case <-kc.c.Ready():
			case err := <-kc.done:
				t.Fatalf("controller: %v\n%s", err, kc.logs)
			}
			first := readSwitch(t, kc.tg)
			if err := os.WriteFile(cfgPath, []byte(web+apiService(f.Port)), 0o644); err != nil {
				t.Fatal(err)
			}
			want := compileWith(t, loadConfig(t, cfgPath), first)
			add := compiler.DiffIR(first, want)
			if n := len(add.Changes); n != apiEntries {
				t.Fatalf("the add is %d updates, want %d:\n%s", n, apiEntries, add.Summary())
			}
			k := tc.cut(t, add)
			if k < 1 || k > changeAt(t, add, compiler.TableService, compiler.Insert) {
				t.Fatalf("the cut after update %d is not before api's service row (update %d)", k, changeAt(t, add, compiler.TableService, compiler.Insert)+1)
			}
			t.Logf("cut after update %d of %d (%s)", k, len(add.Changes), add.Changes[k-1])
			w := &ringWatch{allowed: [][]uint32{first.ActiveRing(first.ServiceByName("web")), want.ActiveRing(want.ServiceByName("api"))}}
			kc.arm(srv, w, k)
			if err := kc.c.Reload(kc.ctx); err == nil {
				t.Fatalf("the cut push returned no error\n%s", kc.logs)
			}
			kc.wait()
			if got := len(srv.Log()); got != k {
				t.Fatalf("the switch applied %d updates, want %d", got, k)
			}
			srv.StopAfter(-1, codes.OK)
			srv.OnUpdate(w.check)
			cut := func() *compiler.IR {
				var ir *compiler.IR
				srv.Snapshot(func(v p4rt.View) { ir = irOfView(t, v) })
				return ir
			}()
			if cut.ServiceByName("api") != nil {
				t.Fatalf("api's row reached the switch after %d updates: the case is not a cut before it", k)
			}
			// What the new controller compiles: api under the cut push's
			// service ID, its backends that reached the switch under
			// theirs (the others under new ones: the cut push's were
			// never written, but IDs are not reused).
			final := compileWith(t, loadConfig(t, cfgPath), cut)
			if a, b := final.ServiceByName("api"), want.ServiceByName("api"); a == nil || a.ID != b.ID {
				t.Fatalf("api compiled as %+v, the cut push wrote its rows as service %d", a, b.ID)
			}
			for _, b := range cut.Backends {
				if nb := final.Index().Backend(b.ID); nb == nil || nb.Name != b.Name {
					t.Fatalf("backend %s (id %d) written by the cut push is not kept: %+v", b.Name, b.ID, nb)
				}
			}
			w.mu.Lock()
			w.allowed = append(w.allowed, final.ActiveRing(final.ServiceByName("api")))
			w.mu.Unlock()
			srv.ResetLog()
			r := startSwitchRig(t, embeddedSwitchOptions(srv.Addr()), web+apiService(f.Port))
			if err := w.err(); err != nil {
				t.Fatalf("new controller: %v\n%s", err, r.logs)
			}
			held := r.held(t)
			r.wants(t, held)
			if d := compiler.DiffIR(final, held); !d.Empty() {
				t.Fatalf("the switch does not hold the compiled state:\n%s\n%s", d.Summary(), r.logs)
			}
			webUnchanged(t, first, held)
			ins, mod, del := writesOf(t, srv, cut, held, "api")
			if ins != apiEntries-k || mod != 0 || del != 0 {
				t.Fatalf("the new controller wrote %d inserts, %d modifies, %d deletes; want the %d missing inserts only\n%s", ins, mod, del, apiEntries-k, r.logs)
			}
			srv.ResetLog()
			if err := r.c.Sync(r.ctx); err != nil || len(srv.Log()) != 0 {
				t.Fatalf("after convergence a sync wrote %d updates (%v)\n%s", len(srv.Log()), err, r.logs)
			}
		})
	}
}
