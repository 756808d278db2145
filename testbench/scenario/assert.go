package scenario

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Row is one backend's line in a step's table.
type Row struct {
	Backend     string  `json:"backend"`
	NewTCP      int     `json:"newTCP"`
	UDP         int     `json:"udp"`
	Frag        int     `json:"frag"`
	Counted     int     `json:"counted"` // trials after the ring settled
	Share       float64 `json:"share"`
	Expect      float64 `json:"expect"`
	Judged      bool    `json:"judged"` // the step had a share check
	Low         int     `json:"low"`    // the counts a correct datapath gives
	High        int     `json:"high"`   // (the exact binomial bounds)
	RingBefore  float64 `json:"ringBefore"`
	RingAfter   float64 `json:"ringAfter"`
	KeptAlive   int     `json:"keptAlive"`
	KeptBroken  int     `json:"keptBroken"`
	KeptRestart int     `json:"keptRestart"` // closed by the backend's own restart
	DatapathNew uint64  `json:"datapathNew"`
}

// evaluate runs a step's assertions and fills its table.
func (r *runner) evaluate(_ context.Context, res *Result, sr *StepResult) {
	v := r.stepView(res, sr)
	for _, check := range assertions {
		check(v)
	}
	sr.Recoveries = recoveries(v)
	for _, n := range v.names {
		sr.Rows = append(sr.Rows, *v.rows[n])
	}
}

// assertions are the checks of a step, in the order they are reported.
// Each looks at its own part of the step's Expect and does nothing when
// the step does not ask for it.
var assertions = []func(*stepView){
	checkFaults,
	checkShare,
	checkEligible,
	checkFailover,
	checkEstablished,
	checkFragments,
	checkSticky,
	checkBlackHole,
	checkConverge,
	checkControllerKill,
}

// stepView is what a step's assertions judge: the step's faults, flows,
// kept connections and ring states (copied once, under the runner's
// locks), the ring before and after, and the table being filled.
type stepView struct {
	st     *Step
	sr     *StepResult
	res    *Result
	where  string
	names  []string
	rings  []RingState
	tstate []TargetsState
	faults []FaultEvent
	flows  []Flow // sorted by start
	kepts  []*kept
	before RingState
	after  RingState
	settle time.Duration // after the last fault and the last ring change
	rows   map[string]*Row
	// probe measures the scheduling delay in a span of the run (nil:
	// the step's whole, sr.Sched).
	probe func(from, to time.Duration) SchedDelay
}

// schedIn is the scheduling delay measured in [from, to].
func (v *stepView) schedIn(from, to time.Duration) SchedDelay {
	if v.probe == nil {
		return v.sr.Sched
	}
	return v.probe(from, to)
}

