package scenario

import (
	"fmt"
	"strings"
	"time"
)

// blackHole is a run of new TCP connections the VIP did not answer: from
// the first that failed, or whose first SYN went unanswered (it connected
// only on a retransmission, synRetry or later), to the next that
// connected at once (Open: none did before the step's end, which then
// ends it). Without the retransmitted ones, a black hole shorter than the
// client's connect timeout would not show: the retransmitted SYN gets
// through.
type blackHole struct {
	From, To time.Duration
	Failed   int
	Open     bool
}

func (b blackHole) Len() time.Duration { return b.To - b.From }

// blackHoles finds the runs of failed new TCP connections among flows
// (sorted by start), closing an open run at end.
func blackHoles(flows []Flow, end time.Duration) []blackHole {
	var out []blackHole
	var cur *blackHole
	for _, f := range flows {
		if f.Kind != "tcp" {
			continue
		}
		lost := f.Err != "" || f.Connect >= synRetry
		switch {
		case lost && cur == nil:
			cur = &blackHole{From: f.Start, Failed: 1}
		case lost:
			cur.Failed++
		case cur != nil:
			cur.To = f.Start
			out = append(out, *cur)
			cur = nil
		}
	}
	if cur != nil {
		cur.To, cur.Open = max(end, cur.From), true
		out = append(out, *cur)
	}
	return out
}

// longestBlackHole is the longest run, or false when none failed.
func longestBlackHole(hs []blackHole) (blackHole, bool) {
	var best blackHole
	for _, h := range hs {
		if h.Len() >= best.Len() || best.Failed == 0 {
			best = h
		}
	}
	return best, best.Failed > 0
}

// checkBlackHole: the longest time new TCP connections to the VIP failed
// in the step is within the bound, widened by the time the scheduler
// stalled the testbench in the step (the client's connects, the switch
// and the controller share the machine).
func checkBlackHole(v *stepView) {
	ex := v.st.Expect.BlackHole
	if ex == nil {
		return
	}
	tcp := 0
	for _, f := range v.flows {
		if f.Kind == "tcp" {
			tcp++
		}
	}
	if tcp == 0 {
		v.fail("blackhole", "", "the step opened no new TCP connection: nothing measures the black hole (give traffic.rate and mix.tcp)")
		return
	}
	h, ok := longestBlackHole(blackHoles(v.flows, v.sr.End))
	if !ok {
		v.pass("blackhole", "no new connection failed or waited for a SYN retransmission (%d opened); bound %s", tcp, ex.Max.D())
		return
	}
	d := v.schedIn(h.From, h.To)
	bound := ex.Max.D() + d.Slack()
	open := ""
	if h.Open {
		open = ", still failing at the step's end"
	}
	msg := fmt.Sprintf("longest black hole %.2f s (%.2f s to %.2f s: %d of %d new connections failed or connected only on a SYN retransmission%s); bound %s",
		h.Len().Seconds(), h.From.Seconds(), h.To.Seconds(), h.Failed, tcp, open, fmtBound(ex.Max.D(), d))
	if h.Open || h.Len() > bound {
		v.fail("blackhole", "", "%s", msg)
		return
	}
	v.pass("blackhole", "%s", msg)
}

func fmtBound(b time.Duration, d SchedDelay) string {
	if d.RunWait > d.Lost {
		return fmt.Sprintf("%.2f s + %.2f s the switch and the controller waited for a CPU meanwhile (timers: %.2f s lost to scheduling)", b.Seconds(), d.RunWait.Seconds(), d.Lost.Seconds())
	}
	return fmt.Sprintf("%.2f s + %.2f s lost to scheduling meanwhile", b.Seconds(), d.Lost.Seconds())
}

// holeSlack: a black hole that begins this long after a fault's end (or
// the targets programmed again) is still the fault's.
const holeSlack = 250 * time.Millisecond

// Recovery is what a kill, block or detach fault showed (times since the
// run's start).
type Recovery struct {
	Fault FaultEvent `json:"fault"`
	// Detected: when the controller first reported a target not
	// programmed after the fault (WasNoticed false: it never did).
	Detected   time.Duration `json:"detected,omitempty"`
	WasNoticed bool          `json:"noticed"`
	// Programmed: when every target was programmed again after the
	// fault's end (and after the loss was noticed); IsProgrammed false:
	// not by the step's end, Why says what was not.
	Programmed   time.Duration `json:"programmed,omitempty"`
	IsProgrammed bool          `json:"isProgrammed"`
	Why          string        `json:"why,omitempty"`
	// Served: the end of the black hole the fault made (the fault's end
	// when it made none).
	Served time.Duration `json:"served"`
	// Writes from the fault to Programmed.
	Writes uint64 `json:"writes"`
	// Plot is the fault's plot file.
	Plot string `json:"plot,omitempty"`
}

// Converged is when both the controller and the traffic recovered.
func (rc Recovery) Converged() time.Duration { return max(rc.Programmed, rc.Served) }

