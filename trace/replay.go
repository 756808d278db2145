package trace

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/chain"
)

// Output is one line of replay output: a packet's verdict, or what an
// event (or a draining deadline, event "deadline") changed.
type Output struct {
	Line int     `json:"line,omitempty"`
	T    float64 `json:"t"`

	Action  string   `json:"action,omitempty"`
	Service string   `json:"service,omitempty"`
	Backend string   `json:"backend,omitempty"`
	Drop    string   `json:"drop,omitempty"`
	MTU     uint16   `json:"mtu,omitempty"` // too-big: the next-hop MTU announced (R-MTU)
	CT      string   `json:"ct,omitempty"`
	Rule    []string `json:"rule,omitempty"`
	// Hops is what each datapath of a chain (a switch and its fallback,
	// targets/chain) did, when the packet went through more than one.
	Hops []Hop `json:"hops,omitempty"`

	Event   string             `json:"event,omitempty"`
	Changes *int               `json:"changes,omitempty"` // table writes of the event's diff
	Events  []controller.Event `json:"events,omitempty"`

	// Mismatch says how the outcome differs from the line's expectation.
	Mismatch string `json:"mismatch,omitempty"`

	Verdict targets.Verdict `json:"-"`
}

// Hop is one datapath's part of a packet's fate.
type Hop struct {
	Target  string `json:"target"`
	Action  string `json:"action"`
	Service string `json:"service,omitempty"`
	Backend string `json:"backend,omitempty"`
	CT      string `json:"ct,omitempty"`
	Drop    string `json:"drop,omitempty"`
	MTU     uint16 `json:"mtu,omitempty"`
}

// EventDeadline is the Output.Event of a reconcile at a draining deadline.
const EventDeadline = "deadline"

// Summary tallies a replay.
type Summary struct {
	Packets int            `json:"packets"`
	Forward map[string]int `json:"forward"` // packets per backend
	// New counts, per backend, the packets that selected it afresh from
	// the ring (ct new, miss or untracked): new connections.
	New        map[string]int `json:"new"`
	CT         map[string]int `json:"ct"`
	Drops      map[string]int `json:"drops"`
	NotOurs    int            `json:"notOurs"`
	Fallback   int            `json:"fallback"`
	TooBig     int            `json:"tooBig"` // answered with ICMP too big (R-MTU)
	Events     int            `json:"events"`
	Expected   int            `json:"expected"`   // lines with an expectation
	Mismatches int            `json:"mismatches"` // of which failed
}

// Replayer runs a trace against a datapath. Events edit its copy of the
// configuration and health state and go through controller.Reconcile and
// the target's Apply, as the controller would.
type Replayer struct {
	// PushOnly replays as `lbc push` alone would (no `lbc run`): events
	// recompile and push, but nothing recompiles at a deadline, so only
	// the datapath's own clock ends a drain or a persistence cap (design
	// decision 8). Set it before the first Step.
	PushOnly bool

	cfg    *compiler.Config
	st     compiler.State
	tgt    targets.Target
	pt     targets.PacketTarget
	ir     *compiler.IR
	labels map[string]string
	sum    Summary
}

// NewReplayer compiles cfg for st and pushes it to the target at t=0.
// cfg must be validated; the replayer works on copies of cfg and st.
func NewReplayer(ctx context.Context, cfg *compiler.Config, st compiler.State, tgt targets.Target, pt targets.PacketTarget) (*Replayer, error) {
	r := &Replayer{cfg: cloneConfig(cfg), st: st.Clone(), tgt: tgt, pt: pt, labels: map[string]string{},
		sum: Summary{Forward: map[string]int{}, New: map[string]int{}, CT: map[string]int{}, Drops: map[string]int{}}}
	held, err := tgt.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: read: %w", tgt.Name(), err)
	}
	rec, err := controller.Reconcile(r.cfg, r.st, held, 0)
	if err != nil {
		return nil, err
	}
	if err := r.apply(ctx, rec); err != nil {
		return nil, err
	}
	return r, nil
}

// IR is the IR the replayer last pushed.
func (r *Replayer) IR() *compiler.IR { return r.ir }

