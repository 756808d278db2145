package compiler

import (
	"fmt"
	"slices"
	"strings"
)

// Peak is the most rows of each kind (Holds*) a target holds at any point
// while d is applied, one change after another, to held.
func (d Diff) Peak(held *IR) map[string]int {
	n := map[string]int{}
	if held != nil {
		n[HoldsServices] = len(held.Services)
		n[HoldsBackends] = len(held.Backends)
		n[HoldsRingEntries] = held.RingEntries()
		for i := range held.VIPs {
			n[vipHolds(held.VIPs[i].Key.Kind)]++
		}
		n[HoldsVIPs] = len(held.VIPs)
	}
	peak := map[string]int{}
	for k, v := range n {
		peak[k] = v
	}
	for _, c := range d.Changes {
		var k string
		switch {
		case c.Service != nil:
			k = HoldsServices
		case c.Backend != nil:
			k = HoldsBackends
		case c.Ring != nil:
			k = HoldsRingEntries
		case c.VIP != nil:
			k = vipHolds(c.VIP.Key.Kind)
		}
		ks := []string{k}
		if c.VIP != nil {
			ks = append(ks, HoldsVIPs) // one table on some targets, three on others
		}
		for _, k := range ks {
			switch c.Op {
			case Insert:
				n[k]++
			case Delete:
				n[k]--
			}
			peak[k] = max(peak[k], n[k])
		}
	}
	return peak
}

func vipHolds(k MatchKind) string {
	switch k {
	case MatchAllPorts:
		return HoldsVIPProtos
	case MatchAnyProto:
		return HoldsVIPAddrs
	}
	return HoldsVIPPorts
}

// TransitionError says that a change does not fit a target's tables while
// it is made, though the configuration it leads to may: what a hitless
// change must hold at once is the rows that go and the rows that come.
type TransitionError struct {
	Target string
	Tables []string // one line per table that overflows
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("%s: the change does not fit while it is made (nothing was written): %s; make it in two steps: first a configuration without what goes, then one with what comes",
		e.Target, strings.Join(e.Tables, "; "))
}

// CheckTransition reports, before anything is written, a table of c that
// applying d to held would overflow at some point. Removals come first
// in a diff (DiffWithin, step 0), so only what a hitless change keeps
// meanwhile (a service a moving VIP still points to, the spare ring half
// of a changing service) counts beside what comes.
func CheckTransition(held *IR, d Diff, c Capacity) error {
	peak := d.Peak(held)
	var over []string
	for _, t := range c.Tables {
		if t.Holds == HoldsConnections || t.Holds == HoldsIdleTimeout {
			continue
		}
		if p := peak[t.Holds]; p > t.Size {
			over = append(over, fmt.Sprintf("%s holds %d %s, %d at once are needed", t.Table, t.Size, t.Holds, p))
		}
	}
	if len(over) == 0 {
		return nil
	}
	return &TransitionError{Target: c.Target, Tables: over}
}

// MetaChanges are the modifies that bring what a target stores beside the
// datapath fields of a row (names, the decision and eligible set of a
// service, a backend's weight and failover flag) from old to new, for
// rows whose datapath fields already agree: DiffWithin leaves those rows
// alone, so a target that reads these fields back from its entries (P4
// metadata) would show them stale (issue 31, item 5).
func MetaChanges(old, new *IR) []Change {
	if old == nil {
		return nil
	}
	var out []Change
	ox := old.Index()
	for i := range new.Services {
		s := &new.Services[i]
		if o := ox.Service(s.ID); o != nil && ServiceDatapathEqual(o, s) && !serviceMetaEqual(o, s) {
			out = append(out, Change{Table: TableService, Op: Modify, Service: s})
		}
	}
	oldB := map[uint32]*BackendRow{}
	for i := range old.Backends {
		oldB[old.Backends[i].ID] = &old.Backends[i]
	}
	for i := range new.Backends {
		b := &new.Backends[i]
		if o := oldB[b.ID]; o != nil && BackendDatapathEqual(o, b) && !backendMetaEqual(o, b) {
			out = append(out, Change{Table: TableBackend, Op: Modify, Backend: b})
		}
	}
	return out
}

func serviceMetaEqual(a, b *ServiceRow) bool {
	return a.Name == b.Name && a.Decision == b.Decision && a.Rule == b.Rule && a.FailoverSide == b.FailoverSide && slices.Equal(a.Eligible, b.Eligible)
}

func backendMetaEqual(a, b *BackendRow) bool {
	return a.Name == b.Name && a.Weight == b.Weight && a.Failover == b.Failover && a.DeadlineRule == b.DeadlineRule
}
