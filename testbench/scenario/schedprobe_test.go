package scenario

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

// A stall counts for its part inside the window, the longest stall that
// overlaps it is the worst, and wakes outside the window are left out.
func TestSchedDelayWindow(t *testing.T) {
	wakes := []probeWake{
		{At: 100 * ms, Late: 1 * ms},     // [99, 100]
		{At: 500 * ms, Late: 300 * ms},   // [200, 500]: half in [350, 1000]
		{At: 900 * ms, Late: 50 * ms},    // [850, 900]
		{At: 1600 * ms, Late: 1000 * ms}, // [600, 1600]: 400 ms in [350, 1000]
		{At: 3000 * ms, Late: 5 * ms},    // outside
	}
	d := delayIn(wakes, 350*ms, 1000*ms)
	if want := 150*ms + 50*ms + 400*ms; d.Lost != want {
		t.Errorf("lost %s, want %s", d.Lost, want)
	}
	if d.Worst != 1000*ms {
		t.Errorf("worst %s, want 1s (the longest stall overlapping the window, whole)", d.Worst)
	}
	if d.Wakes != 2 || d.Span != 650*ms {
		t.Errorf("wakes %d span %s, want 2 and 650ms", d.Wakes, d.Span)
	}
	if got := delayIn(wakes, 1000*ms, 1000*ms); got.Lost != 0 {
		t.Errorf("empty window lost %s", got.Lost)
	}
	if s := delayIn(nil, 0, time.Second).String(); !strings.Contains(s, "no scheduling measurement") {
		t.Errorf("no wakes: %q", s)
	}
}

// The probe wakes about every probeEvery and measures a machine that is
// not stalled as such; Stop ends it and its measurements stay.
func TestSchedProbeRuns(t *testing.T) {
	start := time.Now()
	p := startSchedProbe(start)
	time.Sleep(300 * ms)
	p.Stop()
	p.Stop() // twice is harmless
	d := p.Window(0, time.Since(start))
	if d.Wakes < 5 || d.Wakes > 31 {
		t.Errorf("%d wakes in 300 ms of %s sleeps", d.Wakes, probeEvery)
	}
	if d.Lost > d.Span {
		t.Errorf("lost %s of a %s span", d.Lost, d.Span)
	}
	n := d.Wakes
	time.Sleep(50 * ms)
	if d := p.Window(0, time.Since(start)); d.Wakes != n {
		t.Errorf("the probe woke after Stop: %d wakes, then %d", n, d.Wakes)
	}
}

// A run is retried only when every event with a failed check is one in
// which the machine stalled beyond the scenario's timers, or a later one.
func TestTooSlowOnly(t *testing.T) {
	ok := Check{Name: "routes", OK: true}
	bad := Check{Name: "converge", Msg: "late"}
	slow := "the load probe stalled 1500 ms"
	for _, tc := range []struct {
		name   string
		events []*FleetEventResult
		retry  bool
	}{
		{"passed", []*FleetEventResult{{Checks: []Check{ok}, TooSlow: slow}}, false},
		{"failed where the machine kept up", []*FleetEventResult{{Checks: []Check{bad}}}, false},
		{"failed only where the machine stalled", []*FleetEventResult{{Checks: []Check{ok}}, {Name: "e2", Checks: []Check{bad}, TooSlow: slow}}, true},
		{"failed after the stall", []*FleetEventResult{{Checks: []Check{bad}, TooSlow: slow}, {Name: "e2", Checks: []Check{bad}}}, true},
		{"failed before the stall", []*FleetEventResult{{Checks: []Check{bad}}, {Name: "e2", Checks: []Check{bad}, TooSlow: slow}}, false},
	} {
		fr := &FleetResult{Events: tc.events}
		for _, e := range tc.events {
			for _, c := range e.Checks {
				if !c.OK {
					fr.Failures = append(fr.Failures, Failure{Check: c.Name})
				}
			}
		}
		why := tooSlowOnly(fr)
		if (why != "") != tc.retry {
			t.Errorf("%s: tooSlowOnly = %q, want retry %v", tc.name, why, tc.retry)
		}
		if tc.retry && (!strings.Contains(why, slow) || !strings.Contains(why, `"e2"`)) {
			t.Errorf("%s: %q does not name the event and the stall", tc.name, why)
		}
	}
	if tooSlowOnly(nil) != "" {
		t.Error("a run that did not start is not retried")
	}
}

// keepAttempt moves a run's files, not its directories, aside.
func TestKeepAttempt(t *testing.T) {
	out := t.TempDir()
	for _, f := range []string{"report.md", "n1.log"} {
		if err := os.WriteFile(filepath.Join(out, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(out, "bpffs"), 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(out, "attempt-1")
	if err := keepAttempt(out, dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"report.md", "n1.log"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s not kept: %v", f, err)
		}
		if _, err := os.Stat(filepath.Join(out, f)); err == nil {
			t.Errorf("%s still in the output directory", f)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "bpffs")); err != nil {
		t.Errorf("a directory was moved: %v", err)
	}
}

// The router's log lines that end a session are found with their node
// and reason; other lines and earlier ones are not.
func TestParseBirdDowns(t *testing.T) {
	log := `2026-12-01 14:59:36.943 <INFO> Started
2026-12-01 14:59:45.150 <RMT> n2: Error: Hold timer expired
2026-12-01 14:59:58.828 <RMT> n1: Error: Hold timer expired
2026-12-01 15:00:04.099 <RMT> n3: Received: Administrative shutdown: "lbc run stopping"
2026-12-01 15:00:05.000 <RMT> n3: Something else
`
	since := time.Date(2026, 12, 1, 14, 59, 50, 0, time.Local)
	got := parseBirdDowns(log, since)
	if len(got) != 2 || got[0].Node != "n1" || got[0].Why != "Error: Hold timer expired" || got[1].Node != "n3" || !strings.HasPrefix(got[1].Why, "Received: Administrative shutdown") {
		t.Fatalf("got %+v", got)
	}
	if want := time.Date(2026, 12, 1, 14, 59, 58, 828e6, time.Local); !got[0].At.Equal(want) {
		t.Errorf("at %s, want %s", got[0].At, want)
	}
}

// A node is up between the testbench's start of it and its kill or stop
// (less birdClockSlack).
func TestUpAt(t *testing.T) {
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	r := &fleetRunner{startedAt: map[string]time.Time{"n1": at(0), "n2": at(0), "n3": at(10)}, stoppedAt: map[string]time.Time{"n2": at(5), "n3": at(2)}}
	for _, tc := range []struct {
		node string
		t    float64
		up   bool
	}{
		{"n1", 1, true}, {"n1", -1, false},
		{"n2", 3.9, true}, {"n2", 4.5, false}, {"n2", 6, false}, // BIRD's clock may lag: 0.5 s before the stop counts as the stop's
		{"n3", 5, false}, {"n3", 11, true}, // stopped at 2, started again at 10
		{"n4", 1, false},
	} {
		if got := r.upAt(tc.node, at(tc.t)); got != tc.up {
			t.Errorf("%s at %g s: up %v, want %v", tc.node, tc.t, got, tc.up)
		}
	}
}