func (r *runner) stepView(res *Result, sr *StepResult) *stepView {
	v := &stepView{st: &r.sc.Steps[sr.Index], sr: sr, res: res, names: r.sc.BackendNames()}
	if r.probe != nil {
		v.probe = func(from, to time.Duration) SchedDelay {
			d := r.probe.Window(from, to)
			if r.rwait != nil {
				d.RunWait = r.rwait.Window(from, to)
			}
			return d
		}
	}
	v.where = fmt.Sprintf("step %d %q", sr.Index+1, v.st.Name)
	r.rmu.Lock()
	v.rings = append([]RingState(nil), r.rings...)
	v.tstate = append([]TargetsState(nil), r.tstate...)
	for _, f := range r.faults {
		if f.Step == sr.Index {
			v.faults = append(v.faults, f)
		}
	}
	r.rmu.Unlock()
	r.tr.mu.Lock()
	for _, f := range r.tr.flows {
		if f.Step == sr.Index {
			v.flows = append(v.flows, f)
		}
	}
	v.kepts = append([]*kept(nil), r.tr.kept...)
	r.tr.mu.Unlock()
	sort.Slice(v.flows, func(i, j int) bool { return v.flows[i].Start < v.flows[j].Start })

	// The ring in force before and at the end of the step, and the time
	// it settled: after the last fault and the last ring change.
	v.before, v.after = ringAt(v.rings, sr.Start), ringAt(v.rings, sr.End)
	v.settle = sr.Start
	for _, f := range v.faults {
		// A restart, kill or block settles when it is over: connections
		// opened while the switch restarts fail by design.
		v.settle = max(v.settle, f.T, f.End, f.T+f.Took)
	}
	for _, rs := range v.rings {
		if rs.T > sr.Start && rs.T <= sr.End {
			v.settle = max(v.settle, rs.T)
		}
	}
	sr.Settle = v.settle

	v.rows = map[string]*Row{}
	for _, n := range v.names {
		v.rows[n] = &Row{Backend: n, RingBefore: v.before.Backends[n].Share, RingAfter: v.after.Backends[n].Share, DatapathNew: sr.DatapathNew[n]}
	}
	for _, f := range v.flows {
		row := v.rows[f.Backend]
		if row == nil {
			continue
		}
		switch f.Kind {
		case "tcp":
			row.NewTCP++
		case "udp":
			row.UDP++
		case "frag":
			row.Frag++
		}
	}
	return v
}

// fail records a broken assertion in the result and the step's checks.
func (v *stepView) fail(check, backend, format string, a ...any) {
	msg := v.where + ": " + check + ": "
	if backend != "" {
		msg += "backend " + backend + ": "
	}
	msg += fmt.Sprintf(format, a...)
	v.res.Failures = append(v.res.Failures, Failure{Step: v.st.Name, Check: check, Backend: backend, Msg: msg})
	v.sr.Checks = append(v.sr.Checks, Check{Name: check, Msg: msg})
}

// pass records an assertion that held.
func (v *stepView) pass(check, format string, a ...any) {
	v.sr.Checks = append(v.sr.Checks, Check{Name: check, OK: true, Msg: fmt.Sprintf(format, a...)})
}

// checkFaults: a fault that could not be injected fails the step.
func checkFaults(v *stepView) {
	for _, f := range v.faults {
		if f.Err != "" {
			v.fail("fault", f.Backend, "%s failed: %s", f.Fault, f.Err)
		}
	}
}

// checkEligible: the controller's eligible set at the end of the step.
func checkEligible(v *stepView) {
	if len(v.st.Expect.Eligible) == 0 {
		return
	}
	want := append([]string(nil), v.st.Expect.Eligible...)
	sort.Strings(want)
	after := v.after
	if strings.Join(want, ",") != strings.Join(after.Eligible, ",") {
		v.fail("eligible", "", "the controller's eligible set is {%s} (%s %s), want {%s}", strings.Join(after.Eligible, ", "), after.Decision, after.Rule, strings.Join(want, ", "))
		return
	}
	v.pass("eligible", "{%s} (%s, %s)", strings.Join(want, ", "), after.Decision, after.Rule)
}

// checkFailover: each fault shows within the bound, both in the
// controller's status and in the traffic (no new flow reaches a backend
// taken out after the bound).
func checkFailover(v *stepView) {
	fo := v.st.Expect.Failover
	if fo == nil {
		return
	}
	for _, f := range v.faults {
		if f.Kind == "restart" {
			continue
		}
		ctl, ok := reflected(v.rings, f)
		if !ok {
			v.fail("failover", f.Backend, "%s at %.2fs: the controller never showed it before the step ended at %.2fs", f.Fault, f.T.Seconds(), v.sr.End.Seconds())
			continue
		}
		last, lastWhy := v.lastFlowTo(f)
		took := ctl - f.T
		how := fmt.Sprintf("controller showed it after %d ms", took.Milliseconds())
		if last > ctl {
			took = last - f.T
			how = fmt.Sprintf("last new %s at +%d ms; controller after %d ms", lastWhy, (last - f.T).Milliseconds(), (ctl - f.T).Milliseconds())
		}
		if took > fo.Within.D() {
			v.fail("failover", f.Backend, "%s took %d ms, bound %d ms (%s)", f.Fault, took.Milliseconds(), fo.Within.D().Milliseconds(), how)
		} else {
			v.pass("failover", "%s: %d ms ≤ %d ms (%s)", f.Fault, took.Milliseconds(), fo.Within.D().Milliseconds(), how)
		}
	}
}

