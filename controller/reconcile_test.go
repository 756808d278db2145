package controller

import (
	"reflect"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/examples"
)

func kinds(es []Event) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Kind)
	}
	return out
}

// TestRELIG5_SeedWalkthroughEvents walks the seed-001 example and checks
// the events and eligible sets Reconcile reports at every step.
func TestRELIG5_SeedWalkthroughEvents(t *testing.T) {
	dec, err := compiler.Load("failover.yaml", examples.Default())
	if err != nil {
		t.Fatal(err)
	}
	cfg := dec.Config
	st := compiler.State{}
	r, err := Reconcile(cfg, st, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Events) != 0 || r.Diff.Empty() {
		t.Fatalf("first push: events %v, diff empty %v", r.Events, r.Diff.Empty())
	}
	steps := []struct {
		name     string
		healthy  bool
		eligible []string
		events   []string
	}{
		{"vm-a1", false, []string{"vm-a2", "vm-d1", "vm-d2"}, []string{EventEligible}},
		{"vm-d1", false, []string{"vm-a2", "vm-d2"}, []string{EventEligible}},
		{"vm-a2", false, []string{"vm-b1", "vm-b2", "vm-c1", "vm-c2"}, []string{EventEligible, EventFailover}},
		{"vm-a2", true, []string{"vm-a2", "vm-d2"}, []string{EventEligible, EventFailback}},
		{"vm-a1", true, []string{"vm-a1", "vm-a2", "vm-d2"}, []string{EventEligible}},
	}
	prev := r.IR
	for i, s := range steps {
		st.SetHealthy(s.name, s.healthy)
		r, err := Reconcile(cfg, st, prev, time.Duration(i+1)*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		svc := r.IR.ServiceByName("web")
		if !reflect.DeepEqual(svc.Eligible, s.eligible) {
			t.Errorf("step %d (%s healthy=%v): eligible %v, want %v", i, s.name, s.healthy, svc.Eligible, s.eligible)
		}
		if got := kinds(r.Events); !reflect.DeepEqual(got, s.events) {
			t.Errorf("step %d: events %v, want %v", i, got, s.events)
		}
		// The diff turns prev into the new IR exactly.
		if got := r.Diff.Apply(prev); !reflect.DeepEqual(compiler.DiffIR(got, r.IR).Changes, []compiler.Change(nil)) {
			t.Errorf("step %d: diff does not reach the new IR", i)
		}
		prev = r.IR
	}
}

// TestREPOCH_EventOnFlush: with disableConnectionDrainOnFailover the
// failover bumps the epoch and Reconcile says so.
func TestREPOCH_EventOnFlush(t *testing.T) {
	dec, err := compiler.Load("failover.yaml", examples.Default())
	if err != nil {
		t.Fatal(err)
	}
	cfg := dec.Config
	cfg.Services[0].FailoverPolicy.DisableConnectionDrainOnFailover = true
	st := compiler.State{}
	r, _ := Reconcile(cfg, st, nil, 0)
	for _, n := range []string{"vm-a1", "vm-a2", "vm-d1"} {
		st.SetHealthy(n, false)
	}
	r2, err := Reconcile(cfg, st, r.IR, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(r2.Events); !reflect.DeepEqual(got, []string{EventEligible, EventFailover, EventEpoch}) {
		t.Fatalf("events %v", got)
	}
	if e0, e1 := r.IR.Services[0].Epoch, r2.IR.Services[0].Epoch; e1 != e0+1 {
		t.Fatalf("epoch %d → %d, want +1", e0, e1)
	}
}

// TestRDRAIN_DeadlineAndEvents: removing a backend starts draining with a
// deadline NextDeadline reports; reconciling at the deadline ends it.
func TestRDRAIN_DeadlineAndEvents(t *testing.T) {
	dec, err := compiler.Load("failover.yaml", examples.Default())
	if err != nil {
		t.Fatal(err)
	}
	cfg := dec.Config
	r, _ := Reconcile(cfg, nil, nil, 0)
	if _, ok := NextDeadline(r.IR); ok {
		t.Fatal("deadline without draining")
	}
	g := &cfg.Services[0].Backends[0]
	g.Endpoints = g.Endpoints[1:] // remove vm-a1 at t=10; drainingTimeoutSec 30
	r2, err := Reconcile(cfg, nil, r.IR, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := kinds(r2.Events); !reflect.DeepEqual(got, []string{EventEligible, EventDrainStart}) {
		t.Fatalf("events %v", got)
	}
	dl, ok := NextDeadline(r2.IR)
	if !ok || dl != 40*time.Second {
		t.Fatalf("deadline %v %v, want 40", dl, ok)
	}
	r3, _ := Reconcile(cfg, nil, r2.IR, 39999*time.Millisecond)
	if len(r3.Events) != 0 || !r3.Diff.Empty() {
		t.Fatalf("before the deadline: %v", r3.Events)
	}
	r4, _ := Reconcile(cfg, nil, r3.IR, 40*time.Second)
	if got := kinds(r4.Events); !reflect.DeepEqual(got, []string{EventDrainEnd}) {
		t.Fatalf("at the deadline: %v", got)
	}
	if _, ok := NextDeadline(r4.IR); ok {
		t.Fatal("deadline after draining ended")
	}
}

// TestRELIG5_SidesSequences walks the three sequences of R-ELIG-5 from
// the failover side, for a service whose last resort is all primaries and
// for one that drops (dropTrafficIfUnhealthy), both with
// disableConnectionDrainOnFailover so that a change of side would show as
// an epoch bump (R-EPOCH). Last resort and drop are no side: entering them
// is no failback, leaving them for the failover side is no failover.
func TestRELIG5_SidesSequences(t *testing.T) {
	dec, err := compiler.Load("failover.yaml", examples.Default())
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		what    string
		healthy map[string]bool
		events  []string
		epoch   uint32
		side    bool // failover side
	}
	// From all healthy to the failover side: every primary fails.
	toFailover := []step{
		{"every primary fails: failover", map[string]bool{"vm-a1": false, "vm-a2": false, "vm-d1": false, "vm-d2": false}, []string{EventEligible, EventFailover, EventEpoch}, 1, true},
	}
	allFailoverDown := map[string]bool{"vm-b1": false, "vm-b2": false, "vm-c1": false, "vm-c2": false}
	for _, drop := range []bool{false, true} {
		nothing := []string{EventEligible}
		if drop {
			nothing = []string{EventEligible, EventNoBackends}
		}
		seqs := []struct {
			name  string
			steps []step
		}{
			{"failover→nothing healthy", []step{
				{"every failover backend fails", allFailoverDown, nothing, 1, true},
			}},
			{"failover→nothing healthy→failover backend recovers", []step{
				{"every failover backend fails", allFailoverDown, nothing, 1, true},
				{"b1 recovers", map[string]bool{"vm-b1": true}, []string{EventEligible}, 1, true},
			}},
			{"failover→nothing healthy→primaries recover", []step{
				{"every failover backend fails", allFailoverDown, nothing, 1, true},
				{"a1 recovers: one failback, now", map[string]bool{"vm-a1": true}, []string{EventEligible, EventFailback, EventEpoch}, 2, false},
			}},
		}
		for _, sq := range seqs {
			name := sq.name
			if drop {
				name += "/drop"
			}
			t.Run(name, func(t *testing.T) {
				cfg := *dec.Config
				cfg.Services = append([]compiler.Service(nil), dec.Config.Services...)
				fp := *cfg.Services[0].FailoverPolicy
				fp.DisableConnectionDrainOnFailover, fp.DropTrafficIfUnhealthy = true, drop
				cfg.Services[0].FailoverPolicy = &fp
				st := compiler.State{}
				r, err := Reconcile(&cfg, st, nil, 0)
				if err != nil {
					t.Fatal(err)
				}
				prev := r.IR
				for i, s := range append(append([]step(nil), toFailover...), sq.steps...) {
					for n, h := range s.healthy {
						st.SetHealthy(n, h)
					}
					r, err := Reconcile(&cfg, st, prev, time.Duration(i+1)*time.Second)
					if err != nil {
						t.Fatal(err)
					}
					svc := r.IR.ServiceByName("web")
					if got := kinds(r.Events); !reflect.DeepEqual(got, s.events) {
						t.Errorf("%s: events %v, want %v", s.what, got, s.events)
					}
					if svc.Epoch != s.epoch || svc.FailoverSide != s.side {
						t.Errorf("%s: epoch %d failover side %v (%s %s), want %d %v", s.what, svc.Epoch, svc.FailoverSide, svc.Decision, svc.Rule, s.epoch, s.side)
					}
					prev = r.IR
				}
			})
		}
	}
}
