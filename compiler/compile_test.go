package compiler

import (
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestRCT_SynNew: R-CT-1 (PER_CONNECTION: every SYN is new) and R-CT-2
// (PER_SESSION: only with 5-tuple affinities).
func TestRCT_SynNew(t *testing.T) {
	for _, tt := range []struct {
		mode, aff string
		want      bool
	}{
		{TrackPerConnection, AffinityNone, true},
		{TrackPerConnection, AffinityClientIP, true},
		{TrackPerConnection, AffinityClientIPProto, true},
		{TrackPerConnection, AffinityClientIPPortProto, true},
		{TrackPerSession, AffinityNone, true},
		{TrackPerSession, AffinityClientIPPortProto, true},
		{TrackPerSession, AffinityClientIP, false},
		{TrackPerSession, AffinityClientIPProto, false},
	} {
		if got := SynNew(tt.mode, tt.aff); got != tt.want {
			t.Errorf("%s %s: SynNew %v, want %v", tt.mode, tt.aff, got, tt.want)
		}
	}
}

// TestRFRAG_Effective: fragments lose their ports, so a 5-tuple becomes the
// 3-tuple; 2- and 3-tuples are unchanged.
func TestRFRAG_Effective(t *testing.T) {
	if Effective(Tuple5, true) != Tuple3 || Effective(Tuple5, false) != Tuple5 || Effective(Tuple2, true) != Tuple2 || Effective(Tuple3, true) != Tuple3 {
		t.Fatal("Effective wrong")
	}
}

func loadExample(t testing.TB, name string) *Config {
	t.Helper()
	b, err := os.ReadFile("../examples/" + name)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Load(name, b)
	if err != nil {
		t.Fatal(err)
	}
	return d.Config
}

func compileOK(t testing.TB, in Input) *Result {
	t.Helper()
	r, err := Compile(in)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCompileIdempotent: compiling again against what a target holds
// writes nothing, and a diff applied to the old IR yields the new one.
func TestCompileIdempotent(t *testing.T) {
	cfg := loadExample(t, "failover.yaml")
	a := compileOK(t, Input{Config: cfg})
	d := DiffIR(nil, a.IR)
	held := d.Apply(&IR{})
	b := compileOK(t, Input{Config: cfg, Prev: a.IR})
	if d := DiffIR(a.IR, b.IR); !d.Empty() {
		t.Fatalf("recompile wrote %s", d.Summary())
	}
	if d := DiffIR(held, b.IR); !d.Empty() {
		t.Fatalf("diff from the applied IR: %s", d.Summary())
	}
	c := d.Counts()
	if c[TableRing][Insert] != 1024 || // auto: 8 endpoints at 1 %, one half at rest
		c[TableService][Insert] != 1 || c[TableVIP][Insert] != 2 || c[TableBackend][Insert] != 8 {
		t.Fatalf("first push counts %v", c)
	}
}

// TestREPOCH_FailoverFlip walks seed 001 through the compiler: each
// failover and failback writes the new ring into the inactive half and
// flips the service row in one write; with drain disabled the epoch bumps
// (R-EPOCH), with it enabled it does not.
func TestREPOCH_FailoverFlip(t *testing.T) {
	for _, disable := range []bool{false, true} {
		t.Run(fmt.Sprintf("disableConnectionDrainOnFailover=%v", disable), func(t *testing.T) {
			cfg := loadExample(t, "failover.yaml")
			cfg.Services[0].FailoverPolicy.DisableConnectionDrainOnFailover = disable
			st := State{}
			prev := compileOK(t, Input{Config: cfg, State: st}).IR
			steps := []struct {
				change   func()
				decision string
				flip     bool
				bump     bool
			}{
				{func() { st.SetHealthy("vm-a1", false); st.SetHealthy("vm-d1", false) }, DecisionPrimary, true, false},
				{func() { st.SetHealthy("vm-a2", false) }, DecisionFailover, true, true},
				{func() { st.SetHealthy("vm-b1", false) }, DecisionFailover, true, false},
				{func() { st.SetHealthy("vm-a2", true) }, DecisionPrimary, true, true},
				{func() { st.SetHealthy("vm-c2", false) }, DecisionPrimary, false, false},
			}
			for i, s := range steps {
				s.change()
				next := compileOK(t, Input{Config: cfg, State: st, Prev: prev}).IR
				ps, ns := &prev.Services[0], &next.Services[0]
				if ns.Decision != s.decision {
					t.Fatalf("step %d: decision %s, want %s", i, ns.Decision, s.decision)
				}
				if flipped := ps.ActiveHalf != ns.ActiveHalf; flipped != s.flip {
					t.Fatalf("step %d: flipped %v, want %v", i, flipped, s.flip)
				}
				wantEpoch := ps.Epoch
				if s.bump && disable {
					wantEpoch++
				}
				if ns.Epoch != wantEpoch {
					t.Fatalf("step %d: epoch %d, want %d", i, ns.Epoch, wantEpoch)
				}
				d := DiffIR(prev, next)
				c := d.Counts()
				// Only the inactive half is written before the flip, one
				// service write; after a barrier the old half is deleted,
				// all of it, and nothing else is written.
				flipAt := -1
				for k, ch := range d.Changes {
					if ch.Service != nil {
						flipAt = k
					}
					if ch.Ring == nil {
						continue
					}
					if ch.Ring.Half == ps.ActiveHalf && (flipAt < 0 || ch.Op != Delete) {
						t.Fatalf("step %d: change %d wrote the served half before the flip: %s", i, k, ch)
					}
					if ch.Ring.Half != ps.ActiveHalf && flipAt >= 0 {
						t.Fatalf("step %d: change %d wrote the new half after the flip: %s", i, k, ch)
					}
				}
				if s.flip {
					if len(d.Barriers) != 1 || d.Barriers[0] != flipAt+1 {
						t.Fatalf("step %d: barriers %v, want one after the flip at %d", i, d.Barriers, flipAt)
					}
					if got, want := len(d.Changes)-flipAt-1, len(prev.ActiveRing(ps)); got != want {
						t.Fatalf("step %d: %d writes after the flip, want the %d deletes of the old half", i, got, want)
					}
				}
				wantSvc := 0
				if s.flip || ns.Epoch != ps.Epoch {
					wantSvc = 1
				}
				if c[TableService][Modify] != wantSvc {
					t.Fatalf("step %d: %d service writes, want %d", i, c[TableService][Modify], wantSvc)
				}
				applied := d.Apply(prev)
				if !DiffIR(applied, next).Empty() {
					t.Fatalf("step %d: applying the diff does not give the new IR", i)
				}
				prev = next
			}
		})
	}
}

// TestRDRAIN_Deadline: a removed backend keeps its row, marked draining,
// until drainingTimeoutSec has passed, and never takes new connections.
func TestRDRAIN_Deadline(t *testing.T) {
	cfg := loadExample(t, "failover.yaml") // drainingTimeoutSec: 30
	first := compileOK(t, Input{Config: cfg, Now: 100 * time.Second}).IR
	a1 := first.Backends[0]
	if a1.Name != "vm-a1" {
		t.Fatalf("first backend %s", a1.Name)
	}
	cfg.Services[0].Backends[0].Endpoints = cfg.Services[0].Backends[0].Endpoints[1:]
	second := compileOK(t, Input{Config: cfg, Prev: first, Now: 110 * time.Second}).IR
	row := second.Backend(a1.ID)
	if row == nil || !row.Draining || row.Deadline != 140*time.Second || row.DeadlineRule != "R-DRAIN" {
		t.Fatalf("removed backend row %+v, want draining until 140", row)
	}
	for _, id := range second.ActiveRing(&second.Services[0]) {
		if id == a1.ID {
			t.Fatal("draining backend still in the ring")
		}
	}
	third := compileOK(t, Input{Config: cfg, Prev: second, Now: 139900 * time.Millisecond}).IR
	if third.Backend(a1.ID) == nil || third.Backend(a1.ID).Deadline != 140*time.Second {
		t.Fatal("draining row lost or deadline moved before the timeout")
	}
	fourth := compileOK(t, Input{Config: cfg, Prev: third, Now: 140 * time.Second}).IR
	if fourth.Backend(a1.ID) != nil {
		t.Fatal("draining row kept past its deadline")
	}
	d := DiffIR(third, fourth)
	if c := d.Counts(); c[TableBackend][Delete] != 1 || len(d.Changes) != 1 {
		t.Fatalf("end of draining wrote %s", d.Summary())
	}
	// Without draining the row goes at once; IDs are never reused.
	cfg.Services[0].ConnectionDraining = nil
	cfg.Services[0].Backends[0].Endpoints = append(cfg.Services[0].Backends[0].Endpoints, Endpoint{Name: "vm-a9", IP: "10.0.1.9"})
	fifth := compileOK(t, Input{Config: cfg, Prev: fourth, Now: 200 * time.Second}).IR
	if b := fifth.Backends[len(fifth.Backends)-1]; b.Name != "vm-a9" || b.ID <= a1.ID || b.ID < first.NextBackendID {
		t.Fatalf("new backend got ID %d (%s); IDs must not be reused", b.ID, b.Name)
	}
}

// TestRWEIGHT0_KeepsRowLeavesRing: a weight-0 backend stays in the backend
// table (its connections continue) but owns no slot.
func TestRWEIGHT0_KeepsRowLeavesRing(t *testing.T) {
	cfg := loadExample(t, "weighted.yaml")
	st := State{}
	for n, w := range map[string]int{"api-1": 0, "api-2": 2, "api-3": 6, "api6-1": 1, "api6-2": 4} {
		st.SetWeight(n, w)
	}
	r := compileOK(t, Input{Config: cfg, State: st})
	row := r.IR.ServiceByName("api")
	var a1 *BackendRow
	for i := range r.IR.Backends {
		if r.IR.Backends[i].Name == "api-1" {
			a1 = &r.IR.Backends[i]
		}
	}
	if a1 == nil || !a1.Healthy {
		t.Fatal("weight-0 backend row missing or unhealthy")
	}
	for _, id := range r.IR.ActiveRing(row) {
		if id == a1.ID {
			t.Fatal("weight-0 backend owns a slot")
		}
	}
	if !reflect.DeepEqual(row.Eligible, []string{"api-2", "api-3"}) {
		t.Fatalf("eligible %v", row.Eligible)
	}
	delete(st, "api-2")
	if _, err := Compile(Input{Config: cfg, State: st}); err == nil {
		t.Fatal("weighted service compiled without a weight for api-2")
	}
}

// TestCompileNoBackendsKeepsRing: an empty eligible set (drop) marks the
// service and leaves the ring untouched for the next non-empty set.
func TestCompileNoBackendsKeepsRing(t *testing.T) {
	cfg := loadExample(t, "failover.yaml")
	cfg.Services[0].FailoverPolicy.DropTrafficIfUnhealthy = true
	st := State{}
	prev := compileOK(t, Input{Config: cfg, State: st}).IR
	for _, g := range cfg.Services[0].Backends {
		for _, e := range g.Endpoints {
			st.SetHealthy(e.Name, false)
		}
	}
	next := compileOK(t, Input{Config: cfg, State: st, Prev: prev}).IR
	s := next.Services[0]
	if !s.NoBackends || !s.AllUnhealthy || s.Decision != DecisionDrop || s.ActiveHalf != prev.Services[0].ActiveHalf {
		t.Fatalf("drop state %+v", s)
	}
	if c := DiffIR(prev, next).Counts(); c[TableRing] != [3]int{} {
		t.Fatalf("drop rewrote the ring: %v", c)
	}
}

// TestRingReuseSameTables: reusing unchanged rings gives exactly the tables
// a full rebuild gives, step by step through health and weight changes.
func TestRingReuseSameTables(t *testing.T) {
	cfg := loadExample(t, "weighted.yaml")
	cfg.Services = append(cfg.Services, loadExample(t, "failover.yaml").Services...)
	st := State{}
	for n, w := range map[string]int{"api-1": 1, "api-2": 2, "api-3": 6, "api6-1": 1, "api6-2": 4} {
		st.SetWeight(n, w)
	}
	changes := []func(){
		func() { st.SetHealthy("vm-a1", false) },
		func() { st.SetWeight("api-2", 0) },
		func() { st.SetHealthy("vm-a1", true) },
		func() {},
		func() { st.SetWeight("api-2", 2) },
	}
	var reused, rebuilt *IR
	for i, ch := range changes {
		ch()
		a := compileOK(t, Input{Config: cfg, State: st, Prev: reused})
		b := compileOK(t, Input{Config: cfg, State: st, Prev: rebuilt, NoRingReuse: true})
		if d := DiffIR(a.IR, b.IR); !d.Empty() {
			t.Fatalf("step %d: reuse and rebuild differ: %s", i, d.Summary())
		}
		for k, sr := range a.Services {
			if !reflect.DeepEqual(sr.Ring.Counts, b.Services[k].Ring.Counts) {
				t.Fatalf("step %d %s: counts %v vs %v", i, sr.Name, sr.Ring.Counts, b.Services[k].Ring.Counts)
			}
		}
		reused, rebuilt = a.IR, b.IR
	}
}

// BenchmarkCompileOneChange: one backend's health changes among many
// services; unchanged rings are reused.
func BenchmarkCompileOneChange(b *testing.B) {
	base := loadExample(b, "failover.yaml").Services[0]
	cfg := &Config{Tunnel: Tunnel{SourceIPv4: "192.0.2.1"}}
	for i := 0; i < 100; i++ {
		s := base
		s.Name = fmt.Sprintf("svc-%d", i)
		s.VIP = fmt.Sprintf("203.0.%d.%d", 113+i/250, 1+i%250)
		s.Backends = nil
		for _, g := range base.Backends {
			g.Endpoints = append([]Endpoint(nil), g.Endpoints...)
			for k := range g.Endpoints {
				g.Endpoints[k].Name = fmt.Sprintf("%s-%d", g.Endpoints[k].Name, i)
			}
			s.Backends = append(s.Backends, g)
		}
		cfg.Services = append(cfg.Services, s)
	}
	prev, err := Compile(Input{Config: cfg})
	if err != nil {
		b.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	var best, cpu time.Duration
	for i := 0; i < b.N; i++ {
		st := State{}
		st.SetHealthy("vm-a1-0", i%2 == 0)
		t0, c0 := time.Now(), threadCPU()
		if _, err := Compile(Input{Config: cfg, State: st, Prev: prev.IR}); err != nil {
			b.Fatal(err)
		}
		// Odd rounds rebuild one ring: report the fastest of those (load
		// on a shared machine only adds to it) and their mean CPU time.
		if i%2 == 1 {
			if d := time.Since(t0); best == 0 || d < best {
				best = d
			}
			cpu += threadCPU() - c0
		}
	}
	if best > 0 {
		b.ReportMetric(float64(best.Microseconds())/1000, "change-min-ms")
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N/2), "change-cpu-ms")
	}
}

// TestRPERSISTCAP_Deadlines walks seed 001 under loadBalancingScheme
// INTERNAL and checks every backend's deadline at every step: a backend
// outside the eligible set gets PersistCap (300 s) after the moment it
// left it — its health transition (State.Since) when it failed, the
// compile's time when a change of side moved it out — kept while it stays
// out, cleared when it is back. EXTERNAL sets none.
func TestRPERSISTCAP_Deadlines(t *testing.T) {
	const s = time.Second
	type want map[string]time.Duration // backend → deadline; absent: none
	fail := func(st State, at time.Duration, names ...string) {
		for _, n := range names {
			st.SetHealthy(n, false)
			st.SetSince(n, at)
		}
	}
	recover := func(st State, at time.Duration, names ...string) {
		for _, n := range names {
			st.SetHealthy(n, true)
			st.SetSince(n, at)
		}
	}
	cfg := loadExample(t, "failover.yaml")
	cfg.Services[0].LoadBalancingScheme = SchemeInternal
	st := State{}
	steps := []struct {
		what   string
		now    time.Duration
		change func()
		want   want
	}{
		// The failover backends are outside the set from the start: their
		// cap is dated by the first compile (they hold no entries yet).
		{"all healthy", 100 * s, func() {}, want{"vm-b1": 400 * s, "vm-b2": 400 * s, "vm-c1": 400 * s, "vm-c2": 400 * s}},
		{"a1 fails at 105, compiled at 110", 110 * s, func() { fail(st, 105*s, "vm-a1") }, want{"vm-a1": 405 * s, "vm-b1": 400 * s, "vm-b2": 400 * s, "vm-c1": 400 * s, "vm-c2": 400 * s}},
		{"d1 fails at 118", 120 * s, func() { fail(st, 118*s, "vm-d1") }, want{"vm-a1": 405 * s, "vm-d1": 418 * s, "vm-b1": 400 * s, "vm-b2": 400 * s, "vm-c1": 400 * s, "vm-c2": 400 * s}},
		{"a2 fails at 125: failover, d2 leaves the set at 130", 130 * s, func() { fail(st, 125*s, "vm-a2") },
			want{"vm-a1": 405 * s, "vm-d1": 418 * s, "vm-a2": 425 * s, "vm-d2": 430 * s}},
		{"nothing changes: deadlines kept", 200 * s, func() {}, want{"vm-a1": 405 * s, "vm-d1": 418 * s, "vm-a2": 425 * s, "vm-d2": 430 * s}},
		{"d2 fails while out: its deadline stays", 210 * s, func() { fail(st, 205*s, "vm-d2") }, want{"vm-a1": 405 * s, "vm-d1": 418 * s, "vm-a2": 425 * s, "vm-d2": 430 * s}},
		{"a2 and d2 recover at 238: failback at 240, the failover backends leave", 240 * s, func() { recover(st, 238*s, "vm-a2", "vm-d2") },
			want{"vm-a1": 405 * s, "vm-d1": 418 * s, "vm-b1": 540 * s, "vm-b2": 540 * s, "vm-c1": 540 * s, "vm-c2": 540 * s}},
		{"a1 recovers: back in the set, no deadline", 250 * s, func() { recover(st, 249*s, "vm-a1") },
			want{"vm-d1": 418 * s, "vm-b1": 540 * s, "vm-b2": 540 * s, "vm-c1": 540 * s, "vm-c2": 540 * s}},
		{"a1 fails again, no time recorded: dated by the compile", 260 * s, func() { st["vm-a1"] = BackendState{}; st.SetHealthy("vm-a1", false) },
			want{"vm-a1": 560 * s, "vm-d1": 418 * s, "vm-b1": 540 * s, "vm-b2": 540 * s, "vm-c1": 540 * s, "vm-c2": 540 * s}},
	}
	var prev, ext *IR
	for _, step := range steps {
		step.change()
		r := compileOK(t, Input{Config: cfg, State: st, Prev: prev, Now: step.now})
		got := want{}
		for _, b := range r.IR.Backends {
			if b.Deadline != 0 {
				got[b.Name] = b.Deadline
				if b.DeadlineRule != RulePersistCap {
					t.Errorf("%s: %s deadline rule %q", step.what, b.Name, b.DeadlineRule)
				}
			}
		}
		if !reflect.DeepEqual(got, step.want) {
			t.Errorf("%s: deadlines %v, want %v", step.what, got, step.want)
		}
		// The deadline is datapath state: a change of it is a write.
		if prev != nil {
			for _, ch := range DiffIR(prev, r.IR).Changes {
				if ch.Backend != nil && ch.Op == Modify {
					if o := prev.Backend(ch.Backend.ID); o.Deadline == ch.Backend.Deadline && o.Healthy == ch.Backend.Healthy {
						t.Errorf("%s: backend %s rewritten without a change", step.what, ch.Backend.Name)
					}
				}
			}
		}
		// EXTERNAL: the same rings, no deadline (R-PERSIST-CAP is INTERNAL's).
		ecfg := *cfg
		ecfg.Services = []Service{cfg.Services[0]}
		ecfg.Services[0].LoadBalancingScheme = ""
		er := compileOK(t, Input{Config: &ecfg, State: st, Prev: ext, Now: step.now})
		for _, b := range er.IR.Backends {
			if b.Deadline != 0 {
				t.Errorf("%s: EXTERNAL backend %s has deadline %v", step.what, b.Name, b.Deadline)
			}
		}
		if !reflect.DeepEqual(er.IR.Rings, r.IR.Rings) || er.IR.Services[0].RingKey != r.IR.Services[0].RingKey {
			t.Errorf("%s: the scheme changed the ring", step.what)
		}
		prev, ext = r.IR, er.IR
	}
}

// TestRPERSISTCAP_RingReuse: a deadline is not a ring input, so a compile
// that only dates deadlines reuses every ring (no ring write).
func TestRPERSISTCAP_RingReuse(t *testing.T) {
	cfg := loadExample(t, "failover.yaml")
	cfg.Services[0].LoadBalancingScheme = SchemeInternal
	st := State{}
	st.SetHealthy("vm-a1", false)
	first := compileOK(t, Input{Config: cfg, State: st, Now: time.Second}).IR
	// The same inputs compiled against a Prev that lost the deadline (a
	// target that did not keep it): the deadline is dated again, the ring
	// is reused.
	lost := first.Clone()
	for i := range lost.Backends {
		lost.Backends[i].Deadline, lost.Backends[i].DeadlineRule = 0, ""
	}
	second := compileOK(t, Input{Config: cfg, State: st, Prev: lost, Now: 50 * time.Second})
	c := DiffIR(lost, second.IR).Counts()
	// vm-a1 and the four failover backends (outside the set) are re-dated.
	if c[TableRing] != [3]int{} || c[TableService] != [3]int{} || c[TableBackend] != [3]int{0, 5, 0} {
		t.Fatalf("re-dating a deadline wrote %v", c)
	}
	if b := second.IR.Backends[0]; b.Name != "vm-a1" || b.Deadline != 50*time.Second+PersistCap {
		t.Fatalf("vm-a1 %+v", b)
	}
}

// TestRPERSISTCAP_Draining: under INTERNAL a removed backend drains for at
// most PersistCap (it is outside the eligible set too); a shorter
// drainingTimeoutSec keeps R-DRAIN's deadline.
func TestRPERSISTCAP_Draining(t *testing.T) {
	for _, tt := range []struct {
		drain int
		want  time.Duration
		rule  string
	}{{30, 130 * time.Second, RuleDrain}, {600, 400 * time.Second, RulePersistCap}} {
		cfg := loadExample(t, "failover.yaml")
		cfg.Services[0].LoadBalancingScheme = SchemeInternal
		cfg.Services[0].ConnectionDraining.DrainingTimeoutSec = tt.drain
		first := compileOK(t, Input{Config: cfg, Now: 50 * time.Second}).IR
		cfg.Services[0].Backends[0].Endpoints = cfg.Services[0].Backends[0].Endpoints[1:]
		next := compileOK(t, Input{Config: cfg, Prev: first, Now: 100 * time.Second}).IR
		b := next.Backend(first.Backends[0].ID)
		if b == nil || !b.Draining || b.Deadline != tt.want || b.DeadlineRule != tt.rule {
			t.Errorf("drainingTimeoutSec %d: removed row %+v, want draining until %v (%s)", tt.drain, b, tt.want, tt.rule)
		}
	}
}

// TestRPERSISTCAP_SchemeValidated: loadBalancingScheme takes INTERNAL or
// EXTERNAL, and a wrong value is reported with its line.
func TestRPERSISTCAP_SchemeValidated(t *testing.T) {
	const cfg = `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: web
    vip: 203.0.113.10
    protocol: TCP
    ports: [80]
    loadBalancingScheme: %s
    backends:
      - name: ig-a
        endpoints: [{name: vm-a1, ip: 10.0.1.1}]
`
	for _, ok := range []string{"INTERNAL", "EXTERNAL"} {
		d, err := Load("lb.yaml", []byte(fmt.Sprintf(cfg, ok)))
		if err != nil || d.Config.Services[0].Scheme() != ok {
			t.Errorf("%s: %v", ok, err)
		}
	}
	_, err := Load("lb.yaml", []byte(fmt.Sprintf(cfg, "internal")))
	if err == nil || !strings.Contains(err.Error(), `lb.yaml:7: service "web": loadBalancingScheme: "internal" is not one of EXTERNAL, INTERNAL (values are upper case: INTERNAL)`) {
		t.Errorf("lower case: %v", err)
	}
}

// TestRMTU_TunnelMTU: tunnel.mtu becomes IR.MTU; it must lie in
// 1280..9216, and leave an IPv6 backend room for IPv6's minimum MTU.
func TestRMTU_TunnelMTU(t *testing.T) {
	const cfg = `tunnel: {sourceIPv4: 192.0.2.1, sourceIPv6: "2001:db8::1", mtu: %d}
services:
  - name: web
    vip: 203.0.113.10
    protocol: TCP
    ports: [80]
    backends:
      - name: ig-a
        endpoints: [{name: vm-a1, ip: 10.0.1.1}, {name: vm-a6, ip: "2001:db8:1::1"}]
`
	d, err := Load("lb.yaml", []byte(fmt.Sprintf(cfg, 9000)))
	if err != nil {
		t.Fatal(err)
	}
	if ir := compileOK(t, Input{Config: d.Config}).IR; ir.MTU != 9000 {
		t.Fatalf("IR.MTU %d, want 9000", ir.MTU)
	}
	for mtu, want := range map[int]string{
		1279:  "lb.yaml:1: tunnel: mtu: 1279 out of range 1280..9216",
		9217:  "lb.yaml:1: tunnel: mtu: 9217 out of range 1280..9216",
		1300:  "tunnel: mtu: 1300 leaves an IPv6 packet encapsulated to an IPv6 backend less than IPv6's minimum MTU of 1280",
		-1500: "out of range",
	} {
		if _, err := Load("lb.yaml", []byte(fmt.Sprintf(cfg, mtu))); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("mtu %d: %v, want %q", mtu, err, want)
		}
	}
}

