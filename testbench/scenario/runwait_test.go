package scenario

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRunWaitIn: the wait in a window is, per process, its most-waiting
// thread's, summed over processes, between the samples that bracket the
// window; a process first seen in the window (a restarted switch) counts
// all of its wait.
func TestRunWaitIn(t *testing.T) {
	const sw, ctl, sw2 = 10, 20, 30
	ss := []runWaitSample{
		{At: 0 * ms, Wait: map[int]map[int]time.Duration{sw: {10: 5 * ms, 11: 1 * ms}, ctl: {20: 2 * ms}}},
		{At: 100 * ms, Wait: map[int]map[int]time.Duration{sw: {10: 55 * ms, 11: 90 * ms}, ctl: {20: 12 * ms, 21: 30 * ms}}},
		{At: 200 * ms, Wait: map[int]map[int]time.Duration{sw2: {30: 400 * ms}, ctl: {20: 12 * ms, 21: 30 * ms}}},
	}
	for _, tc := range []struct {
		name     string
		from, to time.Duration
		want     time.Duration
	}{
		// sw: max(50, 89) = 89; ctl: max(10, 30 new thread) = 30.
		{"threads: the most waiting one, processes summed", 0 * ms, 100 * ms, (89 + 30) * ms},
		{"inside one interval: the bracketing samples", 10 * ms, 90 * ms, (89 + 30) * ms},
		// sw2 is new: all its 400; ctl waited nothing more; sw is gone.
		{"a restarted process counts whole", 100 * ms, 200 * ms, 400 * ms},
		{"past the last sample: up to it", 100 * ms, 900 * ms, 400 * ms},
		{"empty window", 50 * ms, 50 * ms, 0},
		{"before any sample", -50 * ms, -10 * ms, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := runWaitIn(ss, tc.from, tc.to); got != tc.want {
				t.Errorf("runWaitIn(%v, %v) = %v, want %v", tc.from, tc.to, got, tc.want)
			}
		})
	}
	if got := runWaitIn(nil, 0, 10*ms); got != 0 {
		t.Errorf("no samples: %v", got)
	}
}

func TestParseSchedstat(t *testing.T) {
	if w, err := parseSchedstat("6917477 38962736 5\n"); err != nil || w != 38962736 {
		t.Errorf("parse: %v %v, want 38962736 ns", w, err)
	}
	for _, bad := range []string{"", "1 2", "1 x 3", "1 -5 3", "1 2 3 4"} {
		if _, err := parseSchedstat(bad); err == nil {
			t.Errorf("parseSchedstat(%q): no error", bad)
		}
	}
}

// TestSlackIsTheLongerWait: a bound is widened by the longer of a
// sleeper's lost time and the recovery path's run-queue wait, and the
// message says which.
func TestSlackIsTheLongerWait(t *testing.T) {
	d := SchedDelay{Lost: 300 * ms, RunWait: 2500 * ms}
	if d.Slack() != 2500*ms {
		t.Errorf("slack %v, want the run wait", d.Slack())
	}
	if m := fmtBound(6*time.Second, d); !strings.Contains(m, "6.00 s + 2.50 s the switch and the controller waited for a CPU meanwhile (timers: 0.30 s lost to scheduling)") {
		t.Errorf("bound %q", m)
	}
	d.RunWait = 100 * ms
	if d.Slack() != 300*ms || !strings.Contains(fmtBound(6*time.Second, d), "6.00 s + 0.30 s lost to scheduling meanwhile") {
		t.Errorf("slack %v, bound %q: want the lost time", d.Slack(), fmtBound(6*time.Second, d))
	}
}

// TestConvergeWidenedByRunWait: a recovery that took longer than its
// bound passes when the switch and the controller waited that long for a
// CPU meanwhile, and fails without it.
func TestConvergeWidenedByRunWait(t *testing.T) {
	for _, tc := range []struct {
		runWait time.Duration
		ok      bool
	}{{0, false}, {2 * time.Second, true}} {
		st := &Step{Name: "kill", Expect: Expect{Converge: &ConvergeExpect{Within: Duration(time.Second)}}}
		v := &stepView{st: st, sr: &StepResult{Start: 0, End: fsec(10)}, res: &Result{}, where: `step 1 "kill"`,
			probe: func(from, to time.Duration) SchedDelay { return SchedDelay{Span: to - from, RunWait: tc.runWait} }}
		v.faults = []FaultEvent{{T: fsec(2), End: fsec(2.3), Kind: "kill", What: "switch", Fault: "kill switch"}}
		v.tstate = []TargetsState{
			{T: fsec(0.1), Gen: 1, OK: true, Writes: 100},
			{T: fsec(2.1), Gen: 1, OK: false, Why: "no session", Writes: 100},
			{T: fsec(4), Gen: 1, OK: true, Writes: 8300},
		}
		for x := 0.0; x < 10; x += 0.1 {
			v.flows = append(v.flows, Flow{Start: fsec(x), Kind: "tcp", Connect: fsec(0.01)})
		}
		checkConverge(v)
		if ok := len(v.res.Failures) == 0; ok != tc.ok {
			t.Errorf("run wait %v: passed %v, want %v (%v)", tc.runWait, ok, tc.ok, v.res.Failures)
		}
	}
}

// TestRunWaitProbeSeesCPUContention: a busy process among more busy
// processes than CPUs waits on the run queue, and the probe sees it; the
// kernel's schedstat is real.
func TestRunWaitProbeSeesCPUContention(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc/self/task: not Linux with procfs")
	}
	if _, err := os.Stat("/proc/self/schedstat"); err != nil {
		t.Skip("no /proc/PID/schedstat (kernel without CONFIG_SCHED_INFO): the probe measures nothing here, and bounds stay the sleeper probe's")
	}
	n := 2*runtime.NumCPU() + 1
	var busy []*exec.Cmd
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		busy = append(busy, c)
	}
	defer func() {
		for _, c := range busy {
			c.Process.Kill()
			c.Wait()
		}
	}()
	var mu sync.Mutex
	pids := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return []int{busy[0].Process.Pid, 0, busy[0].Process.Pid} // 0 and repeats are ignored
	}
	start := time.Now()
	p := startRunWaitProbe(start, pids)
	time.Sleep(time.Second)
	w := p.Window(0, time.Since(start))
	span := time.Since(start) // the window's samples lie within it
	p.Stop()
	// n busy processes on NumCPU CPUs: each runs about NumCPU/n of the
	// time and waits the rest, about half a second here.
	if w < 100*time.Millisecond {
		t.Errorf("a busy process among %d on %d CPUs waited %v in %v, want ≥ 100 ms", n, runtime.NumCPU(), w, span)
	}
	// The kernel credits a wait when it ends, so a window may hold the end
	// of a wait begun before it (a slice or a few); not twice its span.
	if w > span+span/2 {
		t.Errorf("one process's one thread waited %v in %v: counted more than once", w, span)
	}
}

// TestAfterFaultsHolds: traffic.afterFaults holds the traffic while the
// step's faults run and for its length after.
func TestAfterFaultsHolds(t *testing.T) {
	if afterFaults(&sync.WaitGroup{}, 0) != nil {
		t.Fatal("afterFaults 0 holds")
	}
	var fw sync.WaitGroup
	fw.Add(1)
	hold := afterFaults(&fw, 200*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	if !hold() {
		t.Fatal("not held while the fault runs")
	}
	fw.Done()
	deadline := time.Now().Add(5 * time.Second)
	for hold() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if hold() {
		t.Fatal("still held 5 s after the fault")
	}
}
