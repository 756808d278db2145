package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct{ t time.Time }

func (f *fakeClock) now() time.Time      { return f.t }
func (f *fakeClock) add(d time.Duration) { f.t = f.t.Add(d) }
func newFakeClock() *fakeClock           { return &fakeClock{t: time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)} }
func lines(s string) []string            { return strings.Split(strings.TrimRight(s, "\n"), "\n") }
func countLines(s, sub string) (n int) {
	for _, l := range lines(s) {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// TestProgressRateLimit: counts print at most once per interval, none
// before the phase has run an interval (a quick phase prints only its
// phase line), with thousands separators and a percentage; the final line
// has the time since the command started.
func TestProgressRateLimit(t *testing.T) {
	clk := newFakeClock()
	var b bytes.Buffer
	p := newProgressTo(&b, clk.now, time.Second)
	p.Phase("writing %s updates to bmv2 127.0.0.1:9559", commas(49163))
	for done := 0; done < 49163; done += 1000 {
		p.Count(done, 49163) // 50 batches over 5 s: one every 100 ms
		clk.add(100 * time.Millisecond)
	}
	p.Count(49163, 49163) // complete: the final line says it
	p.Done("bmv2 127.0.0.1:9559: %s writes in 50 batches", commas(49163))
	got := b.String()
	ls := lines(got)
	if ls[0] != "lbc: writing 49,163 updates to bmv2 127.0.0.1:9559 …" {
		t.Errorf("phase line %q", ls[0])
	}
	// 5 s at 100 ms a batch, the first count after 1 s: at 1, 2, 3, 4 s.
	if n := countLines(got, "/49,163 ("); n != 4 {
		t.Errorf("%d count lines in 5 s, want 4 (one a second, none in the first):\n%s", n, got)
	}
	if !strings.Contains(got, "lbc: writing 49,163 updates to bmv2 127.0.0.1:9559 … 10,000/49,163 (20%)\n") {
		t.Errorf("no count line at 1 s with separators and a percentage:\n%s", got)
	}
	if last := ls[len(ls)-1]; last != "lbc: bmv2 127.0.0.1:9559: 49,163 writes in 50 batches in 5s" {
		t.Errorf("final line %q", last)
	}

	// A quick phase: its line, no counts.
	b.Reset()
	p.Phase("writing 3 updates to x")
	p.Count(1, 3)
	clk.add(10 * time.Millisecond)
	p.Count(2, 3)
	if got := b.String(); got != "lbc: writing 3 updates to x …\n" {
		t.Errorf("a quick phase printed %q", got)
	}
}

// TestProgressQuiet: a quiet progress prints nothing, and a nil one is
// safe to call.
func TestProgressQuiet(t *testing.T) {
	clk := newFakeClock()
	p := newProgressTo(nil, clk.now, time.Second)
	p.Phase("x")
	clk.add(5 * time.Second)
	p.Count(1, 2)
	p.Note("y")
	p.Done("z")
	var np *progress
	np.Phase("x")
	np.Count(1, 2)
	np.Done("z")
}

func TestCommas(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 49163: "49,163", 1234567: "1,234,567", -65537: "-65,537"} {
		if got := commas(n); got != want {
			t.Errorf("commas(%d) = %q, want %q", n, got, want)
		}
	}
}