// lastFlowTo is the start of the last new flow that still reached the
// backend a fault took out (or, for "down", failed), until the backend
// was brought back in the step; 0 when none did or the fault takes
// nothing out.
func (v *stepView) lastFlowTo(f FaultEvent) (time.Duration, string) {
	last, why := time.Duration(0), ""
	if !(f.Kind == "fail" || f.Kind == "down" || f.Kind == "remove" || f.Kind == "weight" && f.To == 0) {
		return last, why
	}
	until := v.sr.End
	for _, g := range v.faults {
		if g.T > f.T && g.Backend == f.Backend && (g.Kind == "recover" || g.Kind == "weight" && g.To > 0) {
			until = min(until, g.T)
		}
	}
	for _, fl := range v.flows {
		if fl.Start < f.T || fl.Start >= until {
			continue
		}
		if (fl.Backend == f.Backend || (fl.Err != "" && f.Kind == "down")) && fl.Start > last {
			last = fl.Start
			why = fl.Kind + " flow to " + fl.Backend
			if fl.Err != "" {
				why = fl.Kind + " flow failed (" + fl.Err + ")"
			}
		}
	}
	return last, why
}

// checkEstablished: no established connection breaks unless the step
// allows it on its backend (or the backend's own restart closed it).
// Always checked.
func checkEstablished(v *stepView) {
	may := map[string]bool{}
	rule := ""
	if e := v.st.Expect.Established; e != nil {
		for _, n := range e.MayBreak {
			may[n] = true
		}
		rule = e.Rule
	}
	alive, total, allowed := 0, 0, 0
	broken := map[string][]*kept{}
	for _, k := range v.kepts {
		if k.opened > v.sr.End || (k.why != "" && k.brokeStep < v.sr.Index) {
			continue
		}
		total++
		row := v.rows[k.backend]
		switch {
		case k.why == "":
			alive++
			if row != nil {
				row.KeptAlive++
			}
		case k.byRestart:
			if row != nil {
				row.KeptRestart++
			}
		default:
			if row != nil {
				row.KeptBroken++
			}
			if may[k.backend] {
				allowed++
			} else {
				broken[k.backend] = append(broken[k.backend], k)
			}
		}
	}
	if len(broken) == 0 {
		msg := fmt.Sprintf("%d of %d established connections alive", alive, total)
		if allowed > 0 {
			msg += fmt.Sprintf("; %d broke on %s as %s allows", allowed, strings.Join(v.st.Expect.Established.MayBreak, ", "), rule)
		}
		if n := total - alive - allowed; n > 0 {
			msg += fmt.Sprintf("; %d closed by their backend's restart", n)
		}
		v.pass("established", "%s", msg)
		return
	}
	for _, n := range v.names {
		ks := broken[n]
		if len(ks) == 0 {
			continue
		}
		onB := 0
		for _, k := range v.kepts {
			if k.backend == n && k.opened <= v.sr.End {
				onB++
			}
		}
		v.fail("established", n, "%d of %d established connections broke (first at %.2fs: %s); no rule allows it here", len(ks), onB, ks[0].brokeAt.Seconds(), ks[0].why)
	}
}

