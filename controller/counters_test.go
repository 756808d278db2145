package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/testbench/p4rt"
)

// gatedTarget is a sim whose counters are read in three steps (a
// targets.CounterStepper) and whose Apply and counter steps a test can
// hold at a gate; it records the order of applies and steps.
type gatedTarget struct {
	*lockedSim
	mu        sync.Mutex
	order     []string
	applyGate chan struct{} // nil: Apply goes through
	stepGate  chan struct{} // nil: steps go through
	entered   chan string   // "apply", "step a", ...: each call at its gate
	fail      error         // every step fails with it
	packets   uint64
}

func newGatedTarget(name string) *gatedTarget {
	return &gatedTarget{lockedSim: newLockedSim(name), entered: make(chan string, 16), packets: 42}
}

func (g *gatedTarget) record(what string) (gate chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.order = append(g.order, what)
	if what == "apply" {
		gate = g.applyGate
	} else {
		gate = g.stepGate
	}
	if gate != nil {
		g.entered <- what
	}
	return gate
}

func (g *gatedTarget) set(f func(g *gatedTarget)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g)
}

func (g *gatedTarget) steps() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.order...)
}

func (g *gatedTarget) Apply(ctx context.Context, d compiler.Diff) (targets.ApplyStats, error) {
	if gate := g.record("apply"); gate != nil {
		<-gate
	}
	return g.lockedSim.Apply(ctx, d)
}

func (g *gatedTarget) Counters(ctx context.Context) (targets.Counters, error) {
	ir, _ := g.Read(ctx)
	r := g.CounterRead(ir)
	for {
		done, err := r.Step(ctx)
		if err != nil || done {
			return r.Counters(), err
		}
	}
}

func (g *gatedTarget) CounterRead(ir *compiler.IR) targets.CounterRead {
	return &gatedRead{g: g, ir: ir}
}

type gatedRead struct {
	g  *gatedTarget
	ir *compiler.IR
	n  int
}

func (r *gatedRead) Step(ctx context.Context) (bool, error) {
	name := "step " + string(rune('a'+r.n))
	r.n++
	if gate := r.g.record(name); gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return true, ctx.Err()
		}
	}
	r.g.mu.Lock()
	err := r.g.fail
	r.g.mu.Unlock()
	return r.n == 3, err
}

func (r *gatedRead) Counters() targets.Counters {
	out := targets.NewCounters()
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	for _, s := range r.ir.Services {
		out.Services[s.ID] = targets.ServiceCounters{Packets: r.g.packets}
	}
	return out
}

// gatedRig runs the controller over a gatedTarget alone, with metrics and
// no counter reads but those the test asks for (ReadCounters).
func gatedRig(t *testing.T) (*rig, *gatedTarget, *controller.Metrics) {
	t.Helper()
	m := controller.NewMetrics()
	g := newGatedTarget("bmv2 sw1")
	r := startRigOpts(t, rigOptions{metrics: m, config: func(port int) string { return patientProbes(seedConfig(port, false, 0, 1, 1)) }},
		func(o *controller.Options) {
			o.Targets = []targets.Target{g}
			o.CounterInterval = -1
		})
	r.probe(1)
	g.set(func(g *gatedTarget) { g.order = nil })
	return r, g, m
}

// failover makes vm-a1 fail and pushes (in the background: the test holds
// the push at a gate); the push's error comes on the channel.
func failover(r *rig) <-chan error {
	r.setHealthy("vm-a1", false)
	done := make(chan error, 1)
	go func() {
		r.c.Monitor().ProbeAll(r.ctx)
		done <- r.c.Sync(r.ctx)
	}()
	return done
}

func status(c *controller.Controller) controller.Status {
	rec := httptest.NewRecorder()
	c.StatusHandler().ServeHTTP(rec, httptest.NewRequest("GET", controller.StatusPath, nil))
	var st controller.Status
	_ = json.Unmarshal(rec.Body.Bytes(), &st)
	return st
}

