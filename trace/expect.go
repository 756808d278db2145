package trace

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/targets"
)

// Expect is what a line's outcome must be, written from the spec. Every
// field given is checked; absent fields are not. Where the spec does not
// name the backend (it depends on the hash), an expectation states the
// relation the spec defines instead: a backend in a set, not some backend,
// or the same backend as an earlier labelled packet.
type Expect struct {
	// Packets.
	Action  string   `json:"action,omitempty"`  // forward, drop, not-ours, fallback, too-big
	Backend string   `json:"backend,omitempty"` // exactly this backend (implies forward)
	In      []string `json:"in,omitempty"`      // a backend of this set (implies forward)
	NotIn   []string `json:"notIn,omitempty"`   // forwarded, but not to any of these
	Same    string   `json:"same,omitempty"`    // forwarded to the backend of the labelled packet
	NotSame string   `json:"notSame,omitempty"` // forwarded, not to the labelled packet's backend
	CT      string   `json:"ct,omitempty"`      // hit, miss, new, untracked
	Drop    string   `json:"drop,omitempty"`    // drop reason (implies drop)
	Rules   []string `json:"rules,omitempty"`   // rule IDs the decision must cite
	// MTU is the next-hop MTU a too-big answer announces (R-MTU; implies
	// action too-big).
	MTU *int `json:"mtu,omitempty"`

	// Packets and events: the service the packet matched, or whose
	// eligible set Eligible gives (may be omitted with one service).
	Service string `json:"service,omitempty"`

	// Events.
	Eligible []string `json:"eligible,omitempty"` // the eligible set after the event, in any order
	// Events lists the controller events the line causes, in any order;
	// an empty list given as [] asserts that there are none.
	Events *[]string `json:"events,omitempty"`
	Epoch  *uint32   `json:"epoch,omitempty"` // the service's epoch after the event
}

var actions = []string{"forward", "drop", "not-ours", "fallback", "too-big"}

func (e *Expect) validate(event bool) error {
	// A list given empty would assert nothing (or nothing that can hold),
	// and would not survive a write and re-read: refuse it.
	for _, l := range []struct {
		name string
		v    []string
		fix  string
	}{
		{"in", e.In, "name at least one backend, or leave it out"},
		{"notIn", e.NotIn, "name at least one backend, or leave it out"},
		{"rules", e.Rules, "name at least one rule ID, or leave it out"},
		{"eligible", e.Eligible, `to assert that no backend is eligible, expect "events": ["no-backends"]`},
	} {
		if l.v != nil && len(l.v) == 0 {
			return fmt.Errorf("%s: empty list; %s", l.name, l.fix)
		}
	}
	pkt := e.Action != "" || e.Backend != "" || len(e.In) > 0 || len(e.NotIn) > 0 || e.Same != "" || e.NotSame != "" || e.CT != "" || e.Drop != "" || len(e.Rules) > 0 || e.MTU != nil
	ev := len(e.Eligible) > 0 || e.Events != nil || e.Epoch != nil
	switch {
	case event && pkt:
		return errors.New("an event line expects eligible, events, epoch (and service), not a packet's outcome")
	case !event && ev:
		return errors.New("a packet line expects action, backend, in, notIn, same, notSame, ct, drop, mtu, rules (and service)")
	case !pkt && !ev && e.Service == "":
		return errors.New("empty expectation")
	}
	if e.Action != "" && !slices.Contains(actions, e.Action) {
		return fmt.Errorf("action %q: want forward, drop, not-ours, fallback or too-big", e.Action)
	}
	if e.MTU != nil {
		if *e.MTU < 1 || *e.MTU > 65535 {
			return fmt.Errorf("mtu %d out of range 1..65535", *e.MTU)
		}
		if e.Action != "" && e.Action != "too-big" {
			return errors.New("mtu is what a too-big answer announces: it implies action too-big")
		}
	}
	if e.CT != "" && !slices.Contains([]string{targets.CTHit, targets.CTMiss, targets.CTNew, targets.CTUntracked}, e.CT) {
		return fmt.Errorf("ct %q: want hit, miss, new or untracked", e.CT)
	}
	fwd := e.Backend != "" || len(e.In) > 0 || len(e.NotIn) > 0 || e.Same != "" || e.NotSame != ""
	if fwd && (e.Drop != "" || e.MTU != nil || (e.Action != "" && e.Action != "forward")) {
		return errors.New("a backend expectation implies forward; it cannot also expect a drop or another action")
	}
	if e.Drop != "" && e.Action != "" && e.Action != "drop" {
		return errors.New("drop implies action drop")
	}
	return nil
}

