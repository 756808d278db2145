package compiler

import (
	"fmt"
	"os"
	"reflect"
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
	if c[TableRing][Insert] != 2*65537 || c[TableService][Insert] != 1 || c[TableVIP][Insert] != 2 || c[TableBackend][Insert] != 8 {
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
				// Only the inactive half is written, then exactly one service write.
				for _, ch := range d.Changes {
					if ch.Ring != nil && ch.Ring.Half == ps.ActiveHalf {
						t.Fatalf("step %d: wrote the active half: %s", i, ch)
					}
				}
				wantSvc := 0
				if s.flip || ns.Epoch != ps.Epoch {
					wantSvc = 1
				}
				if c[TableService][Modify] != wantSvc {
					t.Fatalf("step %d: %d service writes, want %d", i, c[TableService][Modify], wantSvc)
				}
				if s.flip && d.Changes[len(d.Changes)-1].Service == nil {
					// Backend health writes come first; the flip is the last write.
					t.Fatalf("step %d: last write is %s, want the service flip", i, d.Changes[len(d.Changes)-1])
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
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st := State{}
		st.SetHealthy("vm-a1-0", i%2 == 0)
		if _, err := Compile(Input{Config: cfg, State: st, Prev: prev.IR}); err != nil {
			b.Fatal(err)
		}
	}
}