// checkFragments: fragmented datagrams are answered whole, at most
// MaxLost lost. Checked whenever the step sent any.
func checkFragments(v *stepView) {
	frags, lost, partial := 0, 0, []Flow{}
	for _, f := range v.flows {
		if f.Kind != "frag" {
			continue
		}
		frags++
		switch {
		case f.Err != "":
			lost++
		case f.Got != f.Size:
			partial = append(partial, f)
		}
	}
	exp := v.st.Expect.Fragments
	if frags == 0 && exp == nil {
		return
	}
	maxLost := 0
	if exp != nil {
		maxLost = exp.MaxLost
	}
	switch {
	case len(partial) > 0:
		f := partial[0]
		v.fail("fragments", f.Backend, "%d of %d fragmented datagrams arrived cut (first: %d of %d bytes from client %s)", len(partial), frags, f.Got, f.Size, f.Client)
	case lost > maxLost:
		v.fail("fragments", "", "%d of %d fragmented datagrams got no answer (at most %d may)", lost, frags, maxLost)
	case exp != nil && frags == 0:
		v.fail("fragments", "", "no fragmented datagram was sent (traffic.mix.frag is 0)")
	default:
		v.pass("fragments", "%d fragmented datagrams (%d bytes each) answered whole, %d lost (≤ %d)", frags, v.st.Traffic.FragSize, lost, maxLost)
	}
}

// checkSticky: after the ring settled, every client address reaches one
// backend per protocol.
func checkSticky(v *stepView) {
	if !v.st.Expect.Sticky {
		return
	}
	seen := map[string]map[string]bool{}
	for _, f := range v.flows {
		if f.Start < v.settle || f.Backend == "" {
			continue
		}
		c := flowKey(f)
		if seen[c] == nil {
			seen[c] = map[string]bool{}
		}
		seen[c][f.Backend] = true
	}
	// The first offender in a fixed order, so the report is repeatable.
	clients := make([]string, 0, len(seen))
	for c := range seen {
		clients = append(clients, c)
	}
	sort.Strings(clients)
	for _, c := range clients {
		if bs := seen[c]; len(bs) > 1 {
			var l []string
			for b := range bs {
				l = append(l, b)
			}
			sort.Strings(l)
			v.fail("sticky", "", "after the ring settled at %.2fs, client %s reached %s", v.settle.Seconds(), c, strings.Join(l, " and "))
			return
		}
	}
	v.pass("sticky", "after %.2fs each of %d client addresses stayed on one backend per protocol", v.settle.Seconds(), len(seen))
}

// flowKey is a flow's client address and IP protocol: the 3-tuple of
// CLIENT_IP_PROTO affinity (the VIP is the same for all).
func flowKey(f Flow) string {
	if f.Kind == "tcp" {
		return f.Client.String() + " over TCP"
	}
	return f.Client.String() + " over UDP"
}

// countsAsNew: a flow that selects a backend afresh from the ring.
func countsAsNew(f Flow) bool { return f.Kind == "tcp" || f.Kind == "udp" }

