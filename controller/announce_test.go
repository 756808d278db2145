package controller_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/targets"
)

// failingTarget fails every Apply while err is set.
type failingTarget struct {
	*lockedSim
	mu  sync.Mutex
	err error
}

func (f *failingTarget) fail(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *failingTarget) Apply(ctx context.Context, d compiler.Diff) (targets.ApplyStats, error) {
	f.mu.Lock()
	err := f.err
	f.mu.Unlock()
	if err != nil {
		return targets.ApplyStats{}, err
	}
	return f.lockedSim.Apply(ctx, d)
}

// recordingAnnouncer keeps what the controller last told it.
type recordingAnnouncer struct {
	mu   sync.Mutex
	last []controller.VIPState
	n    int
}

func (a *recordingAnnouncer) Announce(vips []controller.VIPState) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.last, a.n = vips, a.n+1
}

func (a *recordingAnnouncer) AnnounceStatus() controller.AnnounceStatus {
	return controller.AnnounceStatus{Protocol: "test", Healthy: true}
}

func (a *recordingAnnouncer) state(t *testing.T) controller.VIPState {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.last) != 1 {
		t.Fatalf("announcer told about %d VIPs, want 1: %+v", len(a.last), a.last)
	}
	return a.last[0]
}

// TestAnnounceFollowsEligibleSetAndDatapath: the VIP is served while the
// datapath holds the tables and the service has eligible backends; it is
// withdrawn when every backend fails with dropTrafficIfUnhealthy (R-ELIG:
// drop) and while a push fails, and served again when both are right.
func TestAnnounceFollowsEligibleSetAndDatapath(t *testing.T) {
	a := &recordingAnnouncer{}
	cfg := func(port int) string {
		return strings.Replace(seedConfig(port, false, 0, 1, 1), "failoverRatio: 0.5", "failoverRatio: 0.5\n      dropTrafficIfUnhealthy: true", 1)
	}
	sim := newLockedSim("sim")
	ft := &failingTarget{lockedSim: sim}
	r := startRigOpts(t, rigOptions{config: cfg, sims: []*lockedSim{sim}}, func(o *controller.Options) {
		o.Announcer = a
		o.Targets = []targets.Target{ft}
	})
	r.probe(1)
	if st := a.state(t); !st.Serve || st.VIP.String() != "203.0.113.10" || strings.Join(st.Services, ",") != "web" {
		t.Fatalf("healthy service: %+v, want 203.0.113.10 served for web", st)
	}

	for n := range seedIPs {
		r.setHealthy(n, false)
	}
	r.probe(1)
	st := a.state(t)
	if st.Serve || !strings.Contains(st.Why, "no eligible backend (service web drops new connections)") {
		t.Fatalf("every backend down with dropTrafficIfUnhealthy: %+v, want withdrawn for no eligible backend", st)
	}
	if !strings.Contains(r.c.Status(r.ctx).Services[0].Decision, "drop") {
		t.Fatalf("decision %q, want drop", r.c.Status(r.ctx).Services[0].Decision)
	}

	for n := range seedIPs {
		r.setHealthy(n, true)
	}
	ft.fail(errors.New("device gone"))
	r.c.Monitor().ProbeAll(r.ctx)
	if err := r.c.Sync(r.ctx); err == nil {
		t.Fatal("the push did not fail")
	}
	if st := a.state(t); st.Serve || !strings.Contains(st.Why, "datapath sim not programmed: device gone") {
		t.Fatalf("push failed: %+v, want withdrawn naming the datapath", st)
	}
	ft.fail(nil)
	r.probe(1) // the retry succeeds
	if st := a.state(t); !st.Serve || st.Why != "" {
		t.Fatalf("after a good push with every backend healthy: %+v, want served", st)
	}
}
