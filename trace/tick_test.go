package trace

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/internal/tick"

	"github.com/lbc-dev/lbc/targets/sim"
)

// shifted is the reference's exact table with every idle timeout and every
// deadline moved by by: +1 tick is the latest a tick datapath may expire
// (R-AGE, design decision 8), 0 the exact reference; the tests use other
// shifts as datapaths that break the rule.
type shifted struct {
	*sim.Exact
	by time.Duration
}

// Aged implements sim.Ager: idle for idle+by at now.
func (s shifted) Aged(e sim.Entry, now, idle time.Duration) (bool, time.Duration) {
	age := now - e.LastSeen
	return age >= idle+s.by, age
}

// DeadlineExpired implements sim.DeadlineChecker: deadline+by has passed.
func (s shifted) DeadlineExpired(deadline, now time.Duration) bool { return now >= deadline+s.by }

// tickReplay is what replayTick found.
type tickReplay struct {
	Expected   int      // lines with an expectation
	Relaxed    []string // lines that matched the one-tick-late run only
	Mismatches []string // lines that matched neither
}

// replayTick replays a trace in lockstep on dut, a datapath whose clock
// has ticks of tk, and on the late reference: the exact reference with
// every idle timeout and deadline one tick later (shifted by tk), the
// latest R-AGE allows. The trace's expectations describe the exact
// reference; a line of dut matches when it meets its expectation or, if
// the late reference does not meet it either (the outcome depends on a
// timeout or deadline falling at most one tick before the line, or on
// such a line's outcome), when it is the late reference's outcome, on
// everything a datapath can observe (targets.Verdict.Same). Those lines
// are Relaxed. A dut that expires earlier than the exact instant, or later
// than one tick after it, differs from both on a line within that window.
// A dut late on one timeout and exact on another may later differ from
// both runs: that fails the trace (a false alarm to look into, never a
// false pass).
func replayTick(file string, dut sim.Conntrack, tk time.Duration) (tickReplay, error) {
	var res tickReplay
	sp, err := LoadSpec(file)
	if err != nil {
		return res, err
	}
	ctx := context.Background()
	base := filepath.Base(file)
	var rps [2]*Replayer
	for i, ct := range [2]sim.Conntrack{dut, shifted{sim.NewExact(), tk}} {
		dp := sim.New(sim.Options{Fallback: sp.Fallback, Conntrack: ct})
		if rps[i], err = NewReplayer(ctx, sp.Config, sp.State, dp, dp); err != nil {
			return res, err
		}
		rps[i].PushOnly = sp.PushOnly
	}
	for _, l := range sp.Lines {
		if l.Expect != nil {
			res.Expected++
		}
		outs, err := rps[0].Step(ctx, l)
		if err != nil {
			return res, fmt.Errorf("%s: %w", base, err)
		}
		late, err := rps[1].Step(ctx, l)
		if err != nil {
			return res, fmt.Errorf("%s: late reference: %w", base, err)
		}
		if len(outs) != len(late) {
			return res, fmt.Errorf("%s:%d: %d outputs, the late reference %d", base, l.No, len(outs), len(late))
		}
		for i, o := range outs {
			if o.Mismatch == "" {
				continue
			}
			lo := late[i]
			if o.Event == "" && lo.Event == "" && lo.Mismatch != "" && o.Verdict.Same(lo.Verdict) {
				res.Relaxed = append(res.Relaxed, fmt.Sprintf("%s:%d: one tick late (R-AGE, design decision 8): %s, as the late reference; the exact instant: %s", base, o.Line, o.Verdict, o.Mismatch))
				continue
			}
			res.Mismatches = append(res.Mismatches, fmt.Sprintf("%s:%d: %s (the late reference: %s)", base, o.Line, o.Mismatch, lateSays(lo)))
		}
	}
	if s := rps[0].Summary(); s.Expected != res.Expected {
		return res, fmt.Errorf("%s: %d expectations checked, %d in the file", base, s.Expected, res.Expected)
	}
	return res, nil
}

func lateSays(o Output) string {
	if o.Mismatch == "" {
		return "meets the expectation"
	}
	return o.Mismatch
}

