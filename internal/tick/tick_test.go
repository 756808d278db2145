package tick

import (
	"testing"
	"time"
)

// R-AGE: 60 s is 915527.3 ticks. An entry whose last packet came at the
// end of a tick is 915528 ticks old 59.99994 s later, so the limit is one
// more, 915529: never early, at most one tick late.
func TestRAGE_TNAIdleTicks(t *testing.T) {
	for _, tc := range []struct {
		sec  uint32
		want uint32
	}{
		{0, 0},
		{1, 15260}, // 15258.79 → 15259, + 1
		{60, 915529},
		{86400, 1318359376}, // a day still fits the signed window
	} {
		if got := TNAIdleTicks(tc.sec); got != tc.want {
			t.Errorf("TNAIdleTicks(%d) = %d, want %d", tc.sec, got, tc.want)
		}
	}
	// Never early, at most one tick late: a flow whose last packet came at
	// ns s is alive at n exactly while ticks(n) − ticks(s) < limit; over
	// every offset of s in its tick, it is alive at every n < s + idle and
	// dead at n ≥ s + idle + 2 ticks (one tick after the timeout rounded
	// up to whole ticks).
	for _, idle := range []time.Duration{time.Second, 60 * time.Second, 3*TNA + 1, 5 * TNA} {
		limit := int64(TNAIdleTicksDuration(idle))
		for s := int64(0); s < int64(TNA); s += int64(TNA) / 16 {
			ticks := func(n int64) int64 { return n/int64(TNA) - s/int64(TNA) }
			if late := s + int64(idle) - 1; ticks(late) >= limit {
				t.Errorf("idle %v, last packet at %d ns: expired at %d ns, before the timeout", idle, s, late)
			}
			if dead := s + ceilDiv(int64(idle), int64(TNA))*int64(TNA) + 2*int64(TNA); ticks(dead) < limit {
				t.Errorf("idle %v, last packet at %d ns: alive at %d ns, more than a tick late", idle, s, dead)
			}
		}
	}
}

// Design decision 8: a deadline is rounded up to the tick, never down; it
// wraps with the 48-bit timestamp; 0 is reserved for "none".
func TestRDRAIN_TNADeadline(t *testing.T) {
	const wrap = uint64(1) << TNATimestampBits
	for _, tc := range []struct {
		name      string
		now       uint64
		remaining time.Duration
		want      uint32
	}{
		{"on a tick", 0, 2 * TNA, 2},
		{"one ns past a tick rounds up", 0, 2*TNA + 1, 3},
		{"from a time inside a tick", 100, 2 * TNA, 3}, // 131172 ns → tick 2.0015 → 3
		{"passed already", 10 * uint64(TNA), -3 * TNA, 7},
		{"across the 48-bit wrap", wrap - uint64(TNA), 3 * TNA, 2},
		{"exactly at the wrap is tick 0: written as 1", wrap - uint64(TNA), TNA, 1},
		{"just before the wrap rounds up into it", wrap - uint64(TNA), 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := TNADeadline(tc.now, tc.remaining)
			if err != nil || got != tc.want {
				t.Fatalf("TNADeadline(%d, %v) = %d, %v; want %d", tc.now, tc.remaining, got, err, tc.want)
			}
		})
	}
	if _, err := TNADeadline(0, TNAWindow); err == nil {
		t.Fatal("a deadline 39 h away was accepted: the program would take it for passed")
	}
	if _, err := TNADeadline(0, -TNAWindow); err == nil {
		t.Fatal("a deadline 39 h ago was accepted: the program would take it for pending")
	}
}

func TestRDRAIN_TNAPassed(t *testing.T) {
	for _, tc := range []struct {
		now, deadline uint32
		want          bool
	}{
		{5, 0, false}, // no deadline
		{4, 5, false},
		{5, 5, true}, // at the deadline: passed (now >= deadline)
		{6, 5, true},
		{2, 0xffff_fffe, true},  // the tick wrapped after the deadline: 4 ticks past
		{0xffff_fffe, 2, false}, // the deadline lies 4 ticks past the wrap
		{0x8000_0004, 5, true},  // 2^31 − 1 ticks past: the last tick of the window
		{0x8000_0005, 5, false}, // 2^31 ticks past: outside the window, looks pending
		{0x8000_0006, 5, false},
	} {
		if got := TNAPassed(tc.now, tc.deadline); got != tc.want {
			t.Errorf("TNAPassed(now %#x, deadline %#x) = %v, want %v", tc.now, tc.deadline, got, tc.want)
		}
	}
}

func TestRDRAIN_BMv2Deadline(t *testing.T) {
	for _, tc := range []struct {
		now       uint64
		remaining time.Duration
		want      uint64
	}{
		{1000, time.Second, 1_001_000},
		{1000, time.Second + 1, 1_001_001}, // rounded up to the µs
		{1000, -time.Microsecond, 999},     // passed: kept in the past
		{1000, -time.Hour, 1},              // before the switch started: 1, never 0 ("none")
		{0, 0, 1},
	} {
		got, err := BMv2Deadline(tc.now, tc.remaining)
		if err != nil || got != tc.want {
			t.Errorf("BMv2Deadline(%d, %v) = %d, %v; want %d", tc.now, tc.remaining, got, err, tc.want)
		}
	}
	if _, err := BMv2Deadline(1<<BMv2TimestampBits-10, time.Second); err == nil {
		t.Error("a deadline past the 48-bit clock was accepted")
	}
	if BMv2Passed(5, 0) || BMv2Passed(4, 5) || !BMv2Passed(5, 5) {
		t.Error("BMv2Passed: 0 is none, and a deadline passes at its own microsecond")
	}
}