// TestRPERSISTCAP_LastResort: when nothing is healthy, the primaries of
// the last-resort set take new connections and carry no cap; the failover
// backends the service was on keep their entries (R-PERSIST-LR) for at
// most 300 s from the moment they left the set.
func TestRPERSISTCAP_LastResort(t *testing.T) {
	cfg := loadExample(t, "failover.yaml")
	cfg.Services[0].LoadBalancingScheme = SchemeInternal
	st := State{}
	for _, n := range []string{"vm-a1", "vm-a2", "vm-d1", "vm-d2"} {
		st.SetHealthy(n, false)
		st.SetSince(n, 10*time.Second)
	}
	failover := compileOK(t, Input{Config: cfg, State: st, Now: 10 * time.Second}).IR
	for _, n := range []string{"vm-b1", "vm-b2", "vm-c1", "vm-c2"} {
		st.SetHealthy(n, false)
		st.SetSince(n, 50*time.Second)
	}
	lr := compileOK(t, Input{Config: cfg, State: st, Prev: failover, Now: 50 * time.Second}).IR
	if s := lr.Services[0]; s.Decision != DecisionLastResort || !s.FailoverSide {
		t.Fatalf("decision %s side failover %v, want last resort on the failover side", s.Decision, s.FailoverSide)
	}
	for _, b := range lr.Backends {
		want := time.Duration(0)
		if b.Failover {
			want = 50*time.Second + PersistCap
		}
		if b.Deadline != want {
			t.Errorf("%s: deadline %v, want %v", b.Name, b.Deadline, want)
		}
	}
}
