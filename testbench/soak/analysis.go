package soak

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Sample is one reading of the lbc run process.
type Sample struct {
	T          time.Duration // since lbc run started
	RSS        float64       // bytes (/proc/PID/status VmRSS)
	Goroutines float64       // go_goroutines from its /metrics
	FDs        float64       // entries of /proc/PID/fd
	// HeapGoal is the Go collector's goal for the next collection
	// (go_memstats_next_gc_bytes): twice the heap live after the last
	// one (GOGC=100). Not judged: it tells a leak, which raises it for
	// good, from the collector's swings, which RSS shows too.
	HeapGoal float64
}

// Tolerance bounds the growth of one series from the second quarter of a
// run to the last: Limit(base) = base + max(Abs, Rel × base).
type Tolerance struct {
	Abs float64 // in the series' unit
	Rel float64 // fraction of the base (0.10: 10 %)
}

// Limit is the highest last-quarter median that passes for a
// second-quarter median of base.
func (t Tolerance) Limit(base float64) float64 {
	return base + math.Max(t.Abs, t.Rel*base)
}

// The soak's tolerances (docs/controller.md, "Soak"). The first quarter
// of a run is its warm-up (the first push, the heap reaching its working
// size, the HTTP connections of the scrapers); the second quarter's median
// is the base and the last quarter's median must stay within the limit.
// Medians ignore the short spikes of a push or of probes in flight.
//   - RSS: +16 MiB or +25 %, whichever is more. The Go heap swings between
//     collections (GOGC=100 lets it reach twice the live heap before one),
//     and the runtime returns freed pages lazily: a flat lbc run's RSS
//     wanders by ≈ 10 MiB from one second to the next under the soak's
//     churn (≈ 50 MiB while the counter reader read whole arrays).
//   - Goroutines: +5. The count at rest is a fixed set (loop, probers,
//     P4Runtime stream and heartbeat, HTTP server).
//   - Open files: +5: sockets of probes and scrapes in flight come and go
//     within a second.
//
// The medians are half a run apart: a 30-minute run catches an RSS leak
// of ≈ 5 KiB per probe or a goroutine per reload (+30); a 2-minute run
// only gross leaks (≈ 0.35 MiB/s, a goroutine per flap: +20).
var (
	RSSTolerance        = Tolerance{Abs: 16 << 20, Rel: 0.25}
	GoroutinesTolerance = Tolerance{Abs: 5}
	FDsTolerance        = Tolerance{Abs: 5}
)

// Verdict is the flatness decision for one series.
type Verdict struct {
	Name        string
	Base, Last  float64 // medians of the second and last quarters
	Limit       float64
	Min, Max    float64 // over the whole run
	Samples     int
	OK          bool
	Why         string // when !OK: what grew, or why no decision was possible
	Unit        string
	BaseQuarter [2]time.Duration // [from, to) of the second quarter
	LastQuarter [2]time.Duration // [from, to) of the last quarter
}

// MinSamplesPerQuarter: fewer samples in a quarter than this and the run
// was too short (or the sampler too starved) to tell.
const MinSamplesPerQuarter = 5

// Flat decides whether values (taken at times ts, ascending, over a run of
// length total) stayed flat: the median of the samples in the last
// quarter of the run, [3/4, 1), against that of the second, [1/4, 1/2).
func Flat(name, unit string, ts []time.Duration, values []float64, total time.Duration, tol Tolerance) Verdict {
	v := Verdict{Name: name, Unit: unit, Samples: len(values),
		BaseQuarter: [2]time.Duration{total / 4, total / 2},
		LastQuarter: [2]time.Duration{total * 3 / 4, total}}
	if len(ts) != len(values) {
		v.Why = fmt.Sprintf("%d times for %d values (a bug in the soak)", len(ts), len(values))
		return v
	}
	var base, last []float64
	for i, t := range ts {
		switch {
		case t >= v.BaseQuarter[0] && t < v.BaseQuarter[1]:
			base = append(base, values[i])
		case t >= v.LastQuarter[0] && t <= v.LastQuarter[1]:
			last = append(last, values[i])
		}
	}
	if len(values) > 0 {
		v.Min, v.Max = values[0], values[0]
		for _, x := range values {
			v.Min, v.Max = math.Min(v.Min, x), math.Max(v.Max, x)
		}
	}
	if len(base) < MinSamplesPerQuarter || len(last) < MinSamplesPerQuarter {
		v.Why = fmt.Sprintf("too few samples to decide (%d in the second quarter, %d in the last; need %d each): run longer", len(base), len(last), MinSamplesPerQuarter)
		return v
	}
	v.Base, v.Last = Median(base), Median(last)
	v.Limit = tol.Limit(v.Base)
	v.OK = v.Last <= v.Limit
	if !v.OK {
		v.Why = fmt.Sprintf("grew from %s to %s (limit %s)", Format(v.Base, unit), Format(v.Last, unit), Format(v.Limit, unit))
	}
	return v
}

// Median of xs (not modified); 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Format writes x in unit: "MiB" for bytes, else a whole number.
func Format(x float64, unit string) string {
	if unit == "MiB" {
		return fmt.Sprintf("%.1f MiB", x/(1<<20))
	}
	return fmt.Sprintf("%.0f", x)
}

