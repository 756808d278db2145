package scenario

import (
	"strings"
	"testing"
	"time"
)

func fsec(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// A run of failed and retransmitted connections is one black hole, from
// the first to the next connection answered at once; UDP does not count;
// a run still going at the end is open.
func TestBlackHoles(t *testing.T) {
	fl := []Flow{
		{Start: fsec(1), Kind: "tcp", Connect: fsec(0.01)},
		{Start: fsec(2), Kind: "tcp", Err: "timeout"},
		{Start: fsec(2.5), Kind: "udp", Err: "no answer"},
		{Start: fsec(3), Kind: "tcp", Connect: fsec(1.02)}, // first SYN lost
		{Start: fsec(4), Kind: "tcp", Connect: fsec(0.01)},
		{Start: fsec(5), Kind: "tcp", Err: "refused"},
	}
	hs := blackHoles(fl, fsec(6))
	if len(hs) != 2 {
		t.Fatalf("holes %+v, want 2", hs)
	}
	if hs[0].From != fsec(2) || hs[0].To != fsec(4) || hs[0].Failed != 2 || hs[0].Open {
		t.Errorf("first hole %+v, want 2 s to 4 s, 2 failed, closed", hs[0])
	}
	if hs[1].From != fsec(5) || hs[1].To != fsec(6) || !hs[1].Open {
		t.Errorf("second hole %+v, want 5 s to the end (6 s), open", hs[1])
	}
	if h, _ := longestBlackHole(hs); h.Len() != fsec(2) {
		t.Errorf("longest %v, want 2 s", h.Len())
	}
}

// checkBlackHole and checkConverge on a kill of the switch: loss reported,
// programmed again, the black hole's end and the writes; a bound too
// tight fails and names the numbers.
func TestConvergeAssertions(t *testing.T) {
	step := func(within, bh time.Duration, maxWrites int) *stepView {
		st := &Step{Name: "kill", Expect: Expect{BlackHole: &BlackHoleExpect{Max: Duration(bh)},
			Converge: &ConvergeExpect{Within: Duration(within), Detect: Duration(1500 * time.Millisecond), MaxWrites: &maxWrites}}}
		v := &stepView{st: st, sr: &StepResult{Start: 0, End: fsec(10)}, res: &Result{}, where: `step 1 "kill"`}
		v.faults = []FaultEvent{{T: fsec(2), End: fsec(2.3), Kind: "kill", What: "switch", Fault: "kill switch"}}
		v.tstate = []TargetsState{
			{T: fsec(0.1), Gen: 1, OK: true, Writes: 100},
			{T: fsec(2.1), Gen: 1, OK: false, Why: "no session", Writes: 100},
			{T: fsec(3), Gen: 1, OK: true, Writes: 8300},
		}
		for x := 0.0; x < 10; x += 0.1 {
			f := Flow{Start: fsec(x), Kind: "tcp", Connect: fsec(0.01)}
			if x >= 2 && x < 3.2 {
				f.Err = "timeout"
			}
			v.flows = append(v.flows, f)
		}
		return v
	}
	v := step(4*time.Second, 6*time.Second, 10000)
	checkBlackHole(v)
	checkConverge(v)
	if len(v.res.Failures) != 0 {
		t.Fatalf("failures %v", v.res.Failures)
	}
	rc := recoveries(v)
	if len(rc) != 1 || !rc[0].WasNoticed || rc[0].Detected != fsec(2.1) || rc[0].Programmed != fsec(3) || rc[0].Writes != 8200 {
		t.Fatalf("recovery %+v, want noticed at 2.1 s, programmed at 3 s, 8200 writes", rc)
	}
	if got := rc[0].Served; got < fsec(3.19) || got > fsec(3.21) {
		t.Errorf("served at %v, want 3.2 s (the first connection answered after the hole)", got)
	}
	v = step(500*time.Millisecond, 500*time.Millisecond, 0)
	checkBlackHole(v)
	checkConverge(v)
	var msgs []string
	for _, f := range v.res.Failures {
		msgs = append(msgs, f.Msg)
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{"longest black hole 1.20 s", "converged 0.90 s after the fault's end", "want at most 0 writes"} {
		if !strings.Contains(all, want) {
			t.Errorf("failures\n%s\nlack %q", all, want)
		}
	}
}

// A restarted controller is programmed when the new one says so, not by
// the old one's last state; its writes are the new one's own.
func TestConvergeKillController(t *testing.T) {
	zero := 0
	st := &Step{Name: "kill", Expect: Expect{Converge: &ConvergeExpect{Within: Duration(2 * time.Second), MaxWrites: &zero}}}
	v := &stepView{st: st, sr: &StepResult{Start: 0, End: fsec(8)}, res: &Result{}, where: `step 1 "kill"`}
	v.faults = []FaultEvent{{T: fsec(1), End: fsec(4), Kind: "kill", What: "controller", Fault: "kill controller for 3s"}}
	v.tstate = []TargetsState{
		{T: fsec(0.1), Gen: 1, OK: true, Writes: 8204},
		{T: fsec(4.3), Gen: 2, OK: true, Writes: 0},
	}
	rc := recoveries(v)
	if len(rc) != 1 || !rc[0].IsProgrammed || rc[0].Programmed != fsec(4.3) || rc[0].Writes != 0 {
		t.Fatalf("recovery %+v, want programmed at 4.3 s by the new controller, 0 writes", rc)
	}
	v.tstate[1].Writes = 8204
	checkConverge(v)
	if len(v.res.Failures) != 1 || !strings.Contains(v.res.Failures[0].Msg, "8204 writes") {
		t.Fatalf("failures %v, want one naming the restarted controller's 8204 writes", v.res.Failures)
	}
}
