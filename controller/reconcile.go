// Package controller keeps datapaths programmed: it turns the
// configuration and the health state into the IR, the ordered diff against
// what a datapath holds, and the events an operator wants to see. `lbc run`
// drives it with real health checks; `lbc replay` drives the same code with
// the events of a trace.
package controller

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/lbc-dev/lbc/compiler"
)

// Event kinds.
const (
	EventFailover      = "failover"       // the eligible set moved to failover backends (R-ELIG-5)
	EventFailback      = "failback"       // it moved back to primaries (R-ELIG-5)
	EventEpoch         = "epoch"          // the service's entries were flushed (R-EPOCH)
	EventDrainStart    = "draining-start" // a removed backend keeps its entries until its deadline (R-DRAIN)
	EventDrainEnd      = "draining-end"   // its deadline passed: the row and its entries are gone (R-DRAIN)
	EventBackendAdd    = "backend-add"    // a backend row appeared
	EventBackendRemove = "backend-remove" // a backend row went without draining (drainingTimeoutSec 0)
	EventEligible      = "eligible"       // the eligible set changed
	EventNoBackends    = "no-backends"    // the eligible set became empty: new connections are dropped
)

// EventKinds lists every event kind (lbc_events_total's kind label).
var EventKinds = []string{EventFailover, EventFailback, EventEpoch, EventDrainStart, EventDrainEnd, EventBackendAdd, EventBackendRemove, EventEligible, EventNoBackends}

// Event is one change an operator cares about.
type Event struct {
	Kind    string `json:"kind"`
	Service string `json:"service"`
	Backend string `json:"backend,omitempty"`
	Detail  string `json:"detail"`
	// Deadline is when a draining backend's entries stop being valid, on
	// the compile clock (draining-start only; 0 otherwise). The controller
	// logs it as a date, replay as trace time.
	Deadline time.Duration `json:"-"`
}

func (e Event) String() string {
	s := fmt.Sprintf("service %q: %s", e.Service, e.Kind)
	if e.Backend != "" {
		s += fmt.Sprintf(" backend %q", e.Backend)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Reconciled is the outcome of one Reconcile.
type Reconciled struct {
	IR     *compiler.IR
	Result *compiler.Result
	// Diff turns prev into IR, in the order that is safe to apply.
	Diff   compiler.Diff
	Events []Event
}

// Reconcile compiles cfg for the health state st against prev (what the
// datapath holds, nil on a first push) at time now (seconds, the clock
// draining deadlines are dated with) and returns the new IR, the diff and
// the events. It is pure: no I/O, no clock. It is the one code path from
// state to tables: the controller and replay both call it.
//
// cfg must have passed validation (compiler.Load or compiler.Validate).
func Reconcile(cfg *compiler.Config, st compiler.State, prev *compiler.IR, now time.Duration) (*Reconciled, error) {
	res, err := compiler.Compile(compiler.Input{Config: cfg, State: st, Prev: prev, Now: now})
	if err != nil {
		return nil, err
	}
	return &Reconciled{IR: res.IR, Result: res, Diff: compiler.DiffIR(prev, res.IR), Events: Events(prev, res.IR, now)}, nil
}

// Events lists what changed from prev to next at time now (the compile
// clock), per service in ID order.
func Events(prev, next *compiler.IR, now time.Duration) []Event {
	if prev == nil {
		prev = &compiler.IR{}
	}
	var out []Event
	px, nx := prev.Index(), next.Index()
	for i := range next.Services {
		s := &next.Services[i]
		o := px.Service(s.ID)
		if o == nil {
			continue
		}
		add := func(kind, backend, format string, args ...any) {
			out = append(out, Event{Kind: kind, Service: s.Name, Backend: backend, Detail: fmt.Sprintf(format, args...)})
		}
		if !slices.Equal(o.Eligible, s.Eligible) {
			add(EventEligible, "", "%s → %s", eligibleSet(o), eligibleSet(s))
		}
		if s.NoBackends && !o.NoBackends {
			add(EventNoBackends, "", "%s: new connections are dropped", s.Rule)
		}
		// Only R-ELIG-3a–e/4a–e set the side; last resort and drop keep
		// it, so a change of FailoverSide is exactly a failover or
		// failback (R-ELIG-5).
		if o.Decision != "" && o.FailoverSide != s.FailoverSide {
			if s.FailoverSide {
				add(EventFailover, "", "new connections go to failover backends %s", list(s.Eligible))
			} else {
				add(EventFailback, "", "new connections go back to primaries %s", list(s.Eligible))
			}
		}
		if o.Epoch != s.Epoch {
			add(EventEpoch, "", "epoch %d → %d: every entry of the service is invalid (disableConnectionDrainOnFailover)", o.Epoch, s.Epoch)
		}
	}
	// Backends, in ID order.
	svcName := func(id uint32) string {
		if s := nx.Service(id); s != nil {
			return s.Name
		}
		if s := px.Service(id); s != nil {
			return s.Name
		}
		return fmt.Sprint(id)
	}
	for i := range next.Backends {
		b := &next.Backends[i]
		o := px.Backend(b.ID)
		switch {
		case o == nil && px.Service(b.ServiceID) != nil:
			out = append(out, Event{Kind: EventBackendAdd, Service: svcName(b.ServiceID), Backend: b.Name, Detail: b.IP.String()})
		case o != nil && b.Draining && !o.Draining:
			out = append(out, Event{Kind: EventDrainStart, Service: svcName(b.ServiceID), Backend: b.Name, Deadline: b.Deadline,
				Detail: fmt.Sprintf("keeps its entries for %s (R-DRAIN)", (b.Deadline - now).Round(time.Millisecond))})
		}
	}
	var gone []*compiler.BackendRow
	for i := range prev.Backends {
		if o := &prev.Backends[i]; nx.Backend(o.ID) == nil {
			gone = append(gone, o)
		}
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i].ID < gone[j].ID })
	for _, o := range gone {
		if o.Draining {
			out = append(out, Event{Kind: EventDrainEnd, Service: svcName(o.ServiceID), Backend: o.Name, Detail: "draining timeout over: its entries are invalid"})
		} else {
			out = append(out, Event{Kind: EventBackendRemove, Service: svcName(o.ServiceID), Backend: o.Name, Detail: "removed; its entries are invalid (no connectionDraining)"})
		}
	}
	return out
}

// NextDeadline returns the earliest draining deadline in ir (seconds, on
// the clock Reconcile was given): at that time a Reconcile deletes the
// backend row and with it the validity of its entries (R-DRAIN).
func NextDeadline(ir *compiler.IR) (time.Duration, bool) {
	var t time.Duration
	ok := false
	if ir == nil {
		return 0, false
	}
	for _, b := range ir.Backends {
		if b.Draining && (!ok || b.Deadline < t) {
			t, ok = b.Deadline, true
		}
	}
	return t, ok
}

// eligibleSet is a service's eligible set with the decision and rule that
// chose it, "primary (R-ELIG-3d): r1, r2", as lbc status prints it. The
// rule comes first: after a list it would read as the last name's.
func eligibleSet(s *compiler.ServiceRow) string {
	if s.Rule == "" { // a target that keeps no decision
		return list(s.Eligible)
	}
	return s.Decision + " (" + s.Rule + "): " + list(s.Eligible)
}

// list writes an eligible set as lbc status and lbc explain do, "r1, r2",
// so that a log line reads like them; "none" when it is empty.
func list(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
