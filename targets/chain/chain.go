// Package chain composes a P4 switch and the datapath behind its fallback
// port (design decision 5) into one datapath, so that a replay judges the
// whole system: a packet the switch sends to the fallback port continues
// through the fallback datapath at the same time (one clock), and the
// fallback's verdict is the system's. `lbc replay --fallback-target` uses
// it.
//
// Conntrack lives in two places. The switch tracks the TCP and UDP flows
// it handles (5-tuple keys of services that track the 5-tuple), and looks
// them up, without creating or refreshing an entry, for the ICMP errors
// that quote them (targets/packet.go); the fallback tracks everything the
// switch sends it: fragments (3-tuple keys, R-FRAG), protocols the switch
// does not parse, and the whole of every session tracked without ports
// (2- and 3-tuple keys: lb.p4 sends such a session, and the ICMP errors
// about it, to the fallback so that one conntrack holds it). ICMP errors
// about flows of other protocols go to the fallback too, which holds
// those flows. The two key sets are disjoint, so the system agrees with a
// single reference datapath when, for every packet, the hop that decides
// it gives the reference's verdict, and every key's entry in the hop that
// holds it is the reference's entry for that key. One exception follows
// from what the switch cannot do: a packet too big for the switch to
// encapsulate (R-MTU) is sent to the fallback after the switch's
// conntrack step, so the fallback then holds its own entry for a switch
// key; that packet agrees on its action and MTU (an ICMP error that big,
// which the switch also sends on, is decided by the fallback's ring, not
// by its flow's entry on the switch).
package chain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// Datapath is a switch and its fallback as one targets.Target and
// targets.PacketTarget. Apply programs both with the same diff; they hold
// the same tables. It is as safe for concurrent use as its hops are.
type Datapath struct {
	sw, fb   targets.Target
	swp, fbp targets.PacketTarget
	hops     []Hop
}

// Hop is what one datapath of the chain did with a packet.
type Hop struct {
	Target  string
	Verdict targets.Verdict
}

var (
	_ targets.Target       = (*Datapath)(nil)
	_ targets.PacketTarget = (*Datapath)(nil)
)

// New chains sw (a P4 switch: its Fallback verdicts are forwarded) and fb
// (the datapath behind the fallback port).
func New(sw targets.Target, swp targets.PacketTarget, fb targets.Target, fbp targets.PacketTarget) *Datapath {
	return &Datapath{sw: sw, swp: swp, fb: fb, fbp: fbp}
}

// Name implements targets.Target.
func (d *Datapath) Name() string { return d.sw.Name() + " → " + d.fb.Name() }

// Read implements targets.Target: the tables both hops hold, which must be
// the same.
func (d *Datapath) Read(ctx context.Context) (*compiler.IR, error) {
	a, err := d.sw.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.sw.Name(), err)
	}
	b, err := d.fb.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.fb.Name(), err)
	}
	if df := compiler.DiffIR(b, a); !df.Empty() {
		return nil, fmt.Errorf("%s and %s hold different tables (%s); push to both first", d.sw.Name(), d.fb.Name(), strings.ReplaceAll(df.Summary(), "\n", "; "))
	}
	return a, nil
}

// Apply implements targets.Target: the switch first, then the fallback.
func (d *Datapath) Apply(ctx context.Context, df compiler.Diff) (targets.ApplyStats, error) {
	start := time.Now()
	a, err := d.sw.Apply(ctx, df)
	if err != nil {
		return a, fmt.Errorf("%s: %w", d.sw.Name(), err)
	}
	b, err := d.fb.Apply(ctx, df)
	if err != nil {
		return a, fmt.Errorf("%s: %w", d.fb.Name(), err)
	}
	out := targets.ApplyStats{Counts: df.Counts(), Writes: a.Writes + b.Writes, Batches: a.Batches + b.Batches, Bytes: a.Bytes + b.Bytes, Duration: time.Since(start)}
	return out, nil
}

type committer interface {
	Commit(ir *compiler.IR) error
}

// Commit hands the full IR to the hops that keep what a diff does not
// carry (names, tunnel sources, the MTU).
func (d *Datapath) Commit(ir *compiler.IR) error {
	for _, t := range []targets.Target{d.sw, d.fb} {
		if c, ok := t.(committer); ok {
			if err := c.Commit(ir); err != nil {
				return fmt.Errorf("%s: %w", t.Name(), err)
			}
		}
	}
	return nil
}

// Close implements targets.Target.
func (d *Datapath) Close() error {
	return errors.Join(d.sw.Close(), d.fb.Close())
}

// Process implements targets.PacketTarget: the switch decides, and a
// packet it sends to the fallback port is processed by the fallback at the
// same time. The verdict is the last hop's, with the steps of both.
func (d *Datapath) Process(ctx context.Context, pkt targets.Packet, now time.Duration) (targets.Verdict, error) {
	v, err := d.swp.Process(ctx, pkt, now)
	if err != nil {
		return v, fmt.Errorf("%s: %w", d.sw.Name(), err)
	}
	d.hops = append(d.hops[:0], Hop{Target: d.sw.Name(), Verdict: v})
	if v.Action != targets.Fallback {
		return v, nil
	}
	f, err := d.fbp.Process(ctx, pkt, now)
	if err != nil {
		return f, fmt.Errorf("%s: %w", d.fb.Name(), err)
	}
	d.hops = append(d.hops, Hop{Target: d.fb.Name(), Verdict: f})
	f.Steps = append(slices.Clone(v.Steps), f.Steps...)
	return f, nil
}

// Hops returns what each datapath did with the last packet.
func (d *Datapath) Hops() []Hop { return d.hops }

// Switch and Fallback return the hops' datapaths.
func (d *Datapath) Switch() targets.Target   { return d.sw }
func (d *Datapath) Fallback() targets.Target { return d.fb }