// recoveries measures the step's kill, block and detach faults.
func recoveries(v *stepView) []Recovery {
	var out []Recovery
	holes := blackHoles(v.flows, v.sr.End)
	for _, f := range v.faults {
		if (f.Kind != "kill" && f.Kind != "block" && f.Kind != "detach") || f.Err != "" || f.End == 0 {
			continue
		}
		rc := Recovery{Fault: f, Served: f.End}
		var base TargetsState
		for _, s := range v.tstate {
			if s.T <= f.T {
				base = s
			}
		}
		from := f.End
		for _, s := range v.tstate {
			if s.T >= f.T && !s.OK {
				rc.Detected, rc.WasNoticed = s.T, true
				from = max(from, s.T)
				break
			}
		}
		// The first state at or after from that is programmed; states are
		// kept when they change, so the one in force at from counts too.
		for i, s := range v.tstate {
			if s.T > v.sr.End {
				break
			}
			if i+1 < len(v.tstate) && v.tstate[i+1].T <= from {
				continue // superseded before from
			}
			rc.Why = s.Why
			if !s.OK || (f.Kind == "kill" && f.What == "controller" && s.Gen == base.Gen) {
				continue
			}
			rc.Programmed, rc.IsProgrammed = max(s.T, from), true
			if s.Gen == base.Gen {
				rc.Writes = s.Writes - base.Writes
			} else {
				rc.Writes = s.Writes
			}
			break
		}
		if rc.IsProgrammed && rc.Programmed < f.End {
			rc.Programmed = f.End
		}
		// The black hole the fault made: one that ends after the fault
		// and began before the targets were programmed again, or a few
		// connection intervals after that or the fault's end (the first
		// connection to fail may start a little after the fault); an
		// isolated lost SYN later on is not the fault's.
		last := max(f.End, rc.Programmed) + holeSlack
		if !rc.IsProgrammed {
			last = v.sr.End
		}
		for _, h := range holes {
			if h.To >= f.T && h.From <= last {
				rc.Served = max(rc.Served, h.To)
			}
		}
		out = append(out, rc)
	}
	return out
}

// checkConverge: for each kill, block or detach fault, the controller
// noticed within Detect (for a lost switch session), every target was
// programmed again and new connections succeeded within Within of the
// fault's end, writing at most MaxWrites on the way.
func checkConverge(v *stepView) {
	ex := v.st.Expect.Converge
	if ex == nil {
		return
	}
	rcs := recoveries(v)
	if len(rcs) == 0 {
		for _, f := range v.faults {
			if strings.HasPrefix(f.Note, "skipped") {
				v.pass("converge", "%s: %s", f.Fault, f.Note)
				return
			}
		}
		v.fail("converge", "", "no kill, block or detach fault took effect in the step")
		return
	}
	for _, rc := range rcs {
		f := rc.Fault
		name := "converge " + f.Fault
		seesLoss := f.Kind == "block" || (f.Kind == "kill" && f.What == "switch")
		if ex.Detect > 0 && seesLoss {
			to := f.T + ex.Detect.D()
			if rc.WasNoticed {
				to = rc.Detected
			}
			d := v.schedIn(f.T, to)
			switch {
			case !rc.WasNoticed:
				v.fail(name, "", "the controller never reported the switch lost (fault at %.2f s); bound %s", f.T.Seconds(), fmtBound(ex.Detect.D(), d))
			case rc.Detected-f.T > ex.Detect.D()+d.Slack():
				v.fail(name, "", "the controller reported the switch lost %.2f s after the fault; bound %s", (rc.Detected - f.T).Seconds(), fmtBound(ex.Detect.D(), d))
			default:
				v.pass(name, "loss reported %.2f s after the fault (the session ended, or the heartbeat went unanswered); bound %s", (rc.Detected - f.T).Seconds(), fmtBound(ex.Detect.D(), d))
			}
		}
		if !rc.IsProgrammed {
			v.fail(name, "", "targets not programmed again by the step's end (%.2f s after the fault's end at %.2f s): %s", (v.sr.End - f.End).Seconds(), f.End.Seconds(), rc.Why)
			continue
		}
		conv := rc.Converged() - f.End
		d := v.schedIn(f.End, rc.Converged())
		bound := ex.Within.D() + d.Slack()
		msg := fmt.Sprintf("converged %.2f s after the fault's end at %.2f s (targets programmed at +%.2f s, new connections served at +%.2f s, %d writes); bound %s",
			conv.Seconds(), f.End.Seconds(), (rc.Programmed - f.End).Seconds(), (rc.Served - f.End).Seconds(), rc.Writes, fmtBound(ex.Within.D(), d))
		bad := conv > bound
		if ex.MaxWrites != nil && rc.Writes > uint64(*ex.MaxWrites) {
			bad = true
			msg += fmt.Sprintf("; want at most %d writes (a read-back that finds the tables intact writes nothing)", *ex.MaxWrites)
		}
		if bad {
			v.fail(name, "", "%s", msg)
		} else {
			v.pass(name, "%s", msg)
		}
	}
}

// checkControllerKill: with controller: process, a kill: controller
// fault must have been a process kill: the lbc run it found died of
// SIGKILL (its wait status says so) and another process took over.
func checkControllerKill(v *stepView) {
	if v.res.Controller != ControllerProcess {
		return
	}
	for _, f := range v.faults {
		if f.Kind != "kill" || f.What != "controller" {
			continue
		}
		name := "process " + f.Fault
		k := f.Killed
		switch {
		case k == nil || k.PID == 0:
			v.fail(name, "", "no lbc run process was killed (%s)", f.Note)
		case k.Died != diedOfSIGKILL:
			v.fail(name, "", "lbc run (pid %d) ended %q, want %q", k.PID, k.Died, diedOfSIGKILL)
		case k.NewPID == 0:
			v.fail(name, "", "lbc run (pid %d) was killed, but no lbc run was started again: %s", k.PID, f.Err)
		case k.NewPID == k.PID:
			v.fail(name, "", "the lbc run after the kill has the killed one's pid %d: not a new process", k.PID)
		default:
			v.pass(name, "lbc run (pid %d) %s; lbc run (pid %d) took over", k.PID, k.Died, k.NewPID)
		}
	}
}
