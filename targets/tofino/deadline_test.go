package tofino

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/internal/tick"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/testbench/p4rt"
)

// R-DRAIN, design decision 8, on Tofino: a draining backend's deadline is
// written as a tick of the switch's clock, mapped with a clock probe that
// p4/tna/lb.p4 answers with its 48-bit global timestamp (ns). The test
// switch's timestamp sits 10 s before its 48-bit wrap at the compile
// clock's origin, so the deadline (40 s) falls past the wrap.
func TestRDRAIN_TNADeadlineTicks(t *testing.T) {
	b := newBench(t, program{name: "tna", p4info: tnaP4Info}, p4rt.Options{})
	var mu sync.Mutex
	var now time.Duration
	clock := func() time.Duration { mu.Lock(); defer mu.Unlock(); return now }
	const origin = uint64(1)<<tick.TNATimestampBits - uint64(10*time.Second) + 12345
	b.srv.SetSwitchClock(func() uint64 { return (origin + uint64(clock())) % (1 << tick.TNATimestampBits) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tg, err := Open(ctx, Options{Options: runtime.Options{Addr: b.srv.Addr(), DeviceID: 1, ElectionLow: 1, BatchSize: 64}, P4InfoPath: tnaP4Info, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	push(t, tg, load(t, testConfig), nil, 0)

	mu.Lock()
	now = 10 * time.Second
	mu.Unlock()
	cfg := load(t, strings.Replace(testConfig, "          - {name: vm-a2, ip: 10.0.1.2}\n", "", 1))
	push(t, tg, cfg, nil, 10)
	if b.srv.Probes() == 0 {
		t.Fatal("no clock probe before writing a deadline")
	}
	// The switch read origin + 10 s; the deadline lies 30 s further.
	want, err := tick.TNADeadline(origin+uint64(10*time.Second), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want > 1<<31 {
		t.Fatalf("deadline tick %#x: the test meant it to fall past the wrap", want)
	}
	got := uint64(0)
	held, err := tg.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var id uint32
	for _, bk := range held.Backends {
		if bk.Name == "vm-a2" {
			id = bk.ID
			if bk.Deadline != 40*time.Second {
				t.Fatalf("vm-a2 reads back with deadline %v, want 40s (the compile clock's)", bk.Deadline)
			}
		}
	}
	b.srv.Snapshot(func(v p4rt.View) {
		for _, e := range v.Entries("backend") {
			d, err := v.Schema().Decode(e)
			if err != nil {
				t.Fatal(err)
			}
			if uint32(d.Uint("backend_id")) == id {
				got = d.Uint("deadline")
			}
		}
	})
	if got != uint64(want) {
		t.Fatalf("vm-a2's deadline on the switch: tick %#x, want %#x", got, want)
	}
	// The model of the TNA geometry, at the same origin, passes the same
	// deadline at the same tick.
	if !tick.TNAPassed(tick.TNATick(origin+uint64(40*time.Second)+uint64(tick.TNA)), uint32(got)) ||
		tick.TNAPassed(tick.TNATick(origin+uint64(40*time.Second)-uint64(tick.TNA)), uint32(got)) {
		t.Fatal("the written tick does not pass within a tick of 40 s on the switch's clock")
	}
}

// R-PERSIST-CAP on Tofino: a deadline that passed longer ago than the
// program's ±39 h window (a backend unhealthy for days) is written as
// passed a tick ago, not refused (every push would fail) nor wrapped into
// the future; one further ahead than the window is refused.
func TestRPERSISTCAP_TNADeadlineLongPassed(t *testing.T) {
	const now = uint64(5) << 40 // ns, anywhere on the 48-bit clock
	for _, remaining := range []time.Duration{-tick.TNAWindow, -3 * tick.TNAWindow, -tick.TNAWindow + tick.TNA} {
		v, err := Deadline(now, remaining)
		if err != nil {
			t.Fatalf("Deadline(now, %v): %v", remaining, err)
		}
		if !tick.TNAPassed(tick.TNATick(now), uint32(v)) {
			t.Fatalf("Deadline(now, %v) = tick %#x: not passed at now (tick %#x)", remaining, v, tick.TNATick(now))
		}
	}
	if v, err := Deadline(now, -time.Hour); err != nil || v != uint64(tick.TNATick(now-uint64(time.Hour)))+1 && v != uint64(tick.TNATick(now-uint64(time.Hour))) {
		t.Fatalf("Deadline(now, -1h) = %#x, %v: want the tick of an hour ago, rounded up", v, err)
	}
	if _, err := Deadline(now, tick.TNAWindow); err == nil {
		t.Fatal("a deadline 39 h ahead was accepted")
	}
}