// String is the verdict on one line.
func (v Verdict) String() string {
	mark := "ok  "
	if !v.OK {
		mark = "FAIL"
	}
	if v.Samples == 0 || v.Why != "" && v.Limit == 0 {
		return fmt.Sprintf("%s %-10s %s", mark, v.Name, v.Why)
	}
	s := fmt.Sprintf("%s %-10s median %s in [%s, %s) → %s in [%s, %s]; limit %s; range %s..%s over %d samples",
		mark, v.Name, Format(v.Base, v.Unit), secs(v.BaseQuarter[0]), secs(v.BaseQuarter[1]),
		Format(v.Last, v.Unit), secs(v.LastQuarter[0]), secs(v.LastQuarter[1]),
		Format(v.Limit, v.Unit), Format(v.Min, v.Unit), Format(v.Max, v.Unit), v.Samples)
	if !v.OK {
		s += ": " + v.Why
	}
	return s
}

func secs(d time.Duration) string { return fmt.Sprintf("%.0f s", d.Seconds()) }

// LogRule is an expected log line: its level and message, and, when Attr
// is set, the attribute whose value must be one of Values. A rule with
// Plain set expects a line that is not slog's (lbc's own messages on
// stderr) containing Msg.
type LogRule struct {
	Plain      bool
	Level, Msg string
	Attr       string
	Values     []string
	Why        string // why the soak causes it
}

// ExpectedLog are the lines that the soak causes on purpose: lbc's note
// that it pushed its embedded pipeline to the empty switch at start, and
// the WARN lines of the flapping backends' failed probes and their
// becoming unhealthy. Every
// other WARN or ERROR line (a failed push, a lost session, a rejected
// reload, a failover the soak does not cause …) fails the soak.
func ExpectedLog(flapping []string) []LogRule {
	return []LogRule{
		{Plain: true, Msg: "pushed pipeline embedded p4/build", Why: "lbc run's start on an empty switch (the soak's P4Runtime server starts with no pipeline)"},
		{Level: "WARN", Msg: "health probe failed", Attr: "backend", Values: flapping, Why: "the soak's flapping backends answer 503 half of the time"},
		{Level: "WARN", Msg: "backend became unhealthy", Attr: "backend", Values: flapping, Why: "the same, after the unhealthy threshold (1)"},
	}
}

// LogLine is one line of lbc run's log, as slog's text handler writes it.
type LogLine struct {
	N     int // 1-based line number
	Text  string
	Level string
	Msg   string
	Attrs map[string]string
}

// ParseLogLine reads a slog text line (key=value, values quoted when they
// hold spaces). ok is false for a line that is not one (a panic's trace,
// something printed directly).
func ParseLogLine(s string) (l LogLine, ok bool) {
	l = LogLine{Text: s, Attrs: map[string]string{}}
	for i := 0; i < len(s); {
		for i < len(s) && s[i] == ' ' {
			i++
		}
		if i == len(s) {
			break
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq <= 0 || strings.ContainsAny(s[i:i+eq], " \"") {
			return l, false
		}
		key := s[i : i+eq]
		i += eq + 1
		var val string
		if i < len(s) && s[i] == '"' {
			j := i + 1
			var b strings.Builder
			for ; j < len(s) && s[j] != '"'; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				b.WriteByte(s[j])
			}
			if j == len(s) {
				return l, false
			}
			val, i = b.String(), j+1
		} else {
			j := strings.IndexByte(s[i:], ' ')
			if j < 0 {
				j = len(s) - i
			}
			val, i = s[i:i+j], i+j
		}
		l.Attrs[key] = val
	}
	l.Level, l.Msg = l.Attrs["level"], l.Attrs["msg"]
	delete(l.Attrs, "level")
	delete(l.Attrs, "msg")
	return l, l.Level != "" && l.Attrs["time"] != ""
}

// LogReport counts the log's lines by class.
type LogReport struct {
	Lines      int
	ByLevel    map[string]int
	Expected   map[string]int // by rule message
	Unexpected []LogLine      // WARN, ERROR, or not a log line at all
}

// ClassifyLog sorts lbc run's log lines: INFO and DEBUG pass; a WARN or
// ERROR line passes only when a rule expects it; a line that is not slog's
// (a panic, a fatal error, anything printed directly) is unexpected.
func ClassifyLog(lines []string, rules []LogRule) LogReport {
	r := LogReport{ByLevel: map[string]int{}, Expected: map[string]int{}}
	for i, s := range lines {
		if strings.TrimSpace(s) == "" {
			continue
		}
		r.Lines++
		l, ok := ParseLogLine(s)
		l.N = i + 1
		if !ok {
			if rule, ok := matchPlain(s, rules); ok {
				r.Expected[rule.Msg]++
			} else {
				r.Unexpected = append(r.Unexpected, l)
			}
			continue
		}
		r.ByLevel[l.Level]++
		if l.Level != "WARN" && l.Level != "ERROR" {
			continue
		}
		if rule, ok := match(l, rules); ok {
			r.Expected[rule.Msg]++
			continue
		}
		r.Unexpected = append(r.Unexpected, l)
	}
	return r
}

func matchPlain(s string, rules []LogRule) (LogRule, bool) {
	for _, r := range rules {
		if r.Plain && strings.Contains(s, r.Msg) {
			return r, true
		}
	}
	return LogRule{}, false
}

func match(l LogLine, rules []LogRule) (LogRule, bool) {
	for _, r := range rules {
		if r.Plain || l.Level != r.Level || l.Msg != r.Msg {
			continue
		}
		if r.Attr == "" {
			return r, true
		}
		for _, v := range r.Values {
			if l.Attrs[r.Attr] == v {
				return r, true
			}
		}
	}
	return LogRule{}, false
}