// Check compares a packet's verdict with the expectation. labels maps the
// labels of earlier packets to the backend they were forwarded to ("" if
// they were not).
func (e *Expect) Check(v targets.Verdict, labels map[string]string) error {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	act := v.Action.String()
	want := e.Action
	switch {
	case want != "":
	case e.Drop != "":
		want = "drop"
	case e.MTU != nil:
		want = "too-big"
	case e.Backend != "" || len(e.In) > 0 || len(e.NotIn) > 0 || e.Same != "" || e.NotSame != "":
		want = "forward"
	}
	if want != "" && act != want {
		fail("action %s, want %s", act, want)
	}
	if e.Backend != "" && v.Backend != e.Backend {
		fail("backend %q, want %q", v.Backend, e.Backend)
	}
	if len(e.In) > 0 && !slices.Contains(e.In, v.Backend) {
		fail("backend %q, want one of %v", v.Backend, e.In)
	}
	if len(e.NotIn) > 0 && slices.Contains(e.NotIn, v.Backend) {
		fail("backend %q, want none of %v", v.Backend, e.NotIn)
	}
	if e.Same != "" {
		if b := labels[e.Same]; b == "" || v.Backend != b {
			fail("backend %q, want the backend of %q (%q)", v.Backend, e.Same, b)
		}
	}
	if e.NotSame != "" {
		if b := labels[e.NotSame]; v.Backend == b {
			fail("backend %q, want another backend than %q's", v.Backend, e.NotSame)
		}
	}
	if e.CT != "" && v.CT != e.CT {
		fail("ct %q, want %q", v.CT, e.CT)
	}
	if e.Drop != "" && v.DropReason != e.Drop {
		fail("drop reason %q, want %q", v.DropReason, e.Drop)
	}
	if e.MTU != nil && int(v.MTU) != *e.MTU {
		fail("mtu %d, want %d", v.MTU, *e.MTU)
	}
	if e.Service != "" && v.Service != e.Service {
		fail("service %q, want %q", v.Service, e.Service)
	}
	// Only the reference model explains its decisions; a datapath that
	// reports no steps is judged on what it can observe.
	for _, r := range e.Rules {
		if len(v.Steps) == 0 {
			break
		}
		if !slices.ContainsFunc(v.Steps, func(s targets.Step) bool { return s.Rule == r }) {
			fail("decision does not cite %s (cites %s)", r, strings.Join(Rules(v), ", "))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("got %s: %s", v, strings.Join(errs, "; "))
	}
	return nil
}

// CheckEvent compares the outcome of an event with the expectation.
func (e *Expect) CheckEvent(ir *compiler.IR, events []controller.Event) error {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	var svc *compiler.ServiceRow
	if e.Service != "" {
		svc = ir.ServiceByName(e.Service)
		if svc == nil {
			return fmt.Errorf("no service %q", e.Service)
		}
	} else if len(ir.Services) == 1 {
		svc = &ir.Services[0]
	} else if len(e.Eligible) > 0 || e.Epoch != nil {
		return errors.New(`expect: several services: name one with "service"`)
	}
	if len(e.Eligible) > 0 {
		got, want := slices.Clone(svc.Eligible), slices.Clone(e.Eligible)
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			fail("eligible %v (%s), want %v", got, svc.Rule, want)
		}
	}
	if e.Epoch != nil && svc.Epoch != *e.Epoch {
		fail("epoch %d, want %d", svc.Epoch, *e.Epoch)
	}
	if e.Events != nil {
		var got []string
		for _, ev := range events {
			if e.Service == "" || ev.Service == e.Service {
				got = append(got, ev.Kind)
			}
		}
		want := slices.Clone(*e.Events)
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			fail("events %v, want %v", got, want)
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// Rules lists the rule IDs of a verdict's steps, in order, without repeats.
func Rules(v targets.Verdict) []string {
	var out []string
	for _, s := range v.Steps {
		if !slices.Contains(out, s.Rule) {
			out = append(out, s.Rule)
		}
	}
	return out
}
