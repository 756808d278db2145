package sim

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/tick"
	"github.com/lbc-dev/lbc/targets"
)

const drainConfig = `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: web
    vip: 203.0.113.80
    protocol: TCP
    ports: [80]
    ringSize: 64
    connectionDraining: {drainingTimeoutSec: 30}
    backends:
      - name: g
        endpoints: [{name: a, ip: 10.80.0.1}, {name: b, ip: 10.80.0.2}]
`

// drained returns a P4 datapath of options o whose flows all went to one
// backend that was then removed at 10 s (draining until 40 s), and a
// packet of each flow.
func drained(t *testing.T, o Options) (*Datapath, []targets.Packet, string) {
	t.Helper()
	dec, err := compiler.Load("drain.yaml", []byte(drainConfig))
	if err != nil {
		t.Fatal(err)
	}
	res, err := compiler.Compile(compiler.Input{Config: dec.Config})
	if err != nil {
		t.Fatal(err)
	}
	o.Fallback = true
	d := New(o)
	ctx := context.Background()
	if _, err := d.Apply(ctx, compiler.DiffIR(nil, res.IR)); err != nil {
		t.Fatal(err)
	}
	var flows []targets.Packet
	var on string
	for i := 0; len(flows) < 3 && i < 200; i++ {
		p := targets.Packet{Src: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), Dst: netip.MustParseAddr("203.0.113.80"), Proto: compiler.IPProtoTCP, SrcPort: 4000, DstPort: 80, Flags: targets.FlagSYN}
		v, err := d.Process(ctx, p, 0)
		if err != nil {
			t.Fatal(err)
		}
		if on == "" {
			on = v.Backend
		}
		if v.Backend == on {
			p.Flags = targets.FlagACK
			flows = append(flows, p)
		}
	}
	// Remove that backend at 10 s: it drains until 40 s (R-DRAIN).
	g0 := &dec.Config.Services[0].Backends[0]
	for i, e := range g0.Endpoints {
		if e.Name == on {
			g0.Endpoints = append(g0.Endpoints[:i], g0.Endpoints[i+1:]...)
			break
		}
	}
	res2, err := compiler.Compile(compiler.Input{Config: dec.Config, Prev: res.IR, Now: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Apply(ctx, compiler.DiffIR(res.IR, res2.IR)); err != nil {
		t.Fatal(err)
	}
	for _, b := range d.IR().Backends {
		if b.Name == on && (!b.Draining || b.Deadline != 40*time.Second) {
			t.Fatalf("backend %q: draining %v deadline %v, want draining until 40s", on, b.Draining, b.Deadline)
		}
	}
	return d, flows, on
}

// R-DRAIN, design decision 8, for each P4 geometry the live tests pair
// with a switch: the datapath enforces the deadline itself (no recompile
// here): a hit on the draining backend just before its deadline, a miss
// from the deadline on, each on its switch's clock: BMv2 in whole µs,
// Tofino in ticks of 65.536 µs (rounded up, so the deadline passes up to a
// tick late, never early), across the 48-bit wrap too.
func TestRDRAIN_DeadlineOnEachGeometry(t *testing.T) {
	const dl = 40 * time.Second
	tnaTick := func(origin uint64) time.Duration {
		// The first virtual time at which the TNA tick reaches the
		// deadline's tick, rounded up.
		g, _ := NewTNA(TNAGeometry{Ways: 4, WayBits: 8}, origin)
		want, _ := tick.TNADeadline(g.Timestamp(dl), 0)
		at := dl
		for g.Tick(at) != want {
			at += time.Microsecond
		}
		for g.Tick(at-1) == want {
			at--
		}
		return at
	}
	for _, tc := range []struct {
		name   string
		opts   func() Options
		passAt time.Duration // the first virtual time the deadline has passed
	}{
		{"exact", func() Options { return Options{} }, dl},
		{"v1model register, µs", func() Options {
			g, _ := NewRegister(1024, P4Ways)
			return Options{Conntrack: g, Tick: tick.BMv2}
		}, dl},
		{"TNA, origin on a tick", func() Options { g, _ := NewTNA(TNAGeometry{Ways: 4, WayBits: 8}, 0); return Options{Conntrack: g} }, tnaTick(0)},
		{"TNA, origin 100 ns into a tick", func() Options { g, _ := NewTNA(TNAGeometry{Ways: 4, WayBits: 8}, 100); return Options{Conntrack: g} }, tnaTick(100)},
		{"TNA, the tick wraps 5 s before the deadline", func() Options {
			g, _ := NewTNA(TNAGeometry{Ways: 4, WayBits: 8}, 1<<tick.TNATimestampBits-uint64(35*time.Second))
			return Options{Conntrack: g}
		}, tnaTick(1<<tick.TNATimestampBits - uint64(35*time.Second))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.passAt < dl || tc.passAt > dl+tick.TNA {
				t.Fatalf("deadline passes at %v: not within a tick after %v", tc.passAt, dl)
			}
			d, flows, on := drained(t, tc.opts())
			ctx := context.Background()
			for i, p := range flows {
				before, err := d.Process(ctx, p, tc.passAt-time.Nanosecond-time.Duration(i)*time.Millisecond)
				if err != nil || before.CT != targets.CTHit || before.Backend != on {
					t.Fatalf("flow %d just before the deadline: %v (%v), want a hit on %q (draining)", i, before, err, on)
				}
				after, det, err := d.ProcessDetail(p, tc.passAt+time.Duration(i)*time.Second)
				if err != nil || after.CT != targets.CTMiss || after.Backend == on || det.Invalid != "R-DRAIN" {
					t.Fatalf("flow %d at the deadline: %v (invalid %q, %v), want a miss away from %q by R-DRAIN", i, after, det.Invalid, err, on)
				}
				if !strings.Contains(stepsText(after), "deadline") {
					t.Errorf("explanation does not mention the deadline: %s", stepsText(after))
				}
			}
		})
	}
}

func stepsText(v targets.Verdict) string {
	var b strings.Builder
	for _, s := range v.Steps {
		b.WriteString(s.Rule + ": " + s.Detail + "\n")
	}
	return b.String()
}