// checkShare: the share of new flows (or clients) per backend after the
// ring settled is within the exact binomial bounds of the ring's (or the
// scenario's) shares (binomial.go).
func checkShare(v *stepView) {
	sh := v.st.Expect.Share
	if sh == nil {
		return
	}
	flows, settle, ring, rows, names, fail, pass := v.flows, v.settle, v.after, v.rows, v.names, v.fail, v.pass
	// Trials after the ring settled.
	counts := map[string]int{}
	n, failed := 0, 0
	var firstErr string
	clients := map[string]bool{}
	for _, f := range flows {
		if f.Start < settle {
			continue
		}
		if sh.Unit == "clients" {
			c := flowKey(f)
			if clients[c] {
				continue
			}
			clients[c] = true
		} else if !countsAsNew(f) {
			continue
		}
		if f.Err != "" {
			failed++
			if firstErr == "" {
				firstErr = f.Err
			}
			continue
		}
		counts[f.Backend]++
		n++
	}
	expect := map[string]float64{}
	src := "the ring"
	if sh.Expect.Ring {
		for _, b := range names {
			expect[b] = ring.Backends[b].Share
		}
	} else {
		src = "the scenario"
		for b, v := range sh.Expect.Shares {
			expect[b] = v
		}
	}
	if failed > 0 {
		fail("share", "", "%d of %d new %s after the ring settled at %.2fs failed (first: %s)", failed, n+failed, sh.Unit, settle.Seconds(), firstErr)
	}
	if n < 10 {
		fail("share", "", "only %d new %s after the ring settled at %.2fs: too few to judge shares (lengthen the step or raise the rate)", n, sh.Unit, settle.Seconds())
		return
	}
	k := 0
	for _, p := range expect {
		if p > 0 && p < 1 {
			k++
		}
	}
	a := tailAlpha(sh.Confidence, k)
	// Each backend's count and the counts a correct datapath gives.
	for _, b := range names {
		p, row := expect[b], rows[b]
		row.Counted, row.Share, row.Expect, row.Judged = counts[b], float64(counts[b])/float64(n), p, true
		switch {
		case p <= 0:
			row.Low, row.High = 0, 0
		case p >= 1:
			row.Low, row.High = n, n
		default:
			row.Low, row.High = shareInterval(n, p, a)
		}
	}
	ok := true
	// Power: each backend that should get some must be told apart from one
	// that gets none, or a missing backend would pass unseen. The bounds
	// are still checked, so that a clear miss is named too.
	for _, b := range names {
		if p := expect[b]; p > 0 && p < 1 && rows[b].Low == 0 {
			ok = false
			fail("share", "", "only %d new %s after the ring settled at %.2fs: too few to tell backend %s (%.1f %%) from one that gets none at confidence %g (lengthen the step or raise the rate)",
				n, sh.Unit, settle.Seconds(), b, 100*p, sh.Confidence)
			break
		}
	}
	var parts []string
	for _, b := range names {
		p, row, obs := expect[b], rows[b], counts[b]
		if obs < row.Low || obs > row.High {
			ok = false
			if p == 0 {
				fail("share", b, "%d of %d new %s (%.1f %%) after the ring settled at %.2fs, expected none (share 0 in %s)", obs, n, sh.Unit, 100*row.Share, settle.Seconds(), src)
			} else {
				fail("share", b, "%d of %d new %s (%.1f %%), expected %.1f %%: n·p = %.1f, %d..%d at confidence %g (exact binomial, from %s)",
					obs, n, sh.Unit, 100*row.Share, 100*p, float64(n)*p, row.Low, row.High, sh.Confidence, src)
			}
		}
		parts = append(parts, fmt.Sprintf("%s %d (%.0f%% vs %.0f%%)", b, obs, 100*row.Share, 100*p))
	}
	if ok && failed == 0 {
		pass("share", "%d new %s after %.2fs within the exact binomial bounds (confidence %g, from %s): %s", n, sh.Unit, settle.Seconds(), sh.Confidence, src, strings.Join(parts, ", "))
	}
}

// ringAt is the last ring state at or before t.
func ringAt(rings []RingState, t time.Duration) RingState {
	var out RingState
	for _, rs := range rings {
		if rs.T <= t {
			out = rs
		}
	}
	if out.Backends == nil && len(rings) > 0 {
		out = rings[0]
	}
	return out
}

// reflected is when the controller's status first showed fault f.
func reflected(rings []RingState, f FaultEvent) (time.Duration, bool) {
	for _, rs := range rings {
		if rs.T < f.T {
			continue
		}
		v, present := rs.Backends[f.Backend]
		var ok bool
		switch f.Kind {
		case "fail", "down":
			ok = present && !v.Healthy
		case "recover":
			ok = present && v.Healthy
		case "weight":
			ok = present && v.Weight == f.To
		case "remove":
			ok = !present || v.Draining
		}
		if ok {
			return rs.T, true
		}
	}
	return 0, false
}
