// Package chaintest compares a composed system, the switch model with a
// fallback datapath behind its fallback port (package chain), with the
// plain reference, packet by packet, as package chain defines agreement.
// The tests of package chain (the fallback's model behind the switch) and
// of targets/xdp (the XDP program behind it) both use it.
package chaintest

import (
	"context"
	"fmt"
	"slices"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/bmv2/live"
	"github.com/lbc-dev/lbc/targets/chain"
	"github.com/lbc-dev/lbc/targets/sim"
	"github.com/lbc-dev/lbc/trace"
)

// System is the switch model (lb.p4's register geometry, fallback
// semantics) with a fallback datapath behind it, the two chained, and the
// plain reference: one datapath with the switch's geometry (a register of
// its own) that handles every packet itself.
type System struct {
	Switch, Plain *sim.Datapath
	Chain         *chain.Datapath
}

// New builds the system around the fallback datapath fb (fbp runs its
// packets; usually the same value).
func New(fb targets.Target, fbp targets.PacketTarget) (*System, error) {
	o, err := live.SimOptions(nil)
	if err != nil {
		return nil, fmt.Errorf("the switch model's geometry: %w", err)
	}
	o.Name = "sim-p4"
	po, err := live.SimOptions(nil) // a geometry of its own
	if err != nil {
		return nil, fmt.Errorf("the reference's geometry: %w", err)
	}
	po.Fallback = false
	s := &System{Switch: sim.New(o), Plain: sim.New(po)}
	s.Chain = chain.New(s.Switch, s.Switch, fb, fbp)
	return s, nil
}

// Packet is one packet of a comparison, as Agree hands it to a Check.
type Packet struct {
	Line trace.Line
	Hops []chain.Hop
	// MTUPunt: the switch sent the packet on for R-MTU (it cannot
	// encapsulate it), so it is compared on its action and MTU only.
	MTUPunt bool
	// Agrees: the verdict is the reference's, as package chain defines it.
	Agrees bool
}

// Check looks further at a packet (after its verdict was compared) and
// returns the disagreements it finds, each without the packet's prefix.
type Check func(p Packet) []string

// Result counts the packets compared and those that went through the
// fallback, and lists every disagreement, one line each.
type Result struct {
	Packets, Punted int
	Diffs           []string
}

// Agree replays lines on the system and on the plain reference in
// lockstep (each programmed by its own trace.Replayer) and compares each
// packet's verdict as package chain defines agreement: the verdict of the
// hop that decided it (action, service, backend, conntrack outcome, drop
// reason, MTU), and for a packet the switch sent on for R-MTU, its action
// and MTU only. check, when not nil, is called for every packet after
// that (package chain's tests compare conntrack entries there). A line
// without a number is numbered by its position.
func (s *System) Agree(ctx context.Context, cfg *compiler.Config, st compiler.State, lines []trace.Line, pushOnly bool, check Check) (Result, error) {
	var r Result
	rc, err := trace.NewReplayer(ctx, cfg, st, s.Chain, s.Chain)
	if err != nil {
		return r, fmt.Errorf("system: %w", err)
	}
	rp, err := trace.NewReplayer(ctx, cfg, st, s.Plain, s.Plain)
	if err != nil {
		return r, fmt.Errorf("reference: %w", err)
	}
	rc.PushOnly, rp.PushOnly = pushOnly, pushOnly
	for i, l := range lines {
		if l.No == 0 {
			l.No = i + 1
		}
		oc, err := rc.Step(ctx, l)
		if err != nil {
			return r, fmt.Errorf("system: %w", err)
		}
		op, err := rp.Step(ctx, l)
		if err != nil {
			return r, fmt.Errorf("reference: %w", err)
		}
		if l.Packet == nil {
			continue
		}
		r.Packets++
		c, p := oc[len(oc)-1].Verdict, op[len(op)-1].Verdict
		hops := s.Chain.Hops()
		pk := Packet{Line: l, Hops: hops, MTUPunt: len(hops) == 2 && slices.ContainsFunc(hops[0].Verdict.Steps, func(st targets.Step) bool { return st.Rule == "R-MTU" })}
		if len(hops) == 2 {
			r.Punted++
		}
		prefix := fmt.Sprintf("line %d t=%g %s: ", l.No, l.T, trace.FormatPacket(*l.Packet))
		switch {
		case pk.MTUPunt:
			pk.Agrees = c.Action == p.Action && c.MTU == p.MTU
			if !pk.Agrees {
				r.Diffs = append(r.Diffs, prefix+fmt.Sprintf("R-MTU punt: system %s mtu %d, reference %s mtu %d", c, c.MTU, p, p.MTU))
			}
		default:
			pk.Agrees = c.Same(p) && c.Backend == p.Backend
			if !pk.Agrees {
				r.Diffs = append(r.Diffs, prefix+fmt.Sprintf("system %s (hops %d), reference %s", c, len(hops), p))
			}
		}
		if check != nil {
			for _, d := range check(pk) {
				r.Diffs = append(r.Diffs, prefix+d)
			}
		}
	}
	return r, nil
}