// TestScrapeDuringLongPushServesSnapshot (issue 31, item 2): while a push
// holds the target (its Apply held at a gate), /metrics and /v1/status
// answer at once with the counters of the last read: they neither wait
// for the target nor read it. Before, each scrape read the counters under
// the target's lock, so it waited for the push (and a push for it).
func TestScrapeDuringLongPushServesSnapshot(t *testing.T) {
	r, g, m := gatedRig(t)
	r.c.ReadCounters(r.ctx)
	release := make(chan struct{})
	g.set(func(g *gatedTarget) { g.applyGate = release })
	pushed := failover(r)
	defer func() { close(release); <-pushed }()
	select {
	case <-g.entered:
	case err := <-pushed:
		t.Fatalf("the push ended (%v) without applying\n%s", err, r.logs)
	}

	type answer struct {
		body string
		st   controller.Status
	}
	got := make(chan answer, 1)
	go func() { got <- answer{scrape(t, m), status(r.c)} }()
	var a answer
	select {
	case a = <-got:
	case <-time.After(10 * time.Second): // a hang detector, not a measure: a snapshot answers in microseconds
		t.Fatalf("/metrics and /v1/status did not answer while a push held the target\n%s", r.logs)
	}
	for _, want := range []string{
		`lbc_datapath_packets_total{service="web",target="bmv2",target_instance="sw1"} 42`,
		`lbc_datapath_counters_up{target="bmv2",target_instance="sw1"} 1`,
		`lbc_datapath_counters_age_seconds{target="bmv2",target_instance="sw1"} 0`,
	} {
		if !strings.Contains(a.body, want+"\n") {
			t.Errorf("/metrics during the push lacks %s:\n%s", want, grepLines(a.body, "lbc_datapath_"))
		}
	}
	if len(a.st.Services) != 1 || a.st.Services[0].Counters == nil || a.st.Services[0].Counters.Packets != 42 || a.st.CountersAt.IsZero() {
		t.Errorf("/v1/status during the push: services %+v, countersAt %v; want web's 42 packets from the snapshot", a.st.Services, a.st.CountersAt)
	}
	if steps := g.steps(); len(steps) != 4 || steps[3] != "apply" {
		t.Errorf("the target saw %v; want the 3 steps of ReadCounters, then the push's apply (no read by a scrape)", steps)
	}
}

// TestCounterReadLetsQueuedPushGoFirst (issue 31, item 2): a push that
// queues for the target while a counter read holds it for one piece (one
// counter array) goes before the read's next piece. Before, the read held
// the target for all of its pieces.
func TestCounterReadLetsQueuedPushGoFirst(t *testing.T) {
	r, g, _ := gatedRig(t)
	queued := make(chan struct{}, 4)
	r.c.SetPushQueued(0, queued)
	release := make(chan struct{})
	g.set(func(g *gatedTarget) { g.stepGate = release })
	read := make(chan struct{})
	go func() { r.c.ReadCounters(r.ctx); close(read) }()
	if s := <-g.entered; s != "step a" {
		t.Fatalf("the counter read began with %q", s)
	}
	pushed := failover(r)
	select {
	case <-queued:
	case err := <-pushed:
		t.Fatalf("the push ended (%v) while a counter read held the target\n%s", err, r.logs)
	}
	g.set(func(g *gatedTarget) { g.stepGate = nil })
	close(release)
	if err := <-pushed; err != nil {
		t.Fatalf("push: %v\n%s", err, r.logs)
	}
	<-read
	if got, want := fmt.Sprint(g.steps()), "[step a apply step b step c]"; got != want {
		t.Fatalf("the target saw %s, want %s: the queued push before the read's next piece", got, want)
	}
}

