package scenario

import (
	"context"
	"fmt"
	"math"
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
	Bound       float64 `json:"bound"` // ± share
	RingBefore  float64 `json:"ringBefore"`
	RingAfter   float64 `json:"ringAfter"`
	KeptAlive   int     `json:"keptAlive"`
	KeptBroken  int     `json:"keptBroken"`
	KeptRestart int     `json:"keptRestart"` // closed by the backend's own restart
	DatapathNew uint64  `json:"datapathNew"`
}

// evaluate runs a step's assertions and fills its table.
func (r *runner) evaluate(ctx context.Context, res *Result, sr *StepResult) {
	st := &r.sc.Steps[sr.Index]
	where := fmt.Sprintf("step %d %q", sr.Index+1, st.Name)
	r.rmu.Lock()
	rings := append([]RingState(nil), r.rings...)
	var faults []FaultEvent
	for _, f := range r.faults {
		if f.Step == sr.Index {
			faults = append(faults, f)
		}
	}
	r.rmu.Unlock()
	r.tr.mu.Lock()
	var flows []Flow
	for _, f := range r.tr.flows {
		if f.Step == sr.Index {
			flows = append(flows, f)
		}
	}
	kepts := append([]*kept(nil), r.tr.kept...)
	r.tr.mu.Unlock()
	sort.Slice(flows, func(i, j int) bool { return flows[i].Start < flows[j].Start })

	// The ring in force before and at the end of the step, and the time
	// it settled: after the last fault and the last ring change.
	before, after := ringAt(rings, sr.Start), ringAt(rings, sr.End)
	settle := sr.Start
	for _, f := range faults {
		settle = max(settle, f.T)
	}
	for _, rs := range rings {
		if rs.T > sr.Start && rs.T <= sr.End {
			settle = max(settle, rs.T)
		}
	}
	sr.Settle = settle

	fail := func(check, backend, format string, a ...any) {
		msg := where + ": " + check + ": "
		if backend != "" {
			msg += "backend " + backend + ": "
		}
		msg += fmt.Sprintf(format, a...)
		res.Failures = append(res.Failures, Failure{Step: st.Name, Check: check, Backend: backend, Msg: msg})
		sr.Checks = append(sr.Checks, Check{Name: check, Msg: msg})
	}
	pass := func(check, format string, a ...any) {
		sr.Checks = append(sr.Checks, Check{Name: check, OK: true, Msg: fmt.Sprintf(format, a...)})
	}
	for _, f := range faults {
		if f.Err != "" {
			fail("fault", f.Backend, "%s failed: %s", f.Fault, f.Err)
		}
	}

	names := r.sc.BackendNames()
	rows := map[string]*Row{}
	for _, n := range names {
		rows[n] = &Row{Backend: n, RingBefore: before.Backends[n].Share, RingAfter: after.Backends[n].Share, DatapathNew: sr.DatapathNew[n]}
	}
	for _, f := range flows {
		row := rows[f.Backend]
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

	// Share per backend.
	if sh := st.Expect.Share; sh != nil {
		r.checkShare(sh, flows, settle, after, rows, names, fail, pass)
	}

	// Eligible set at the end of the step.
	if len(st.Expect.Eligible) > 0 {
		want := append([]string(nil), st.Expect.Eligible...)
		sort.Strings(want)
		if strings.Join(want, ",") != strings.Join(after.Eligible, ",") {
			fail("eligible", "", "the controller's eligible set is {%s} (%s %s), want {%s}", strings.Join(after.Eligible, ", "), after.Decision, after.Rule, strings.Join(want, ", "))
		} else {
			pass("eligible", "{%s} (%s, %s)", strings.Join(want, ", "), after.Decision, after.Rule)
		}
	}

	// Failover: each fault shows within the bound.
	if fo := st.Expect.Failover; fo != nil {
		for _, f := range faults {
			if f.Kind == "restart" {
				continue
			}
			ctl, ok := reflected(rings, f)
			if !ok {
				fail("failover", f.Backend, "%s at %.2fs: the controller never showed it before the step ended at %.2fs", f.Fault, f.T.Seconds(), sr.End.Seconds())
				continue
			}
			last, lastWhy := time.Duration(0), ""
			if f.Kind == "fail" || f.Kind == "down" || f.Kind == "remove" || f.Kind == "weight" && f.To == 0 {
				// Until the backend is brought back in this step.
				until := sr.End
				for _, g := range faults {
					if g.T > f.T && g.Backend == f.Backend && (g.Kind == "recover" || g.Kind == "weight" && g.To > 0) {
						until = min(until, g.T)
					}
				}
				for _, fl := range flows {
					if fl.Start < f.T || fl.Start >= until {
						continue
					}
					if fl.Backend == f.Backend || (fl.Err != "" && f.Kind == "down") {
						if fl.Start > last {
							last = fl.Start
							lastWhy = fl.Kind + " flow to " + fl.Backend
							if fl.Err != "" {
								lastWhy = fl.Kind + " flow failed (" + fl.Err + ")"
							}
						}
					}
				}
			}
			took := ctl - f.T
			how := fmt.Sprintf("controller showed it after %d ms", took.Milliseconds())
			if last > ctl {
				took = last - f.T
				how = fmt.Sprintf("last new %s at +%d ms; controller after %d ms", lastWhy, (last - f.T).Milliseconds(), (ctl - f.T).Milliseconds())
			}
			if took > fo.Within.D() {
				fail("failover", f.Backend, "%s took %d ms, bound %d ms (%s)", f.Fault, took.Milliseconds(), fo.Within.D().Milliseconds(), how)
			} else {
				pass("failover", "%s: %d ms ≤ %d ms (%s)", f.Fault, took.Milliseconds(), fo.Within.D().Milliseconds(), how)
			}
		}
	}

	// Established connections.
	may := map[string]bool{}
	rule := ""
	if e := st.Expect.Established; e != nil {
		for _, n := range e.MayBreak {
			may[n] = true
		}
		rule = e.Rule
	}
	alive, total := 0, 0
	broken := map[string][]*kept{}
	allowed := 0
	for _, k := range kepts {
		if k.opened > sr.End || (k.why != "" && k.brokeStep < sr.Index) {
			continue
		}
		total++
		row := rows[k.backend]
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
			msg += fmt.Sprintf("; %d broke on %s as %s allows", allowed, strings.Join(st.Expect.Established.MayBreak, ", "), rule)
		}
		if n := total - alive - allowed; n > 0 {
			msg += fmt.Sprintf("; %d closed by their backend's restart", n)
		}
		pass("established", "%s", msg)
	} else {
		for _, n := range names {
			ks := broken[n]
			if len(ks) == 0 {
				continue
			}
			onB := 0
			for _, k := range kepts {
				if k.backend == n && k.opened <= sr.End {
					onB++
				}
			}
			fail("established", n, "%d of %d established connections broke (first at %.2fs: %s); no rule allows it here", len(ks), onB, ks[0].brokeAt.Seconds(), ks[0].why)
		}
	}

	// Fragments delivered whole.
	frags, lost, partial := 0, 0, []Flow{}
	for _, f := range flows {
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
	if frags > 0 || st.Expect.Fragments != nil {
		maxLost := 0
		if st.Expect.Fragments != nil {
			maxLost = st.Expect.Fragments.MaxLost
		}
		switch {
		case len(partial) > 0:
			f := partial[0]
			fail("fragments", f.Backend, "%d of %d fragmented datagrams arrived cut (first: %d of %d bytes from client %s)", len(partial), frags, f.Got, f.Size, f.Client)
		case lost > maxLost:
			fail("fragments", "", "%d of %d fragmented datagrams got no answer (at most %d may)", lost, frags, maxLost)
		case st.Expect.Fragments != nil && frags == 0:
			fail("fragments", "", "no fragmented datagram was sent (traffic.mix.frag is 0)")
		default:
			pass("fragments", "%d fragmented datagrams (%d bytes each) answered whole, %d lost (≤ %d)", frags, st.Traffic.FragSize, lost, maxLost)
		}
	}

	// Sticky clients.
	if st.Expect.Sticky {
		seen := map[string]map[string]bool{}
		for _, f := range flows {
			if f.Start < settle || f.Backend == "" {
				continue
			}
			c := flowKey(f)
			if seen[c] == nil {
				seen[c] = map[string]bool{}
			}
			seen[c][f.Backend] = true
		}
		bad := ""
		for c, bs := range seen {
			if len(bs) > 1 {
				var l []string
				for b := range bs {
					l = append(l, b)
				}
				sort.Strings(l)
				bad = fmt.Sprintf("client %s reached %s", c, strings.Join(l, " and "))
				break
			}
		}
		if bad != "" {
			fail("sticky", "", "after the ring settled at %.2fs, %s", settle.Seconds(), bad)
		} else {
			pass("sticky", "after %.2fs each of %d client addresses stayed on one backend per protocol", settle.Seconds(), len(seen))
		}
	}
	for _, n := range names {
		sr.Rows = append(sr.Rows, *rows[n])
	}
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

func (r *runner) checkShare(sh *ShareExpect, flows []Flow, settle time.Duration, ring RingState, rows map[string]*Row, names []string,
	fail func(check, backend, format string, a ...any), pass func(check, format string, a ...any)) {
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
	z := zBound(1-sh.Confidence, max(k, 1))
	ok := true
	var parts []string
	for _, b := range names {
		p := expect[b]
		obs := counts[b]
		row := rows[b]
		row.Counted = obs
		row.Share = float64(obs) / float64(n)
		row.Expect = p
		sd := math.Sqrt(float64(n) * p * (1 - p))
		bound := z*sd + 0.5 // continuity correction
		row.Bound = bound / float64(n)
		dev := math.Abs(float64(obs) - float64(n)*p)
		if dev > bound {
			ok = false
			if p == 0 {
				fail("share", b, "%d of %d new %s (%.1f %%) after the ring settled at %.2fs, expected none (share 0 in %s)", obs, n, sh.Unit, 100*row.Share, settle.Seconds(), src)
			} else {
				fail("share", b, "%d of %d new %s (%.1f %%), expected %.1f %% ± %.1f %% (n·p = %.1f, bound ±%.1f at confidence %g, from %s)",
					obs, n, sh.Unit, 100*row.Share, 100*p, 100*row.Bound, float64(n)*p, bound, sh.Confidence, src)
			}
		}
		parts = append(parts, fmt.Sprintf("%s %d (%.0f%% vs %.0f%%)", b, obs, 100*row.Share, 100*p))
	}
	if ok && failed == 0 {
		pass("share", "%d new %s after %.2fs within ±z·σ (z=%.2f, confidence %g, from %s): %s", n, sh.Unit, settle.Seconds(), z, sh.Confidence, src, strings.Join(parts, ", "))
	}
}

// zBound is the two-sided normal quantile for a family of k tests at
// total error alpha (Bonferroni): Φ⁻¹(1 − alpha/(2k)).
func zBound(alpha float64, k int) float64 {
	return math.Sqrt2 * math.Erfinv(1-alpha/float64(k))
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
