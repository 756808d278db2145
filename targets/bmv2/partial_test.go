package bmv2

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/testbench/p4rt"
	"google.golang.org/grpc/codes"
)

// pushStep is one state of the switch: a configuration, health, a time.
type pushStep struct {
	cfg *compiler.Config
	st  compiler.State
	now float64
}

// write is one update the switch applied: its operation and table, as
// describe begins ("insert ring", "modify service", "delete vip").
type write struct{ op, table string }

func writesOf(log []p4rt.LogEntry) []write {
	var out []write
	for _, e := range log {
		if e.Table == tTunnelSource || e.Table == tEgressMTU {
			continue
		}
		table := e.Table
		if strings.HasPrefix(table, "vip_") {
			table = "vip"
		}
		out = append(out, write{strings.ToLower(e.Type.String()), table})
	}
	return out
}

// failPoints picks the updates of a push to fail: the first and last
// write of every table and operation (so the last ring write of the
// inactive half and the flip itself), one in the middle of each run, and
// both sides of every batch boundary.
func failPoints(ws []write, batch int) []int {
	set := map[int]bool{}
	start := 0
	for i := range ws {
		if i == len(ws)-1 || ws[i+1] != ws[i] {
			set[start+1], set[(start+i)/2+1], set[i+1] = true, true, true
			start = i + 1
		}
	}
	for n := batch; n < len(ws); n += batch {
		set[n], set[n+1] = true, true
	}
	var out []int
	for n := range set {
		out = append(out, n)
	}
	sort.Ints(out)
	return out
}

// activeRings returns each service's active ring as a packet would see it.
func activeRings(t testing.TB, v p4rt.View) map[uint32][]uint32 {
	tr, err := NewTranslator(v.Schema())
	if err != nil {
		t.Fatal(err)
	}
	tabs := Tables{}
	for _, n := range []string{tVIPPort, tVIPProto, tVIPAddr, tService, tRing, tBackend} {
		tabs[n] = v.Entries(n)
	}
	ir, err := tr.IR(tabs, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint32][]uint32{}
	for i := range ir.Services {
		out[ir.Services[i].ID] = slices.Clone(ir.ActiveRing(&ir.Services[i]))
	}
	return out
}

// wholeRingOf says whether the active ring of service id is the old
// complete ring or the new one (either of them when the service is in
// both IRs, the one that has it otherwise).
func wholeRingOf(id uint32, have []uint32, old, new *compiler.IR) error {
	var allowed [][]uint32
	for _, ir := range []*compiler.IR{old, new} {
		if ir == nil {
			continue
		}
		if s := ir.Service(id); s != nil {
			allowed = append(allowed, ir.ActiveRing(s))
		}
	}
	for _, a := range allowed {
		if slices.Equal(a, have) {
			return nil
		}
	}
	return fmt.Errorf("service %d's active half holds a ring that is neither the old complete ring nor the new one (%d slots; %d rings allowed)", id, len(have), len(allowed))
}