// Summary returns the tallies so far.
func (r *Replayer) Summary() Summary { return r.sum }

// Duration converts trace seconds to the virtual clock of Process.
func Duration(t float64) time.Duration { return time.Duration(math.Round(t * 1e9)) }

// Step runs one line. It returns the outputs (deadlines that passed
// before the line, then the line's own), or an error when the line cannot
// be run (an event naming an unknown backend, a datapath failure): a
// mismatch with the expectation is reported in the output, not as an error.
func (r *Replayer) Step(ctx context.Context, l Line) ([]Output, error) {
	outs, err := r.Advance(ctx, l.T)
	if err != nil {
		return nil, err
	}
	switch {
	case l.Packet != nil:
		o, err := r.packet(ctx, l)
		if err != nil {
			return nil, &Error{Line: l.No, Err: err}
		}
		outs = append(outs, o)
	case l.Event != nil:
		if err := r.edit(l.Event, l.T); err != nil {
			return nil, &Error{Line: l.No, Err: err}
		}
		o, err := r.reconcile(ctx, l.T)
		if err != nil {
			return nil, &Error{Line: l.No, Err: err}
		}
		o.Line, o.Event = l.No, l.Event.Kind
		if l.Expect != nil {
			r.sum.Expected++
			if err := l.Expect.CheckEvent(r.ir, o.Events); err != nil {
				o.Mismatch = err.Error()
				r.sum.Mismatches++
			}
		}
		outs = append(outs, o)
	}
	return outs, nil
}

// Advance reconciles at every draining deadline up to and including t, as
// the controller's timer does: at its deadline a draining backend's row is
// removed (R-DRAIN housekeeping; the datapath has already stopped using
// it). With PushOnly it does nothing.
func (r *Replayer) Advance(ctx context.Context, t float64) ([]Output, error) {
	var outs []Output
	for !r.PushOnly {
		dl, ok := controller.NextDeadline(r.ir)
		if !ok || dl > Duration(t) {
			return outs, nil
		}
		o, err := r.reconcile(ctx, dl.Seconds())
		if err != nil {
			return nil, err
		}
		o.Event = EventDeadline
		outs = append(outs, o)
	}
	return outs, nil
}

func (r *Replayer) reconcile(ctx context.Context, t float64) (Output, error) {
	rec, err := controller.Reconcile(r.cfg, r.st, r.ir, Duration(t))
	if err != nil {
		return Output{}, err
	}
	if err := r.apply(ctx, rec); err != nil {
		return Output{}, err
	}
	r.sum.Events++
	n := len(rec.Diff.Changes)
	return Output{T: t, Changes: &n, Events: rec.Events}, nil
}

// committer is a target that records what a diff does not carry (tunnel
// sources, names, informational fields) after Apply.
type committer interface {
	Commit(ir *compiler.IR) error
}

func (r *Replayer) apply(ctx context.Context, rec *controller.Reconciled) error {
	if _, err := r.tgt.Apply(ctx, rec.Diff); err != nil {
		return fmt.Errorf("%s: apply: %w", r.tgt.Name(), err)
	}
	if c, ok := r.tgt.(committer); ok {
		if err := c.Commit(rec.IR); err != nil {
			return fmt.Errorf("%s: commit: %w", r.tgt.Name(), err)
		}
	}
	r.ir = rec.IR
	return nil
}

