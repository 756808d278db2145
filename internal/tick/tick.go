// Package tick is the clock arithmetic of the P4 programs: the units they
// keep time in, how an idle timeout and a deadline become values in those
// units, and how the programs compare them. The Tofino driver
// (targets/tofino), the BMv2 driver (targets/bmv2) and the reference model
// of both (targets/sim) use it, so that the model predicts the switches
// without either importing the other.
//
// Two clocks:
//   - v1model (BMv2): ingress_global_timestamp, 48-bit microseconds since
//     the switch started. lb.p4 compares deadlines as plain unsigned
//     numbers (2^48 µs is 8.9 years).
//   - TNA (Tofino): the 32-bit tick global_tstamp[47:16] of the 48-bit
//     nanosecond timestamp, 1 tick = 2^16 ns = 65.536 µs. It wraps with the
//     timestamp every 2^48 ns ≈ 78.2 h, so p4/tna/lb.p4 compares modulo
//     2^32: an age is (now − then) mod 2^32, and a deadline has passed
//     when (now − deadline) mod 2^32 < 2^31, which is right while the
//     deadline lies within ±2^31 ticks (≈ 39 h) of now.
//
// Rounding always goes up: an entry expires, or a deadline passes, at most
// one tick late, never early (spec R-AGE, design decision 8).
package tick

import (
	"fmt"
	"time"
)

// TNA is the length of one tick of the TNA program.
const TNA = time.Duration(1 << 16) // ns

// TNATimestampBits is the width of Tofino's global timestamp (ns).
const TNATimestampBits = 48

// BMv2 is the unit of BMv2's ingress_global_timestamp.
const BMv2 = time.Microsecond

// BMv2TimestampBits is the width of v1model's ingress_global_timestamp.
const BMv2TimestampBits = 48

// TNAWindow is how far a TNA deadline may lie from now, either way, and
// still compare right: 2^31 ticks.
const TNAWindow = time.Duration(1<<31) * TNA

// TNAIdleTicks is an idle timeout in ticks, as targets/tofino writes it to
// the idle_ticks table: TNAIdleTicksDuration(sec seconds).
func TNAIdleTicks(sec uint32) uint32 {
	return TNAIdleTicksDuration(time.Duration(sec) * time.Second)
}

// TNAIdleTicksDuration is ⌈(idle − 1 ns)/TNA⌉ + 1: the program stores an
// entry's expiry as the tick of its last packet plus this, and the entry is
// alive while the packet's tick is before it, that is while the age in
// whole ticks is below it. A flow idle for less than idle is at most
// ⌈(idle − 1 ns)/TNA⌉ ticks old, so never expired early; one idle longer
// expires at most one tick later (R-AGE; the rule fallback.IdleTicks
// applies to jiffies).
func TNAIdleTicksDuration(idle time.Duration) uint32 {
	if idle <= 0 {
		return 0
	}
	return uint32(ceilDiv(int64(idle-1), int64(TNA)) + 1)
}

// TNATick is the tick of a 48-bit nanosecond timestamp: bits 47..16.
func TNATick(ns uint64) uint32 {
	return uint32((ns % (1 << TNATimestampBits)) >> 16)
}

// TNADeadline is the deadline tick p4/tna/lb.p4 holds for a deadline
// remaining from a moment when the switch's 48-bit timestamp read nowNS:
// the tick of nowNS + remaining, rounded up (so never early), modulo 2^32.
// Zero means "no deadline" to the program, so a deadline that falls on
// tick 0 is written as tick 1 (one tick later, once in 2^32 ticks). A
// remaining time in the past is kept as it is (the program sees the
// deadline as passed); it must lie within TNAWindow.
func TNADeadline(nowNS uint64, remaining time.Duration) (uint32, error) {
	if remaining >= TNAWindow || remaining <= -TNAWindow {
		return 0, fmt.Errorf("deadline %s from now is beyond the ±%s the TNA program can compare (32-bit ticks of %s)", remaining, TNAWindow.Round(time.Hour), TNA)
	}
	const mod = int64(1) << TNATimestampBits
	ns := ((int64(nowNS%uint64(mod))+int64(remaining))%mod + mod) % mod
	t := uint32((uint64(ns) + uint64(TNA) - 1) >> 16) // the carry past 2^32 wraps to 0, as the timestamp does
	if t == 0 {
		t = 1
	}
	return t, nil
}

// TNAPassed reports whether deadline (a TNADeadline value; 0 = none) has
// passed at tick now, as p4/tna/lb.p4 decides it.
func TNAPassed(now, deadline uint32) bool {
	return deadline != 0 && int32(now-deadline) >= 0
}

// BMv2Deadline is the deadline lb.p4 holds for a deadline remaining from a
// moment when BMv2's ingress_global_timestamp read nowUS: nowUS plus
// remaining rounded up to a microsecond. Zero means "no deadline" to the
// program, so a deadline at or before the switch's start is written as 1
// (passed for every packet).
func BMv2Deadline(nowUS uint64, remaining time.Duration) (uint64, error) {
	us := int64(nowUS) + ceilDiv(int64(remaining), int64(BMv2))
	switch {
	case us >= 1<<BMv2TimestampBits:
		return 0, fmt.Errorf("deadline %s from now is beyond BMv2's 48-bit microsecond clock", remaining)
	case us < 1:
		us = 1
	}
	return uint64(us), nil
}

// BMv2Passed reports whether deadline (a BMv2Deadline value; 0 = none)
// has passed at timestamp now, as lb.p4 decides it.
func BMv2Passed(nowUS, deadline uint64) bool {
	return deadline != 0 && nowUS >= deadline
}

func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a > 0) == (b > 0) {
		q++
	}
	return q
}