// Issue 25, item 4: a Write that fails part-way (the n-th update, for n at
// every table boundary, in the middle of each run, at every batch boundary,
// on the flip) leaves some updates applied. The push says what failed; no
// service ever looks up a ring that is not the old or the new complete one
// (checked after every single update the switch applies); the next push
// (read back, compile against it, as `lbc push` does) writes exactly what
// is missing and the switch then holds the compiled state. The exception,
// logged: a new service none of whose rows reached the switch gets new IDs
// from that compile (the cut push's IDs are named nowhere on the switch),
// so it is written whole and the orphaned rows deleted; still hitless.
func TestPartialWriteNeverActivatesHalfRing(t *testing.T) {
	cfg := load(t, testConfig)
	down := compiler.State{}
	down.SetHealthy("vm-a1", false)
	down.SetHealthy("vm-a2", false)
	noDNS := load(t, strings.SplitN(testConfig, "  - name: dns", 2)[0])
	bigger := load(t, strings.Replace(testConfig, "ringSize: 131", "ringSize: 257", 1))
	cases := []struct {
		name   string
		before []pushStep // pushed without faults first
		push   pushStep   // the push that fails at update n
	}{
		{"first push onto an empty switch", nil, pushStep{cfg, nil, 0}},
		{"failover: inactive half rewritten, then the flip", []pushStep{{cfg, nil, 0}}, pushStep{cfg, down, 1}},
		{"failback after a failover: flip to a complete half", []pushStep{{cfg, nil, 0}, {cfg, down, 1}}, pushStep{cfg, nil, 2}},
		{"ring grows 131 → 257 slots", []pushStep{{cfg, nil, 0}}, pushStep{bigger, nil, 1}},
		{"service removed: VIP, service, ring, backend deletes", []pushStep{{cfg, nil, 0}}, pushStep{noDNS, nil, 1}},
	}
	const batch = 64 // bench.open
	for _, tc := range cases {
		// The diff of the push, to choose where to fail it.
		probe := newBench(t, true, p4rt.Options{})
		ptg := probe.open(t, 1)
		for _, s := range tc.before {
			if _, err := push(t, ptg, s.cfg, s.st, s.now); err != nil {
				t.Fatal(err)
			}
		}
		probe.srv.ResetLog()
		d, err := push(t, ptg, tc.push.cfg, tc.push.st, tc.push.now)
		if err != nil {
			t.Fatal(err)
		}
		ws := writesOf(probe.srv.Log()) // the diff's changes, and the ring pool's own writes
		ptg.Close()
		probe.srv.Stop()
		for _, n := range failPoints(ws, batch) {
			w := ws[n-1]
			t.Run(fmt.Sprintf("%s/update %d of %d (%s %s)", tc.name, n, len(ws), w.op, w.table), func(t *testing.T) {
				b := newBench(t, true, p4rt.Options{})
				tg := b.open(t, 1)
				for _, s := range tc.before {
					if _, err := push(t, tg, s.cfg, s.st, s.now); err != nil {
						t.Fatal(err)
					}
				}
				old, err := tg.Read(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				want := compile(t, tc.push.cfg, tc.push.st, old, tc.push.now)
				var violation error
				b.srv.OnUpdate(func(v p4rt.View) {
					if violation != nil {
						return
					}
					for id, ring := range activeRings(t, v) {
						if err := wholeRingOf(id, ring, old, want); err != nil {
							violation = err
							return
						}
					}
				})
				b.srv.FailUpdate(n, codes.Internal)
				b.srv.ResetLog()

				// (a) The push fails and names the update that failed.
				_, err = push(t, tg, tc.push.cfg, tc.push.st, tc.push.now)
				var rej *RejectedError
				if !errors.As(err, &rej) {
					t.Fatalf("push error %v, want a RejectedError", err)
				}
				if len(rej.Rejected) != 1 || !strings.HasPrefix(rej.Rejected[0], w.op+" "+w.table) || !strings.Contains(rej.Rejected[0], ": INTERNAL: ") {
					t.Fatalf("the error does not name update %d (%s %s): %v", n, w.op, w.table, err)
				}
				applied := len(b.srv.Log())
				if rej.Applied != applied {
					t.Fatalf("the error says %d writes applied, the switch applied %d", rej.Applied, applied)
				}
				// (b) After every update, and now: old or new complete ring.
				if violation != nil {
					t.Fatalf("after a partial write: %v", violation)
				}
				b.srv.Snapshot(func(v p4rt.View) {
					for id, ring := range activeRings(t, v) {
						if err := wholeRingOf(id, ring, old, want); err != nil {
							t.Fatalf("after the failed push: %v", err)
						}
					}
				})

				// (c) The next push writes what is missing, and only that;
				// with the ring pool, a ring written before its flip is
				// outside every row's region, so it is deleted (strays)
				// and written again.
				held, err := tg.Read(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				strays := len(tg.strays)
				again := compile(t, tc.push.cfg, tc.push.st, held, tc.push.now)
				unborn := 0 // services of the push whose row was never written
				for i := range want.Services {
					if held.ServiceByName(want.Services[i].Name) == nil && old.ServiceByName(want.Services[i].Name) == nil {
						unborn++
					}
				}
				b.srv.OnUpdate(func(v p4rt.View) {
					if violation != nil {
						return
					}
					for id, ring := range activeRings(t, v) {
						if err := wholeRingOf(id, ring, old, again); err != nil {
							violation = err
							return
						}
					}
				})
				b.srv.ResetLog()
				rd, err := push(t, tg, tc.push.cfg, tc.push.st, tc.push.now)
				if err != nil {
					t.Fatalf("the next push: %v", err)
				}
				if violation != nil {
					t.Fatalf("during the next push: %v", violation)
				}
				tableWrites := 0
				for _, e := range b.srv.Log() {
					if e.Table != tTunnelSource && e.Table != tEgressMTU {
						tableWrites++
					}
				}
				if unborn == 0 {
					if d := compiler.DiffIR(want, again); !d.Empty() {
						t.Fatalf("the next push compiles another state than the failed one:\n%s", d.Summary())
					}
					// Every ring entry is in a region a row or a slot 0
					// names, so none is a stray, and the next diff is what
					// the failed one did not apply.
					missing := len(d.Changes) - rej.Changes
					if strays != 0 {
						t.Fatalf("%d ring entries outside every region after a push cut short: a row or slot 0 should name each ring's region", strays)
					}
					if tableWrites != missing || len(rd.Changes) != missing {
						t.Fatalf("the next push wrote %d updates (diff %d), %d changes were missing:\n%s", tableWrites, len(rd.Changes), missing, rd.Summary())
					}
				} else {
					// No row of the new services reached the switch, so
					// nothing tells a fresh compile the IDs the failed push
					// gave them: it allocates new ones, writes those
					// services whole and deletes the orphaned rows.
					t.Logf("%d new service(s) without a row on the switch: the next push wrote them again under new IDs (%d writes)", unborn, tableWrites)
				}
				mustHold(t, tg, again)
				b.srv.ResetLog()
				if rd, err := push(t, tg, tc.push.cfg, tc.push.st, tc.push.now); err != nil || !rd.Empty() {
					t.Fatalf("converged switch: push wrote %d (%v)", len(rd.Changes), err)
				}
			})
		}
	}
}