// tickBounds are traces with a line 1 ns before an idle timeout (R-AGE) or
// a deadline (R-DRAIN, design decision 8) falls, one at the instant and one
// a tick of tick.TNA after it: a tick datapath must keep the flow at the
// first, may either keep or re-select it at the second, and must have
// re-selected it at the third.
var tickBounds = map[string]string{
	"r-age-bounds.jsonl": `# config: ct.yaml
# rules: R-AGE
{"t":1,"src":"198.51.100.60","dst":"203.0.113.1","proto":"tcp","sport":1000,"dport":80,"flags":"S","expect":{"ct":"new"}}
{"t":1,"src":"198.51.100.61","dst":"203.0.113.1","proto":"tcp","sport":1001,"dport":80,"flags":"S","expect":{"ct":"new"}}
{"t":1,"src":"198.51.100.62","dst":"203.0.113.1","proto":"tcp","sport":1002,"dport":80,"flags":"S","expect":{"ct":"new"}}
{"t":60.999999999,"src":"198.51.100.60","dst":"203.0.113.1","proto":"tcp","sport":1000,"dport":80,"flags":"A","expect":{"ct":"hit"}}
{"t":61,"src":"198.51.100.61","dst":"203.0.113.1","proto":"tcp","sport":1001,"dport":80,"flags":"A","expect":{"ct":"miss"}}
{"t":61.000065536,"src":"198.51.100.62","dst":"203.0.113.1","proto":"tcp","sport":1002,"dport":80,"flags":"A","expect":{"ct":"miss"}}
`,
	"r-drain-bounds.jsonl": `# config: drain.yaml
# push-only: true
# rules: R-DRAIN
{"t":0,"event":"health","backend":"dr-2","healthy":false}
{"t":0,"event":"health","backend":"dr-3","healthy":false}
{"t":1,"src":"198.51.100.90","dst":"203.0.113.61","proto":"tcp","sport":1,"dport":80,"flags":"S","expect":{"backend":"dr-1","ct":"new"}}
{"t":1,"src":"198.51.100.91","dst":"203.0.113.61","proto":"tcp","sport":1,"dport":80,"flags":"S","expect":{"backend":"dr-1","ct":"new"}}
{"t":1,"src":"198.51.100.92","dst":"203.0.113.61","proto":"tcp","sport":1,"dport":80,"flags":"S","expect":{"backend":"dr-1","ct":"new"}}
{"t":2,"event":"health","backend":"dr-2","healthy":true}
{"t":2,"event":"health","backend":"dr-3","healthy":true}
{"t":10,"event":"remove","backend":"dr-1","expect":{"service":"dr","eligible":["dr-2","dr-3"]}}
{"t":39.999999999,"src":"198.51.100.90","dst":"203.0.113.61","proto":"tcp","sport":1,"dport":80,"flags":"A","expect":{"backend":"dr-1","ct":"hit"}}
{"t":40,"src":"198.51.100.91","dst":"203.0.113.61","proto":"tcp","sport":1,"dport":80,"flags":"A","expect":{"in":["dr-2","dr-3"],"ct":"miss"}}
{"t":40.000065536,"src":"198.51.100.92","dst":"203.0.113.61","proto":"tcp","sport":1,"dport":80,"flags":"A","expect":{"in":["dr-2","dr-3"],"ct":"miss"}}
`,
}

// writeTickBounds writes tickBounds and their configurations to a
// temporary directory.
func writeTickBounds(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, cfg := range []string{"ct.yaml", "drain.yaml"} {
		data, err := os.ReadFile(filepath.Join(testdata, cfg))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, cfg), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, text := range tickBounds {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestRAGE_TickReplayBounds: replayTick accepts a datapath that expires
// at the exact instant or one tick after it (the TNA model does either,
// as the tick falls), and catches one that expires a tick or a nanosecond
// early, or two ticks late, on the line that shows it.
func TestRAGE_TickReplayBounds(t *testing.T) {
	dir := writeTickBounds(t)
	tna := func() sim.Conntrack {
		g, err := sim.NewTNA(sim.TNATofino1, 0)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	shift := func(d time.Duration) func() sim.Conntrack {
		return func() sim.Conntrack { return shifted{sim.NewExact(), d} }
	}
	for _, tc := range []struct {
		name    string
		dut     func() sim.Conntrack
		relaxed int    // lines decided one tick late, per trace
		fails   string // the line that must fail ("" passes)
	}{
		{"exact", shift(0), 0, ""},
		{"one tick late", shift(tick.TNA), 1, ""},
		{"TNA", tna, 1, ""},
		{"one ns early", shift(-1), 0, "39.999999999|60.999999999"},
		{"one tick early", shift(-tick.TNA), 0, "39.999999999|60.999999999"},
		{"two ticks late", shift(2 * tick.TNA), 1, "40.000065536|61.000065536"},
	} {
		for name, text := range tickBounds {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				res, err := replayTick(filepath.Join(dir, name), tc.dut(), tick.TNA)
				if err != nil {
					t.Fatal(err)
				}
				var want []string
				if tc.fails != "" {
					want = []string{fmt.Sprintf("%s:%d:", name, lineOf(t, text, tc.fails))}
				}
				var got []string
				for _, m := range res.Mismatches {
					got = append(got, m[:strings.Index(m, ": ")+1])
				}
				if !slices.Equal(got, want) {
					t.Errorf("mismatches on %v, want on %v: %q", got, want, res.Mismatches)
				}
				if len(res.Relaxed) != tc.relaxed {
					t.Errorf("%d lines relaxed, want %d: %q", len(res.Relaxed), tc.relaxed, res.Relaxed)
				}
			})
		}
	}
}

// lineOf is the number of the line of text holding "t":<one of ts>.
func lineOf(t *testing.T, text, ts string) int {
	t.Helper()
	for i, l := range strings.Split(text, "\n") {
		for _, s := range strings.Split(ts, "|") {
			if strings.Contains(l, `"t":`+s+`,`) {
				return i + 1
			}
		}
	}
	t.Fatalf("no line at t=%s", ts)
	return 0
}
