package sim

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/examples"
	"github.com/lbc-dev/lbc/internal/tick"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/trace"
)

// drainingDatapath programs the failover example (drainingTimeoutSec 30)
// onto d, then removes the backend that a flow from 198.51.100.7:4242 was
// created on, at compile time removedAt: the flow's backend drains until
// removedAt+30 s. No compile happens after that: only the datapath's
// clock can end the drain (design decision 8).
func drainingDatapath(t *testing.T, d *Datapath, removedAt time.Duration, now func() time.Duration) (backend string, deadline time.Duration) {
	t.Helper()
	ctx := context.Background()
	dec, err := compiler.Load("failover.yaml", examples.Default())
	if err != nil {
		t.Fatal(err)
	}
	cfg := dec.Config
	first, err := compiler.Compile(compiler.Input{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Apply(ctx, compiler.DiffIR(nil, first.IR)); err != nil {
		t.Fatal(err)
	}
	v, _ := d.Process(ctx, tcp("198.51.100.7", 4242, targets.FlagSYN), now())
	if v.Action != targets.Forward {
		t.Fatalf("SYN: %v", v)
	}
	g := &cfg.Services[0].Backends
	for gi := range *g {
		eps := (*g)[gi].Endpoints
		for ei := range eps {
			if eps[ei].Name == v.Backend {
				(*g)[gi].Endpoints = append(eps[:ei:ei], eps[ei+1:]...)
			}
		}
	}
	second, err := compiler.Compile(compiler.Input{Config: cfg, Prev: first.IR, Now: removedAt})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Apply(ctx, compiler.DiffIR(first.IR, second.IR)); err != nil {
		t.Fatal(err)
	}
	b := second.IR.Backend(v.BackendID)
	if b == nil || !b.Draining || b.Deadline != removedAt+30*time.Second {
		t.Fatalf("draining row %+v", b)
	}
	return v.Backend, b.Deadline
}

// TestRDRAIN_DatapathEnforcesDeadline: with the compile clock and the
// datapath's clock one (replay), the draining backend keeps its flow until
// the deadline and loses it exactly at it, although its row is still
// held: a hit at or past the deadline is a miss, citing R-DRAIN.
func TestRDRAIN_DatapathEnforcesDeadline(t *testing.T) {
	d := New(Options{})
	b, dl := drainingDatapath(t, d, 10*time.Second, func() time.Duration { return 0 })
	ctx := context.Background()
	ack := tcp("198.51.100.7", 4242, targets.FlagACK)
	v, det, _ := d.ProcessDetail(ack, dl-time.Nanosecond)
	if v.CT != targets.CTHit || v.Backend != b || det.DeadlineRule != compiler.RuleDrain || det.Deadline != dl.Seconds() {
		t.Fatalf("just before the deadline: %v %+v", v, det)
	}
	v, det, _ = d.ProcessDetail(ack, dl)
	if v.CT != targets.CTMiss || v.Backend == b || det.Invalid != compiler.RuleDrain {
		t.Fatalf("at the deadline: %v, invalid by %q; want a miss re-selected away from %s", v, det.Invalid, b)
	}
	if d.IR().Backend(v.BackendID) == nil || d.IR().Backend(d.IR().Backends[0].ID) == nil {
		t.Fatal("rows lost")
	}
	// The re-selected entry is an ordinary one.
	if v2, _ := d.Process(ctx, ack, dl+time.Second); v2.CT != targets.CTHit || v2.BackendID != v.BackendID {
		t.Fatalf("after re-selection: %v", v2)
	}
}

// TestRDRAIN_DeadlineClockMapping: the controller's compile clock (Unix
// time) and the datapath's own (here: seconds since it started) differ;
// the deadline is mapped when the row is written, as own now + (deadline −
// compile now), and expires on the datapath's clock.
func TestRDRAIN_DeadlineClockMapping(t *testing.T) {
	unix := time.Duration(1_800_000_000) * time.Second // compile clock at the removal
	var own time.Duration = 5 * time.Second            // datapath clock at the removal
	d := New(Options{Clock: func() time.Duration { return unix }, Now: func() time.Duration { return own }})
	b, dl := drainingDatapath(t, d, unix, func() time.Duration { return own })
	if dl != unix+30*time.Second {
		t.Fatalf("deadline %v", dl)
	}
	// Later writes (a recompile that leaves the row as it is) keep the
	// mapping made when the deadline was written.
	own, unix = 20*time.Second, unix+15*time.Second
	if err := d.Commit(d.IR()); err != nil {
		t.Fatal(err)
	}
	ack := tcp("198.51.100.7", 4242, targets.FlagACK)
	if v, _ := d.Process(context.Background(), ack, 35*time.Second-time.Nanosecond); v.CT != targets.CTHit || v.Backend != b {
		t.Fatalf("before own deadline 35 s: %v", v)
	}
	if v, _ := d.Process(context.Background(), ack, 35*time.Second); v.CT != targets.CTMiss {
		t.Fatalf("at own deadline 35 s: %v", v)
	}
}

// TestRDRAIN_DeadlineTick: a datapath that compares deadlines in ticks
// (XDP: jiffies; TNA: 2^16 ns) expires an entry at the first whole tick at
// or after the deadline: late by less than a tick, never early.
func TestRDRAIN_DeadlineTick(t *testing.T) {
	const tick = 4 * time.Millisecond // a jiffy at HZ=250
	removed := 10*time.Second + 1500*time.Microsecond
	b, dl := drainingDatapath(t, New(Options{Tick: tick}), removed, func() time.Duration { return 0 })
	expiry := (dl + tick - 1) / tick * tick // 40.004 s
	ack := tcp("198.51.100.7", 4242, targets.FlagACK)
	for _, tc := range []struct {
		at  time.Duration
		hit bool
	}{{dl, true}, {expiry - time.Nanosecond, true}, {expiry, false}} {
		// Each probe on a fresh copy: a miss re-creates the entry.
		d2 := New(Options{Tick: tick})
		drainingDatapath(t, d2, removed, func() time.Duration { return 0 })
		v, _ := d2.Process(context.Background(), ack, tc.at)
		if got := v.CT == targets.CTHit && v.Backend == b; got != tc.hit {
			t.Errorf("at %v (deadline %v, tick %v): %v, want hit %v", tc.at, dl, tick, v, tc.hit)
		}
	}
}

// TestRDRAIN_TNADeadlineTicks: the TNA geometry holds a deadline as the
// 32-bit tick it falls in, rounded up, and compares across the wrap of
// the 48-bit timestamp.
func TestRDRAIN_TNADeadlineTicks(t *testing.T) {
	for _, origin := range []uint64{0, wrapNS - uint64(20*time.Second)} {
		t.Run(fmt.Sprintf("origin=%d", origin), func(t *testing.T) {
			g, err := NewTNA(TNAGeometry{Ways: 4, WayBits: 8}, origin)
			if err != nil {
				t.Fatal(err)
			}
			dl := 30*time.Second + 123*time.Nanosecond
			// The first tick boundary at or after the deadline, on the
			// switch's clock.
			abs := (origin + uint64(dl)) % wrapNS
			first := time.Duration((abs+uint64(tick.TNA)-1)/uint64(tick.TNA)*uint64(tick.TNA)) - time.Duration(abs) + dl
			for _, tc := range []struct {
				now  time.Duration
				want bool
			}{{0, false}, {dl - time.Nanosecond, false}, {first - time.Nanosecond, false}, {first, true}, {first + time.Hour, true}} {
				if got := g.DeadlineExpired(dl, tc.now); got != tc.want {
					t.Errorf("deadline %v, now %v: expired %v, want %v (first tick at %v)", dl, tc.now, got, tc.want, first)
				}
			}
		})
	}
}

// TestRAGE_Tick: on a datapath that keeps time in ticks (XDP: jiffies of
// 4 ms at HZ=250) an idle entry expires at the first whole tick after
// which at least idleTimeoutSec has surely passed: never early, at most a
// tick late. Last seen at 1 ms (tick 0) with a 60 s timeout: alive at
// 60.0039 s, expired at 60.004 s (tick 15001).
func TestRAGE_Tick(t *testing.T) {
	const tick = 4 * time.Millisecond
	for _, tc := range []struct {
		at  time.Duration
		hit bool
	}{{60*time.Second + time.Millisecond, true}, {60*time.Second + 3999*time.Microsecond, true}, {60*time.Second + 4*time.Millisecond, false}} {
		d := New(Options{Tick: tick})
		dec, err := compiler.Load("failover.yaml", examples.Default())
		if err != nil {
			t.Fatal(err)
		}
		res, err := compiler.Compile(compiler.Input{Config: dec.Config})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Apply(context.Background(), compiler.DiffIR(nil, res.IR)); err != nil {
			t.Fatal(err)
		}
		d.Process(context.Background(), tcp("198.51.100.7", 4242, targets.FlagSYN), time.Millisecond)
		v, _ := d.Process(context.Background(), tcp("198.51.100.7", 4242, targets.FlagACK), tc.at)
		if got := v.CT == targets.CTHit; got != tc.hit {
			t.Errorf("last seen 1 ms, now %v: %v, want hit %v", tc.at, v, tc.hit)
		}
	}
}

// TestRAGE_TickPerDatapath runs the spec trace r-age-tick.jsonl, whose
// expectations hold on every datapath, with the model's geometry and tick
// of each: exact (sim, XDP's test build, BMv2 at µs), XDP's jiffies at
// HZ=250 and HZ=100, and TNA's 2^16 ns ticks.
func TestRAGE_TickPerDatapath(t *testing.T) {
	tna := func() Options {
		g, err := NewTNA(TNAGeometry{Ways: 4, WayBits: 10}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return Options{Conntrack: g}
	}
	for name, opts := range map[string]func() Options{
		"exact":        func() Options { return Options{} },
		"bmv2-µs":      func() Options { return Options{Tick: time.Microsecond} },
		"xdp-HZ250":    func() Options { return Options{Tick: 4 * time.Millisecond} },
		"xdp-HZ100":    func() Options { return Options{Tick: 10 * time.Millisecond} },
		"tna-65.536µs": tna,
	} {
		t.Run(name, func(t *testing.T) {
			runSpecTrace(t, "../../testbench/testdata/r-age-tick.jsonl", New(opts()))
		})
	}
}

// runSpecTrace replays a spec trace on d and fails on every unmet
// expectation.
func runSpecTrace(t *testing.T, file string, d *Datapath) {
	t.Helper()
	sp, err := trace.LoadSpec(file)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rp, err := trace.NewReplayer(ctx, sp.Config, sp.State, d, d)
	if err != nil {
		t.Fatal(err)
	}
	rp.PushOnly = sp.PushOnly
	for _, l := range sp.Lines {
		outs, err := rp.Step(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range outs {
			if o.Mismatch != "" {
				t.Errorf("%s:%d: %s", file, o.Line, o.Mismatch)
			}
		}
	}
	if s := rp.Summary(); s.Expected == 0 {
		t.Fatalf("%s: no expectation checked", file)
	}
}
