package fallback

import (
	"bufio"
	"compress/gzip"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRAGE_IdleTicksNeverEarlyAtMostOneTickLate: with jiffies counted on a
// grid of tick T (any phase), an entry last seen at s and looked up at n
// is valid exactly while ticks(n) − ticks(s) < IdleTicks(idle, T). Over
// random times and phases, it must be valid whenever n − s < idle (never
// early) and invalid whenever n − s ≥ idle' + T, idle' being idle rounded
// up to whole ticks (at most a tick late where a tick divides the timeout,
// as 4 ms divides a second); with T = 1 ns the boundary is exact.
func TestRAGE_IdleTicksNeverEarlyAtMostOneTickLate(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, tick := range []time.Duration{time.Nanosecond, time.Millisecond, 4 * time.Millisecond, 3333333, 10 * time.Millisecond, 41666667} {
		for _, idle := range []time.Duration{time.Second, 10 * time.Second, 60 * time.Second, 7*time.Second + 3} {
			limit := IdleTicks(idle, tick)
			late := time.Duration(ceilDiv(int64(idle), int64(tick)))*tick + tick // idle' + T
			phase := rnd.Int64N(int64(tick))
			ticks := func(at int64) int64 { return floorDiv(at-phase, int64(tick)) }
			for i := 0; i < 20000; i++ {
				s := rnd.Int64N(int64(time.Hour))
				d := int64(idle) - 2*int64(tick) + rnd.Int64N(4*int64(tick)+2)
				if i%7 == 0 {
					d = int64(idle) + rnd.Int64N(3) - 1 // around the boundary to the ns
				}
				valid := uint64(ticks(s+d)-ticks(s)) < limit
				if d < int64(idle) && !valid {
					t.Fatalf("tick %v idle %v: invalid after %v of silence (early)", tick, idle, time.Duration(d))
				}
				if d >= int64(late) && valid {
					t.Fatalf("tick %v idle %v: still valid after %v of silence (more than a tick late)", tick, idle, time.Duration(d))
				}
				if tick == time.Nanosecond && valid != (d < int64(idle)) {
					t.Fatalf("1 ns tick, idle %v: valid=%v after %v, want the exact boundary", idle, valid, time.Duration(d))
				}
			}
		}
	}
	if IdleTicks(0, time.Millisecond) != 0 {
		t.Fatal("idle 0 must never be valid")
	}
}

// TestDeadlineTicksNeverEarly: a deadline expires at the first tick that
// begins at or after it, never before it and less than a tick after.
func TestDeadlineTicksNeverEarly(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	for _, tick := range []time.Duration{time.Nanosecond, 4 * time.Millisecond, 3333333} {
		c := tickClock{tick: tick, base: -rnd.Int64N(1 << 50)}
		for i := 0; i < 20000; i++ {
			dl := rnd.Int64N(1 << 40)
			d := c.ticksAt(dl)
			begins := c.base + int64(d)*int64(tick) // when tick d begins
			if begins < dl || begins >= dl+int64(tick) {
				t.Fatalf("tick %v: deadline %d → tick %d beginning at %d", tick, dl, d, begins)
			}
			if c.ticksOf(dl-1) >= d || c.ticksOf(begins) < d {
				t.Fatalf("tick %v: deadline %d: expired early or not at its tick", tick, dl)
			}
		}
	}
}

// TestMeasureClockHZ: the loader's measured tick matches the kernel's
// CONFIG_HZ (from /proc/config.gz, where the kernel exposes it), and the
// base it derives never puts a tick's start after the moment jiffies
// showed that tick.
func TestMeasureClockHZ(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF programs (CI runs as root)")
	}
	c, err := measureClock(100 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if hz, ok := configHZ(t); ok {
		want := time.Duration((int64(time.Second) + int64(hz)/2) / int64(hz))
		if c.tick != want {
			t.Fatalf("measured tick %v, CONFIG_HZ=%d says %v", c.tick, hz, want)
		}
	} else {
		t.Logf("no kernel config to compare with; measured tick %v", c.tick)
	}
	p, err := jiffiesProbe()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	buf := make([]byte, 64)
	for i := 0; i < 2000; i++ {
		s, err := sample(p, buf)
		if err != nil {
			t.Fatal(err)
		}
		// The tick jiffies show began by the time they show it.
		if begins := c.base + int64(s.jiffies)*int64(c.tick); begins > s.mono {
			t.Fatalf("jiffies %d at %d: the derived base puts its start at %d, later", s.jiffies, s.mono, begins)
		}
		// And jiffies are at most a tick (plus the interrupt's latency) behind.
		if lag := c.ticksOf(s.mono) - s.jiffies; lag > 1 {
			t.Fatalf("jiffies %d at %d lag the derived grid by %d ticks", s.jiffies, s.mono, lag)
		}
	}
}

func configHZ(t *testing.T) (int, bool) {
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(z)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CONFIG_HZ="); ok {
			hz, err := strconv.Atoi(v)
			return hz, err == nil
		}
	}
	return 0, false
}
