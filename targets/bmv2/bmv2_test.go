package bmv2

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/testbench/p4rt"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// p4infoPath is the P4Info p4c produced for p4/lb.p4, or the hand-written
// fixture of testbench/p4rt while p4/build/ does not exist.
func p4infoPath(t testing.TB) string {
	built := filepath.Join("..", "..", "p4", "build", "lb.p4info.txtpb")
	if _, err := os.Stat(built); err == nil {
		return built
	}
	t.Logf("p4/build/lb.p4info.txtpb absent (run make p4): using the test fixture P4Info")
	return filepath.Join("..", "..", "testbench", "p4rt", "testdata", "lb-fixture.p4info.txtpb")
}

type bench struct {
	srv  *p4rt.Server
	path string
}

// newBench starts a test server with lb.p4's P4Info already installed
// (preload) or with no pipeline (the first Open pushes it).
func newBench(t testing.TB, preload bool, opts p4rt.Options) *bench {
	t.Helper()
	path := p4infoPath(t)
	if preload {
		s, err := runtime.LoadP4Info(path)
		if err != nil {
			t.Fatal(err)
		}
		opts.P4Info = s.Info
	}
	opts.DeviceID = 1
	srv, err := p4rt.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return &bench{srv: srv, path: path}
}

func (b *bench) open(t testing.TB, election uint64) *Target {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tg, err := Open(ctx, Options{Options: runtime.Options{Addr: b.srv.Addr(), DeviceID: 1, ElectionLow: election, BatchSize: 64}, P4InfoPath: b.path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg
}

const testConfig = `
tunnel: {sourceIPv4: 192.0.2.1, sourceIPv6: "2001:db8::1"}
services:
  - name: web
    vip: 203.0.113.10
    protocol: TCP
    ports: [80, 443]
    ringSize: 131
    failoverPolicy: {failoverRatio: 0.5}
    connectionDraining: {drainingTimeoutSec: 30}
    backends:
      - name: ig-a
        endpoints:
          - {name: vm-a1, ip: 10.0.1.1}
          - {name: vm-a2, ip: 10.0.1.2}
      - name: ig-b
        failover: true
        endpoints:
          - {name: vm-b1, ip: 10.0.2.1}
          - {name: vm-b2, ip: 10.0.2.2}
  - name: dns
    vip: "2001:db8::53"
    protocol: UDP
    ports: ALL
    ringSize: 53
    sessionAffinity: CLIENT_IP
    connectionTrackingPolicy: {trackingMode: PER_SESSION}
    encapsulation: L2_DSR
    backends:
      - name: ig-dns
        endpoints:
          - {name: ns1, ip: "2001:db8:1::1", mac: "02:00:00:00:00:01"}
          - {name: ns2, ip: "2001:db8:1::2", mac: "02:00:00:00:00:02"}
`

func load(t testing.TB, yaml string) *compiler.Config {
	t.Helper()
	dec, err := compiler.Load("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return dec.Config
}

func compile(t testing.TB, cfg *compiler.Config, st compiler.State, prev *compiler.IR, now float64) *compiler.IR {
	t.Helper()
	res, err := compiler.Compile(compiler.Input{Config: cfg, State: st, Prev: prev, Now: time.Duration(now * float64(time.Second))})
	if err != nil {
		t.Fatal(err)
	}
	return res.IR
}

// push is what `lbc push` does: read, compile against it, apply the diff.
func push(t testing.TB, tg *Target, cfg *compiler.Config, st compiler.State, now float64) (compiler.Diff, error) {
	t.Helper()
	ctx := context.Background()
	held, err := tg.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ir := compile(t, cfg, st, held, now)
	d := compiler.DiffIR(held, ir)
	strays := len(tg.strays) // ring entries outside every region: deleted first
	stats, err := tg.Apply(ctx, d)
	if err == nil && stats.Writes != len(d.Changes)+strays {
		t.Fatalf("Apply wrote %d of %d changes (and %d ring entries outside every region) without an error", stats.Writes, len(d.Changes), strays)
	}
	if err == nil {
		if _, err := tg.SetTunnelSource(ctx, ir.TunnelSource4, ir.TunnelSource6); err != nil {
			t.Fatal(err)
		}
	}
	return d, err
}

// mustHold asserts that the switch holds exactly ir's datapath state.
func mustHold(t *testing.T, tg *Target, ir *compiler.IR) *compiler.IR {
	t.Helper()
	back, err := tg.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d := compiler.DiffIR(back, ir); !d.Empty() {
		t.Fatalf("switch does not hold the compiled IR; diff:\n%s\nfirst: %s", d.Summary(), d.Changes[0])
	}
	return back
}

// Push, read back, and push again: the second push writes nothing, and the
// read-back IR carries names and tunnel sources.
func TestPushReadBackIdempotent(t *testing.T) {
	b := newBench(t, false, p4rt.Options{})
	tg := b.open(t, 1)
	if !tg.PipelinePushed() {
		t.Fatal("Open did not push the pipeline to an empty switch")
	}
	cfg := load(t, testConfig)
	d, err := push(t, tg, cfg, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := d.Counts()
	if c[compiler.TableRing][compiler.Insert] != 131+53 || c[compiler.TableService][compiler.Insert] != 2 || c[compiler.TableVIP][compiler.Insert] != 3 || c[compiler.TableBackend][compiler.Insert] != 6 {
		t.Fatalf("first push counts: %v", c)
	}
	want := compile(t, cfg, nil, nil, 0)
	back := mustHold(t, tg, want)
	if s := back.ServiceByName("web"); s == nil || back.ServiceByName("dns") == nil {
		t.Fatalf("service names lost on read-back: %+v", back.Services)
	}
	if bk := back.Backend(want.Backends[0].ID); bk == nil || bk.Name != want.Backends[0].Name {
		t.Fatalf("backend name lost on read-back")
	}
	if back.TunnelSource4.String() != "192.0.2.1" || back.TunnelSource6.String() != "2001:db8::1" {
		t.Fatalf("tunnel sources read back as %v %v", back.TunnelSource4, back.TunnelSource6)
	}
	if back.NextServiceID != want.NextServiceID || back.NextBackendID != want.NextBackendID {
		t.Fatalf("next IDs read back as %d/%d, want %d/%d", back.NextServiceID, back.NextBackendID, want.NextServiceID, want.NextBackendID)
	}

	b.srv.ResetLog()
	d, err = push(t, tg, cfg, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Empty() || b.srv.WriteRPCs() != 0 {
		t.Fatalf("re-push wrote %d changes in %d RPCs, want 0", len(d.Changes), b.srv.WriteRPCs())
	}
}

// R-ELIG-3, design decision 4, issue 35: a failover push writes the new
// ring into the inactive half, the health flags of the backends that
// changed, one service row (the flip) after every ring insert, and after
// it, in a later batch (the barrier), the deletes of the old half —
// nothing else.
func TestRELIG3_FailoverPushIsRingDiffPlusOneFlip(t *testing.T) {
	b := newBench(t, true, p4rt.Options{})
	tg := b.open(t, 1)
	cfg := load(t, testConfig)
	if _, err := push(t, tg, cfg, nil, 0); err != nil {
		t.Fatal(err)
	}
	before, _ := tg.Read(context.Background())
	web := before.ServiceByName("web")
	oldRing := append([]uint32(nil), before.ActiveRing(web)...)

	st := compiler.State{}
	st.SetHealthy("vm-a1", false)
	st.SetHealthy("vm-a2", false) // no healthy primary: failover (R-ELIG-3a)
	b.srv.ResetLog()
	d, err := push(t, tg, cfg, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	after := mustHold(t, tg, compile(t, cfg, st, before, 0))
	wafter := after.ServiceByName("web")
	if wafter.ActiveHalf == web.ActiveHalf {
		t.Fatal("failover did not flip the ring half")
	}
	newRing := after.ActiveRing(wafter)
	c := d.Counts()
	if got := c[compiler.TableRing]; got != [3]int{len(newRing), 0, len(oldRing)} {
		t.Errorf("ring writes %v, want the %d slots of the new ring inserted and the %d of the old deleted", got, len(newRing), len(oldRing))
	}
	if got := c[compiler.TableService]; got != [3]int{0, 1, 0} {
		t.Errorf("service writes %v, want one modify (the flip)", got)
	}
	if got := c[compiler.TableBackend]; got != [3]int{0, 2, 0} {
		t.Errorf("backend writes %v, want 2 modifies (vm-a1, vm-a2 unhealthy)", got)
	}
	if got, ok := c[compiler.TableVIP]; ok {
		t.Errorf("VIP writes %v, want none", got)
	}
	// What the switch applied, not only what the diff planned.
	log := b.srv.Log()
	applied := map[string]int{}
	for _, e := range log {
		applied[e.Table]++
	}
	if want := map[string]int{"ring": len(newRing) + len(oldRing), "backend": 2, "service": 1}; !reflect.DeepEqual(applied, want) {
		t.Errorf("the switch applied %v, want %v", applied, want)
	}
	checkFlipOrder(t, log)
}

// checkFlipOrder: in what a switch applied, every ring insert comes before
// the service flip, and every ring delete after it, in a later Write RPC
// (the batch after the diff's barrier, written once compiler.Grace is past).
func checkFlipOrder(t *testing.T, log []p4rt.LogEntry) {
	t.Helper()
	flip := -1
	for i, e := range log {
		if e.Table == "service" {
			flip = i
		}
	}
	if flip < 0 {
		t.Fatal("no service write")
	}
	for i, e := range log {
		if e.Table != "ring" {
			continue
		}
		switch {
		case e.Type == p4v1.Update_DELETE && (i < flip || e.RPC == log[flip].RPC):
			t.Fatalf("ring delete %d comes before the flip or in its RPC (%d)", i, e.RPC)
		case e.Type != p4v1.Update_DELETE && i > flip:
			t.Fatalf("ring write %d (%v) after the flip", i, e.Type)
		}
	}
}

// holdsWholeRings is the hitless invariant: every service row points at a
// ring half whose slots 0..ring_size-1 are all written with backends the
// backend table holds, and every VIP points at a service row.
func holdsWholeRings(v p4rt.View) error {
	tr, err := NewTranslator(v.Schema())
	if err != nil {
		return err
	}
	tabs := Tables{}
	for _, n := range []string{tVIPPort, tVIPProto, tVIPAddr, tService, tRing, tBackend} {
		tabs[n] = v.Entries(n)
	}
	ir, err := tr.IR(tabs, nil)
	if err != nil {
		return err
	}
	for _, vip := range ir.VIPs {
		if ir.Service(vip.ServiceID) == nil {
			return fmt.Errorf("VIP %v points at service %d, which is not written", vip.Key.VIP, vip.ServiceID)
		}
	}
	for i := range ir.Services {
		s := &ir.Services[i]
		if s.NoBackends {
			continue
		}
		ring := ir.ActiveRing(s)
		if uint32(len(ring)) < s.RingSize {
			return fmt.Errorf("service %q points at half %d holding %d of %d slots", s.Name, s.ActiveHalf, len(ring), s.RingSize)
		}
		for slot := uint32(0); slot < s.RingSize; slot++ {
			if ring[slot] == 0 {
				return fmt.Errorf("service %q half %d slot %d is not written", s.Name, s.ActiveHalf, slot)
			}
			if ir.Backend(ring[slot]) == nil {
				return fmt.Errorf("service %q half %d slot %d points at backend %d, which is not written", s.Name, s.ActiveHalf, slot, ring[slot])
			}
		}
	}
	return nil
}

// Design decision 4, recorded: the server applies each batch in a random
// order and checks after every single update that no packet could see a
// partial ring, across first push, failover, failback, drain, a new
// service and a deleted one.
func TestWriteOrderKeepsWholeRings(t *testing.T) {
	b := newBench(t, true, p4rt.Options{Shuffle: true, Seed: 42})
	var violation error
	updates := 0
	b.srv.OnUpdate(func(v p4rt.View) {
		updates++
		if violation == nil {
			violation = holdsWholeRings(v)
		}
	})
	tg := b.open(t, 1)
	cfg := load(t, testConfig)
	down := compiler.State{}
	down.SetHealthy("vm-a1", false)
	down.SetHealthy("vm-a2", false)
	noA2 := load(t, strings.Replace(testConfig, "          - {name: vm-a2, ip: 10.0.1.2}\n", "", 1))
	extra := load(t, testConfig+`
  - name: extra
    vip: 198.51.100.7
    protocol: L3_DEFAULT
    ringSize: 31
    backends:
      - name: ig-x
        endpoints:
          - {name: x1, ip: 10.9.0.1}
`)
	onlyWeb := load(t, strings.SplitN(testConfig, "  - name: dns", 2)[0])
	steps := []struct {
		name string
		cfg  *compiler.Config
		st   compiler.State
		now  float64
	}{
		{"first push", cfg, nil, 0},
		{"failover", cfg, down, 1},
		{"failback", cfg, nil, 2},
		{"vm-a2 removed (drains)", noA2, nil, 3},
		{"drain over", noA2, nil, 40},
		{"service added", extra, nil, 41},
		{"services removed", onlyWeb, nil, 42},
	}
	for _, s := range steps {
		held, _ := tg.Read(context.Background())
		if _, err := push(t, tg, s.cfg, s.st, s.now); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if violation != nil {
			t.Fatalf("%s: a packet could have seen a partial ring: %v", s.name, violation)
		}
		mustHold(t, tg, compile(t, s.cfg, s.st, held, s.now))
	}
	if updates == 0 {
		t.Fatal("the invariant was never checked")
	}
}

// A change the switch rejects is reported by name; the push stops before
// anything could point at it, and the next push repairs it.
func TestRejectedEntityNamedAndRepaired(t *testing.T) {
	b := newBench(t, true, p4rt.Options{})
	tg := b.open(t, 1)
	cfg := load(t, testConfig)
	b.srv.SetFault(func(s *runtime.Schema, u *p4v1.Update) error {
		e := u.GetEntity().GetTableEntry()
		if e != nil && strings.Contains(string(e.Metadata), `"vm-b1"`) {
			return status.Error(codes.ResourceExhausted, "backend table full (injected)")
		}
		return nil
	})
	_, err := push(t, tg, cfg, nil, 0)
	var rej *RejectedError
	if !errors.As(err, &rej) {
		t.Fatalf("push error %v, want a RejectedError", err)
	}
	if len(rej.Rejected) != 1 || !strings.Contains(rej.Rejected[0], `backend "vm-b1" of service "web"`) || !strings.Contains(rej.Rejected[0], "RESOURCE_EXHAUSTED") {
		t.Fatalf("rejection not named: %v", err)
	}
	// Nothing after the failed batch was written: no ring, service or VIP.
	b.srv.Snapshot(func(v p4rt.View) {
		if n := len(v.Entries("ring")) + len(v.Entries("service")) + len(v.Entries("vip_port")); n != 0 {
			t.Errorf("%d ring/service/VIP entries written after a rejected backend", n)
		}
	})
	b.srv.SetFault(nil)
	if _, err := push(t, tg, cfg, nil, 1); err != nil {
		t.Fatalf("repair push: %v", err)
	}
	held, _ := tg.Read(context.Background())
	mustHold(t, tg, compile(t, cfg, nil, held, 1))
	if held.ServiceByName("web") == nil || len(held.Backends) != 6 {
		t.Fatalf("repair left %d backends, services %+v", len(held.Backends), held.Services)
	}
}

// Mastership loss stops writes: a controller with a higher election ID
// takes over; the old one's push writes nothing and says why; it writes
// again once the other leaves.
func TestMastershipLossStopsWrites(t *testing.T) {
	b := newBench(t, true, p4rt.Options{})
	a := b.open(t, 1)
	cfg := load(t, testConfig)
	if _, err := push(t, a, cfg, nil, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lost := a.Client().Changed()
	other, err := runtime.Dial(ctx, runtime.Options{Addr: b.srv.Addr(), DeviceID: 1, ElectionLow: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.WaitPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	for a.Client().IsPrimary() {
		select {
		case <-lost:
			lost = a.Client().Changed()
		case <-ctx.Done():
			t.Fatal("controller 1 never learnt it lost mastership")
		}
	}
	b.srv.ResetLog()
	down := compiler.State{}
	down.SetHealthy("vm-a1", false)
	_, err = push(t, a, cfg, down, 1)
	if !errors.Is(err, runtime.ErrNotPrimary) || !strings.Contains(err.Error(), "election ID 0:2 is primary") {
		t.Fatalf("push after mastership loss: %v", err)
	}
	if n := len(b.srv.Log()); n != 0 {
		t.Fatalf("%d updates applied after mastership loss", n)
	}
	other.Close()
	for !a.Client().IsPrimary() {
		select {
		case <-lost:
			lost = a.Client().Changed()
		case <-ctx.Done():
			t.Fatal("controller 1 not primary again after the other left")
		}
	}
	if _, err := push(t, a, cfg, down, 2); err != nil {
		t.Fatal(err)
	}
}

// A restarted lbc (new connection, nothing in memory) with an unchanged
// configuration writes nothing — names, failover side, draining deadlines
// and next IDs come back from the switch.
func TestRestartedLbcWritesNothing(t *testing.T) {
	b := newBench(t, true, p4rt.Options{})
	cfg := load(t, testConfig)
	noA2 := load(t, strings.Replace(testConfig, "          - {name: vm-a2, ip: 10.0.1.2}\n", "", 1))
	down := compiler.State{}
	down.SetHealthy("vm-a1", false)
	down.SetHealthy("vm-a2", false)

	first := b.open(t, 1)
	for i, s := range []struct {
		cfg *compiler.Config
		st  compiler.State
	}{{cfg, nil}, {cfg, down}, {noA2, nil}} {
		if _, err := push(t, first, s.cfg, s.st, float64(i)); err != nil {
			t.Fatal(err)
		}
	}
	first.Close()

	second := b.open(t, 1)
	b.srv.ResetLog()
	held, err := second.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if a2 := findBackend(held, "vm-a2"); a2 == nil || !a2.Draining || a2.Deadline != 32*time.Second {
		t.Fatalf("draining vm-a2 read back as %+v", a2)
	}
	d, err := push(t, second, noA2, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Empty() || b.srv.WriteRPCs() != 0 {
		t.Fatalf("restarted push wrote %d changes in %d RPCs:\n%s", len(d.Changes), b.srv.WriteRPCs(), d.Summary())
	}
}

func findBackend(ir *compiler.IR, name string) *compiler.BackendRow {
	for i := range ir.Backends {
		if ir.Backends[i].Name == name {
			return &ir.Backends[i]
		}
	}
	return nil
}

// The pipeline is pushed once: a second Open finds the same cookie.
func TestPipelinePushedOnce(t *testing.T) {
	b := newBench(t, false, p4rt.Options{})
	first := b.open(t, 1)
	if !first.PipelinePushed() {
		t.Fatal("first Open did not push")
	}
	first.Close()
	if tg := b.open(t, 1); tg.PipelinePushed() {
		t.Fatal("second Open pushed the same pipeline again")
	}
}

// The fallback port and tunnel sources are written once, then left alone.
func TestDefaultEntriesIdempotent(t *testing.T) {
	b := newBench(t, true, p4rt.Options{})
	tg := b.open(t, 1)
	ctx := context.Background()
	for i, want := range []bool{true, false} {
		wrote, err := tg.SetFallbackPort(ctx, 7)
		if err != nil || wrote != want {
			t.Fatalf("SetFallbackPort #%d: wrote %v err %v", i, wrote, err)
		}
	}
	if _, err := tg.SetFallbackPort(ctx, 4096); err == nil || !strings.Contains(err.Error(), "9 bits") {
		t.Fatalf("port 4096 on a 9-bit port: %v", err)
	}
}

// Counters come back per service and backend ID (with the ICMP errors that
// quoted no tracked flow, R-CT-3), and drops by reason; a read-only
// connection (status) reads without arbitration.
func TestCountersReadOnly(t *testing.T) {
	b := newBench(t, true, p4rt.Options{})
	tg := b.open(t, 1)
	cfg := load(t, testConfig)
	if _, err := push(t, tg, cfg, nil, 0); err != nil {
		t.Fatal(err)
	}
	ir, _ := tg.Read(context.Background())
	web := ir.ServiceByName("web")
	b1 := findBackend(ir, "vm-b1")
	for _, c := range []struct {
		name  string
		index int64
	}{{"service_packets", int64(web.ID)}, {"service_new_conns", int64(web.ID)}, {"backend_new_conns", int64(b1.ID)}, {"drops", 0}, {"fallback_packets", 0}} {
		if err := b.srv.SetCounter(c.name, c.index, 10, 1500); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.srv.SetCounter("service_icmp_error_misses", int64(web.ID), 3, 0); err != nil {
		t.Fatal(err)
	}
	ro, err := Open(context.Background(), Options{Options: runtime.Options{Addr: b.srv.Addr(), DeviceID: 1, ReadOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	cnt, err := ro.Counters(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s := cnt.Services[web.ID]; s.Packets != 10 || s.Bytes != 1500 || s.NewConnections != 10 || s.ICMPErrorMisses != 3 {
		t.Errorf("service counters %+v", s)
	}
	if cnt.Backends[b1.ID].NewConnections != 10 || cnt.Drops["no-backends"] != 10 || cnt.FallbackPunts != 10 {
		t.Errorf("counters %+v", cnt)
	}
	if _, err := ro.Apply(context.Background(), compiler.DiffIR(nil, ir)); !errors.Is(err, runtime.ErrNotPrimary) {
		t.Errorf("read-only Apply: %v", err)
	}
}

// TestEnsureProgramRestoresPipelineAndDefaults (issue 25, item 1): a
// switch that restarts empty gets the pipeline again, then the fallback
// port, tunnel sources and egress MTU the target had set; on a switch that
// runs the pipeline, EnsureProgram does nothing.
func TestEnsureProgramRestoresPipelineAndDefaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func(addr string) *p4rt.Server {
		srv, err := p4rt.New(p4rt.Options{DeviceID: 1})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; ; i++ {
			err := srv.Start(addr)
			if err == nil {
				break
			}
			if i == 100 {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Cleanup(srv.Stop)
		return srv
	}
	srv := start("127.0.0.1:0")
	addr := srv.Addr()
	info, err := os.ReadFile(p4infoPath(t))
	if err != nil {
		t.Fatal(err)
	}
	tg, err := Open(ctx, Options{Options: runtime.Options{Addr: addr, DeviceID: 1, ElectionLow: 1, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond},
		P4Info: info, DeviceConfig: []byte(`{"program": "lb.p4"}`), PipelineIfAbsent: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	if !tg.PipelinePushed() {
		t.Fatal("Open did not push the pipeline to an empty switch")
	}
	if _, err := tg.SetFallbackPort(ctx, 3); err != nil {
		t.Fatal(err)
	}
	ir := &compiler.IR{TunnelSource4: netip.MustParseAddr("192.0.2.1"), MTU: 1400}
	if err := tg.Commit(ir); err != nil {
		t.Fatal(err)
	}
	defaults := func(s *p4rt.Server) map[string]string {
		out := map[string]string{}
		s.Snapshot(func(v p4rt.View) {
			for _, name := range []string{tFallback, tTunnelSource, tEgressMTU} {
				out[name] = v.Default(name).GetAction().String()
			}
		})
		return out
	}
	want := defaults(srv)
	for name, a := range want {
		if a == "" {
			t.Fatalf("default entry of %s not set", name)
		}
	}
	if pushed, err := tg.EnsureProgram(ctx); pushed || err != nil {
		t.Fatalf("EnsureProgram on a switch that runs the pipeline: pushed %v, %v", pushed, err)
	}

	_, term, _ := tg.Mastership()
	srv.Stop()
	srv = start(addr)
	for {
		ch := tg.MastershipChanges()
		if primary, now, lost := tg.Mastership(); primary && lost == nil && now > term {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatal("no new session with the restarted switch")
		}
	}
	if pushed, err := tg.EnsureProgram(ctx); !pushed || err != nil {
		t.Fatalf("EnsureProgram on the restarted switch: pushed %v, %v", pushed, err)
	}
	if got := defaults(srv); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("defaults after the pipeline was pushed again:\n%v\nwant\n%v", got, want)
	}
	if back, err := tg.Read(ctx); err != nil || back.TunnelSource4 != ir.TunnelSource4 || back.MTU != ir.MTU {
		t.Fatalf("read back: %+v, %v", back, err)
	}
}

// TestReadBackShowsStoredFieldsInForce (issue 31, item 5): a group that
// becomes a failover group changes no datapath field of its endpoints'
// rows, only the flag their metadata stores; targets.DiffFor writes it,
// so that what the switch reads back (lbc status --target) is the truth,
// and a second push writes nothing.
func TestReadBackShowsStoredFieldsInForce(t *testing.T) {
	b := newBench(t, true, p4rt.Options{})
	tg := b.open(t, 1)
	ctx := context.Background()
	pushFor := func(cfg *compiler.Config) compiler.Diff {
		t.Helper()
		held, err := tg.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d := targets.DiffFor(tg, held, compile(t, cfg, nil, held, 0))
		if _, err := tg.Apply(ctx, d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	pushFor(load(t, strings.Replace(testConfig, "        failover: true\n", "", 1)))
	pushFor(load(t, testConfig))
	held, err := tg.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"vm-b1", "vm-b2"} {
		if r := findBackend(held, name); r == nil || !r.Failover {
			t.Errorf("%s read back as %+v, want failover (its group became a failover group)", name, r)
		}
	}
	if d := pushFor(load(t, testConfig)); !d.Empty() {
		t.Errorf("a second push writes %d changes:\n%s", len(d.Changes), d.Summary())
	}
}

// TestReadCutShortFailsWhole (issue 31, item 5): a read-back whose
// context ends part-way (the session with the switch ended: the
// controller cancels it) fails at that RPC, whichever it is, and returns
// no state. Reads of the default entries used to swallow the error as
// "never written", so the read went on to convert everything it had and
// returned a state without tunnel sources or MTU as if it were the
// switch's.
func TestReadCutShortFailsWhole(t *testing.T) {
	b := newBench(t, true, p4rt.Options{})
	tg := b.open(t, 1)
	if _, err := push(t, tg, load(t, testConfig), nil, 0); err != nil {
		t.Fatal(err)
	}
	ent := func(req *p4v1.ReadRequest) *p4v1.TableEntry {
		if len(req.Entities) != 1 {
			return nil
		}
		return req.Entities[0].GetTableEntry()
	}
	for _, tc := range []struct {
		name string
		at   func(*p4v1.TableEntry) bool
	}{
		{"ring", func(e *p4v1.TableEntry) bool { return e.TableId == tg.tr.TableID(tRing) && !e.IsDefaultAction }},
		{"tunnel source default", func(e *p4v1.TableEntry) bool {
			return e.TableId == tg.tr.TableID(tTunnelSource) && e.IsDefaultAction
		}},
		{"MTU default", func(e *p4v1.TableEntry) bool { return e.TableId == tg.tr.TableID(tEgressMTU) && e.IsDefaultAction }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			b.srv.OnRead(func(req *p4v1.ReadRequest) {
				if e := ent(req); e != nil && tc.at(e) {
					cancel()
				}
			})
			defer b.srv.OnRead(nil)
			ir, err := tg.Read(ctx)
			if err == nil || !errors.Is(err, context.Canceled) && status.Code(err) != codes.Canceled {
				t.Fatalf("read cut short at the %s: %v (IR with %d services), want the context's error", tc.name, err, len(irServices(ir)))
			}
			if ir != nil {
				t.Fatalf("read cut short at the %s returned a state", tc.name)
			}
		})
	}
	// The same reads, not cut short, give the whole state.
	held, err := tg.Read(context.Background())
	if err != nil || held.TunnelSource4.String() != "192.0.2.1" {
		t.Fatalf("read back: %v", err)
	}
	// Cut short after the reads, the conversion of the ring stops too.
	tabs := Tables{}
	for _, name := range []string{tVIPPort, tVIPProto, tVIPAddr, tService, tRing, tBackend} {
		if tabs[name], err = tg.c.ReadTable(context.Background(), tg.tr.TableID(name)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if ir, err := tg.tr.IRContext(ctx, tabs, nil); !errors.Is(err, context.Canceled) || ir != nil {
		t.Fatalf("conversion after the context ended: %v, %v; want the context's error", ir != nil, err)
	}
	if _, err := tg.tr.IRContext(context.Background(), tabs, nil); err != nil {
		t.Fatal(err)
	}
}

func irServices(ir *compiler.IR) []compiler.ServiceRow {
	if ir == nil {
		return nil
	}
	return ir.Services
}
