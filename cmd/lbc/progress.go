package main

import (
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/urfave/cli/v2"
)

// quietFlag silences the progress lines of long operations (push, status,
// replay --target bmv2).
var quietFlag = &cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print no progress lines on stderr (phases, write counts, timings); results and errors still print"}

// progress writes what a long operation is doing to stderr, one line at a
// time: phases as they start, counts at most once per interval (and only
// once the phase has run that long, so a quick one prints none), and a
// final line with the totals and the time. stdout carries the results
// alone, so that --format json and the like stay parseable. Library code
// does not print: it reports through callbacks (targets.Progress) that
// end here.
type progress struct {
	mu       sync.Mutex
	w        io.Writer // nil: quiet
	now      func() time.Time
	interval time.Duration
	start    time.Time // of the command
	phase    string    // what Count counts ("writing 49,163 updates to …")
	since    time.Time // start of the phase
	last     time.Time // last count line
}

// newProgress is the progress of command c: stderr, the wall clock, one
// count line a second; silent with --quiet.
func newProgress(c *cli.Context) *progress {
	var w io.Writer = c.App.ErrWriter
	if c.Bool(quietFlag.Name) {
		w = nil
	}
	return newProgressTo(w, time.Now, time.Second)
}

func newProgressTo(w io.Writer, now func() time.Time, interval time.Duration) *progress {
	return &progress{w: w, now: now, interval: interval, start: now()}
}

// Phase starts a phase and says so: "lbc: reading the tables of … …".
func (p *progress) Phase(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.begin(fmt.Sprintf(format, args...))
	if p.w != nil {
		fmt.Fprintf(p.w, "lbc: %s …\n", p.phase)
	}
}

// Label starts a phase without a line of its own: its counts, if it runs
// longer than an interval, say what it is (a replay's pushes, most of
// them quick).
func (p *progress) Label(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.begin(fmt.Sprintf(format, args...))
}

// begin makes phase the current one, its counts starting now (p.mu held).
func (p *progress) begin(phase string) {
	p.phase = phase
	p.since, p.last = p.now(), time.Time{}
}

// Note says something about the current phase: "lbc: <msg>".
func (p *progress) Note(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.w != nil {
		fmt.Fprintf(p.w, "lbc: %s\n", fmt.Sprintf(format, args...))
	}
}

// Count reports done of total in the current phase: a line at most once
// per interval, the first one interval after the phase started.
func (p *progress) Count(done, total int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.w == nil || done >= total {
		return
	}
	now := p.now()
	if now.Sub(p.since) < p.interval || (!p.last.IsZero() && now.Sub(p.last) < p.interval) {
		return
	}
	p.last = now
	pct := 0
	if total > 0 {
		pct = done * 100 / total
	}
	fmt.Fprintf(p.w, "lbc: %s … %s/%s (%d%%)\n", p.phase, commas(done), commas(total), pct)
}

// Done says a phase or the command ended: "lbc: <msg> in 1.2s" (the time
// since the command started).
func (p *progress) Done(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.w != nil {
		fmt.Fprintf(p.w, "lbc: %s in %s\n", fmt.Sprintf(format, args...), roundDuration(p.now().Sub(p.start)))
	}
}

// Elapsed is the time since the current phase started.
func (p *progress) Elapsed() time.Duration {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.now().Sub(p.since)
}

// roundDuration keeps three significant figures or so: 37.5s, 812ms.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}

// commas writes n with thousands separators: 49163 → "49,163".
func commas(n int) string {
	s := strconv.Itoa(n)
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	out := make([]byte, 0, len(s)+len(s)/3)
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