// TestFailingCounterReadLoggedOncePerMinute (issue 31, item 2): reads of
// the counters that fail are each counted, logged at the first failure
// and then once a minute (with how many were not), and the work again is
// logged; meanwhile the series keep the last values read, up is 0, and
// the age grows. Before, a failed read at a scrape dropped the series
// and logged nothing.
func TestFailingCounterReadLoggedOncePerMinute(t *testing.T) {
	r, g, m := gatedRig(t)
	r.c.ReadCounters(r.ctx)
	const failing = "cannot read the target's counters"
	g.set(func(g *gatedTarget) { g.fail = errors.New("counter service_packets: switch busy") })
	var lines []int
	for i, step := range []time.Duration{10 * time.Second, 10 * time.Second, 10 * time.Second, 10 * time.Second, time.Minute, time.Second} {
		r.clk.Advance(step)
		r.c.ReadCounters(r.ctx)
		lines = append(lines, strings.Count(r.logs.String(), failing))
		if i == 1 {
			body := scrape(t, m)
			for _, want := range []string{
				`lbc_datapath_counters_up{target="bmv2",target_instance="sw1"} 0`,
				`lbc_datapath_counters_age_seconds{target="bmv2",target_instance="sw1"} 20`,
				`lbc_datapath_packets_total{service="web",target="bmv2",target_instance="sw1"} 42`,
				`lbc_errors_total{kind="counters"} 2`,
			} {
				if !strings.Contains(body, want+"\n") {
					t.Errorf("after 2 failed reads, /metrics lacks %s:\n%s", want, grepLines(body, "lbc_datapath_counters|counters\""))
				}
			}
		}
	}
	// Logged at the first failure, then not for a minute, then again.
	if got, want := fmt.Sprint(lines), "[1 1 1 1 2 2]"; got != want {
		t.Errorf("failure lines after each read: %s, want %s\n%s", got, want, r.logs)
	}
	if !regexp.MustCompile(`unlogged_failures=3`).MatchString(r.logs.String()) {
		t.Errorf("the second line does not count the 3 failures not logged:\n%s", r.logs)
	}
	body := scrape(t, m)
	if want := `lbc_datapath_counters_age_seconds{target="bmv2",target_instance="sw1"} 101`; !strings.Contains(body, want+"\n") {
		t.Errorf("/metrics lacks %s:\n%s", want, grepLines(body, "lbc_datapath_counters"))
	}
	g.set(func(g *gatedTarget) { g.fail, g.packets = nil, 50 })
	r.c.ReadCounters(r.ctx)
	if !strings.Contains(r.logs.String(), "counters read again") {
		t.Errorf("the read that works again is not logged:\n%s", r.logs)
	}
	body = scrape(t, m)
	for _, want := range []string{
		`lbc_datapath_counters_up{target="bmv2",target_instance="sw1"} 1`,
		`lbc_datapath_counters_age_seconds{target="bmv2",target_instance="sw1"} 0`,
		`lbc_datapath_packets_total{service="web",target="bmv2",target_instance="sw1"} 50`,
		`lbc_errors_total{kind="counters"} 6`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("after the read that worked, /metrics lacks %s:\n%s", want, grepLines(body, "lbc_datapath_|counters\""))
		}
	}
}

// TestHeartbeatLateDuringCounterReadsIsNoLoss (issue 31, item 2): the
// switch answers its heartbeat late (the test's P4Runtime server holds
// Capabilities) while the controller's counter reads hold the target and
// are answered: busy, not lost. Through 2 late heartbeats /healthz stays
// 200, the VIPs stay announced, and no loss is counted or logged. Before,
// the first late heartbeat dropped the session: a switch loss, with
// /healthz 503 and the VIPs withdrawn.
func TestHeartbeatLateDuringCounterReadsIsNoLoss(t *testing.T) {
	srv := p4rt.StartEmpty(t, "127.0.0.1:0")
	// Each counter read must be answered within the heartbeat's timeout
	// (an answer is what tells busy from silent): under the race detector
	// a read of lb.p4's 77,833 cells from this server takes ≈ 2.5 s, so
	// the timeout is 4 s here instead of 800 ms.
	opts := embeddedSwitchOptions(srv.Addr())
	opts.HeartbeatTimeout = 4 * time.Second
	r, _ := healthyRig(t, opts)
	r.c.ReadCounters(r.ctx) // warm up: the first read is the slowest
	release, late := make(chan struct{}), make(chan struct{}, 16)
	srv.HoldCapabilities(release, late)
	defer srv.HoldCapabilities(nil, nil)
	defer close(release)
	stop, reading := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(reading)
		for {
			select {
			case <-stop:
				return
			default:
			}
			r.c.ReadCounters(r.ctx)
		}
	}()
	_, _, announced := r.ann.serving()
	for n := 0; n < 2; {
		select {
		case <-late:
			n++
		case <-announced:
			var ok bool
			var why string
			if ok, why, announced = r.ann.serving(); !ok {
				close(stop)
				<-reading
				t.Fatalf("the VIPs were withdrawn (%s) after %d late heartbeats while counter reads were answered\n%s", why, n, r.logs)
			}
		case <-time.After(budgetTB(t)):
			t.Fatalf("2 heartbeats not late\n%s", r.logs)
		}
	}
	close(stop)
	<-reading
	if code, body := healthz(r.c); code != http.StatusOK {
		t.Errorf("healthz after 2 late heartbeats while the switch answered: %d %q\n%s", code, body, r.logs)
	}
	metricsSay(t, r.m, `lbc_errors_total{kind="connection"} 0`, `lbc_errors_total{kind="counters"} 0`,
		`lbc_datapath_counters_up{target="switch",target_instance=""} 1`)
	if strings.Contains(r.logs.String(), "lost the switch") {
		t.Errorf("a loss was logged:\n%s", r.logs)
	}
}