func (r *Replayer) packet(ctx context.Context, l Line) (Output, error) {
	v, err := r.pt.Process(ctx, *l.Packet, Duration(l.T))
	if err != nil {
		return Output{}, fmt.Errorf("%s: %w", r.tgt.Name(), err)
	}
	o := Output{Line: l.No, T: l.T, Action: v.Action.String(), Service: v.Service, CT: v.CT, Rule: Rules(v), Verdict: v}
	if c, ok := r.pt.(*chain.Datapath); ok && len(c.Hops()) > 1 {
		for _, h := range c.Hops() {
			hv := h.Verdict
			oh := Hop{Target: h.Target, Action: hv.Action.String(), Service: hv.Service, CT: hv.CT, Drop: hv.DropReason, MTU: hv.MTU}
			if hv.Action == targets.Forward || hv.Action == targets.TooBig {
				oh.Backend = hv.Backend
			}
			o.Hops = append(o.Hops, oh)
		}
	}
	r.sum.Packets++
	if v.CT != "" {
		r.sum.CT[v.CT]++
	}
	switch v.Action {
	case targets.Forward:
		o.Backend = v.Backend
		r.sum.Forward[v.Backend]++
		if v.CT != targets.CTHit {
			r.sum.New[v.Backend]++
		}
	case targets.Drop:
		o.Drop = v.DropReason
		r.sum.Drops[v.DropReason]++
	case targets.NotOurs:
		r.sum.NotOurs++
	case targets.Fallback:
		r.sum.Fallback++
	case targets.TooBig:
		o.MTU = v.MTU
		r.sum.TooBig++
	}
	if l.Expect != nil {
		r.sum.Expected++
		if err := l.Expect.Check(v, r.labels); err != nil {
			o.Mismatch = err.Error()
			r.sum.Mismatches++
		}
	}
	if l.Label != "" {
		r.labels[l.Label] = o.Backend
	}
	return o, nil
}

// edit applies an event to the configuration or the health state.
func (r *Replayer) edit(e *Event, t float64) error {
	known := func(name string) bool {
		for _, s := range r.cfg.Services {
			for _, g := range s.Backends {
				for _, ep := range g.Endpoints {
					if ep.Name == name {
						return true
					}
				}
			}
		}
		return false
	}
	switch e.Kind {
	case EventHealth:
		if !known(e.Backend) {
			return fmt.Errorf("health: no endpoint %q in the configuration", e.Backend)
		}
		if r.st.IsHealthy(e.Backend) != e.Healthy {
			// The event's time dates the change (R-PERSIST-CAP).
			r.st.SetSince(e.Backend, Duration(t))
		}
		r.st.SetHealthy(e.Backend, e.Healthy)
	case EventWeight:
		if !known(e.Backend) {
			return fmt.Errorf("weight: no endpoint %q in the configuration", e.Backend)
		}
		r.st.SetWeight(e.Backend, e.Weight)
	case EventRemove:
		found := false
		for si := range r.cfg.Services {
			for gi := range r.cfg.Services[si].Backends {
				g := &r.cfg.Services[si].Backends[gi]
				n := len(g.Endpoints)
				g.Endpoints = slices.DeleteFunc(g.Endpoints, func(ep compiler.Endpoint) bool { return ep.Name == e.Backend })
				found = found || len(g.Endpoints) != n
			}
		}
		if !found {
			return fmt.Errorf("remove: no endpoint %q in the configuration", e.Backend)
		}
	case EventAdd:
		var target *compiler.BackendGroup
		for si := range r.cfg.Services {
			s := &r.cfg.Services[si]
			if e.Service != "" && s.Name != e.Service {
				continue
			}
			for gi := range s.Backends {
				if s.Backends[gi].Name == e.Group {
					if target != nil {
						return fmt.Errorf("add: several services have a group %q; name the service with \"service\"", e.Group)
					}
					target = &s.Backends[gi]
				}
			}
		}
		if target == nil {
			return fmt.Errorf("add: no group %q in the configuration", e.Group)
		}
		target.Endpoints = append(target.Endpoints, e.Endpoint)
	}
	if _, err := compiler.Validate(r.cfg); err != nil {
		return fmt.Errorf("%s: the configuration becomes invalid: %w", e.Kind, err)
	}
	return nil
}

// cloneConfig copies what events edit: services, groups and endpoints.
func cloneConfig(c *compiler.Config) *compiler.Config {
	out := *c
	out.Services = slices.Clone(c.Services)
	for si := range out.Services {
		s := &out.Services[si]
		s.Backends = slices.Clone(s.Backends)
		for gi := range s.Backends {
			s.Backends[gi].Endpoints = slices.Clone(s.Backends[gi].Endpoints)
		}
	}
	return &out
}
