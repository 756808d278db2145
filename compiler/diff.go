package compiler

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Table names, as diffs and targets report them.
const (
	TableVIP     = "vip"
	TableService = "service"
	TableRing    = "ring"
	TableBackend = "backend"
)

// Op is what a change does to a table entry.
type Op uint8

// Operations.
const (
	Insert Op = iota
	Modify
	Delete
)

func (o Op) String() string { return [...]string{"insert", "modify", "delete"}[o] }

// RingEntry is one slot of one half of a ring.
type RingEntry struct {
	ServiceID uint32 `json:"serviceID"`
	Half      uint8  `json:"half"`
	Slot      uint32 `json:"slot"`
	BackendID uint32 `json:"backendID"`
}

// Change is one table write. Exactly one of the row pointers is set,
// matching Table; for a Delete it holds the old row.
type Change struct {
	Table   string      `json:"table"`
	Op      Op          `json:"op"`
	VIP     *VIPRow     `json:"vip,omitempty"`
	Service *ServiceRow `json:"service,omitempty"`
	Ring    *RingEntry  `json:"ring,omitempty"`
	Backend *BackendRow `json:"backend,omitempty"`
}

func (c Change) String() string {
	switch {
	case c.VIP != nil:
		k := c.VIP.Key
		return fmt.Sprintf("%s vip %s proto %s port %d (%s) → service %d", c.Op, k.VIP, k.Proto, k.Port, k.Kind, c.VIP.ServiceID)
	case c.Service != nil:
		return fmt.Sprintf("%s service %d %q (half %d, epoch %d)", c.Op, c.Service.ID, c.Service.Name, c.Service.ActiveHalf, c.Service.Epoch)
	case c.Ring != nil:
		return fmt.Sprintf("%s ring service %d half %d slot %d → backend %d", c.Op, c.Ring.ServiceID, c.Ring.Half, c.Ring.Slot, c.Ring.BackendID)
	case c.Backend != nil:
		return fmt.Sprintf("%s backend %d %q", c.Op, c.Backend.ID, c.Backend.Name)
	}
	return c.Op.String()
}

// Diff is the writes that turn one IR into another, in an order that is
// safe to apply one by one while packets flow (design decision 4):
//
//  0. what goes and nothing staying needs meanwhile: VIP deletes, the
//     deletes of services no staying VIP points to, and after a barrier
//     their rings and the backends no staying ring points at, so that a
//     table full of what goes has room for what comes (a revert after a
//     push cut short by a full table);
//  1. backend inserts and modifies (rows exist before rings point at them);
//  2. for each service whose ring changes, in waves that fit the ring
//     table (DiffWithin): the new ring into the half packets do not look
//     up, then the service rows that flip to it (one write each, the
//     epoch with it), then, after a barrier, the deletes of the halves
//     they left;
//  3. new services: their rings, then their rows; service rows that
//     change without a new ring;
//  4. VIP inserts and modifies (a service is reachable once it is whole);
//  5. the deletes of services that a VIP pointed to until step 4 moved
//     it; after a barrier, their rings and the backends no ring points
//     at any more.
//
// At rest a service holds one half of its ring; the table's spare room is
// shared by the services that change.
type Diff struct {
	Changes []Change `json:"changes"`
	// Barriers are indexes into Changes. The changes from each on delete
	// what the writes before it made unreachable (a half a row no longer
	// points at, a removed service's ring or backend): a target whose
	// packets may be between two lookups when a write lands waits until
	// none can still be reading it (Grace) before writing them.
	Barriers []int `json:"barriers,omitempty"`
}

// Grace is how long a switch target waits at a barrier: far longer than
// any packet spends between its service lookup and its ring and backend
// lookups in a pipeline (microseconds), short enough not to be felt.
const Grace = 2 * time.Millisecond

// Empty reports whether there is nothing to write.
func (d Diff) Empty() bool { return len(d.Changes) == 0 }

// Counts tallies the changes per table and operation.
func (d Diff) Counts() map[string][3]int {
	out := map[string][3]int{}
	for _, c := range d.Changes {
		x := out[c.Table]
		x[c.Op]++
		out[c.Table] = x
	}
	return out
}

// Summary is one line per table: "ring: 655 insert, 0 modify, 12 delete".
func (d Diff) Summary() string {
	counts := d.Counts()
	var lines []string
	for _, t := range []string{TableBackend, TableRing, TableService, TableVIP} {
		if x, ok := counts[t]; ok {
			lines = append(lines, fmt.Sprintf("%s: %d insert, %d modify, %d delete", t, x[Insert], x[Modify], x[Delete]))
		}
	}
	if len(lines) == 0 {
		return "no changes"
	}
	return strings.Join(lines, "\n")
}

// Segments splits the changes at the barriers: a target writes each
// segment, and waits Grace between two.
func (d Diff) Segments() [][]Change {
	var out [][]Change
	at := 0
	for _, b := range d.Barriers {
		if b > at {
			out = append(out, d.Changes[at:b])
			at = b
		}
	}
	if at < len(d.Changes) || len(out) == 0 {
		out = append(out, d.Changes[at:])
	}
	return out
}

// ServiceDatapathEqual compares the fields a datapath holds.
func ServiceDatapathEqual(a, b *ServiceRow) bool {
	return a.ID == b.ID && a.RingSize == b.RingSize && a.ActiveHalf == b.ActiveHalf && a.Epoch == b.Epoch &&
		a.IdleTimeoutSec == b.IdleTimeoutSec && a.SynNew == b.SynNew && a.Classes == b.Classes &&
		a.NoBackends == b.NoBackends && a.AllUnhealthy == b.AllUnhealthy && a.Encap == b.Encap
}

// BackendDatapathEqual compares the fields a datapath holds, the deadline
// among them (design decision 8: the datapath enforces it).
func BackendDatapathEqual(a, b *BackendRow) bool {
	return a.ID == b.ID && a.ServiceID == b.ServiceID && a.IP == b.IP && a.MAC == b.MAC &&
		a.Healthy == b.Healthy && a.Draining == b.Draining && a.Deadline == b.Deadline
}

// DiffIR returns the ordered writes from old (what the target holds; nil
// for an empty target) to new, for a target with room for both versions
// of every changing ring at once (one wave).
func DiffIR(old, new *IR) Diff { return DiffWithin(old, new, 0) }

// DiffWithin is DiffIR for a target whose ring table holds ringEntries
// (0: no limit). The services whose rings change are taken in waves, in
// service ID order, each as large as the room left allows: a wave's new
// rings, its flips, a barrier, then the deletes of the halves it left,
// which make room for the next. So a push never needs more spare room than
// its largest changing ring, however many services it changes.
func DiffWithin(old, new *IR, ringEntries int) Diff {
	if old == nil {
		old = &IR{}
	}
	var d Diff
	add := func(c Change) { d.Changes = append(d.Changes, c) }
	barrier := func() {
		if n := len(d.Changes); len(d.Barriers) == 0 || d.Barriers[len(d.Barriers)-1] != n {
			d.Barriers = append(d.Barriers, n)
		}
	}

	oldB := map[uint32]*BackendRow{}
	for i := range old.Backends {
		oldB[old.Backends[i].ID] = &old.Backends[i]
	}
	newB := map[uint32]*BackendRow{}
	for i := range new.Backends {
		newB[new.Backends[i].ID] = &new.Backends[i]
	}

	ox, nx := old.Index(), new.Index()
	plans := ringPlans(old, new, ox, nx)

	// 0. What goes first. A service that goes stays while a VIP that
	// stays points to it: step 4 moves that VIP, then it goes (step 5).
	newV := map[VIPKey]bool{}
	for i := range new.VIPs {
		newV[new.VIPs[i].Key] = true
	}
	pointed := map[uint32]bool{}
	for i := range old.VIPs {
		if newV[old.VIPs[i].Key] {
			pointed[old.VIPs[i].ServiceID] = true
		}
	}
	for i := range old.VIPs {
		if !newV[old.VIPs[i].Key] {
			add(Change{Table: TableVIP, Op: Delete, VIP: &old.VIPs[i]})
		}
	}
	early := map[uint32]bool{} // rings deleted in step 0
	for i := range old.Services {
		if id := old.Services[i].ID; nx.Service(id) == nil && !pointed[id] {
			add(Change{Table: TableService, Op: Delete, Service: &old.Services[i]})
			early[id] = true
		}
	}
	var first []Change
	for _, p := range plans {
		// A ring with no row on either side (left by a push cut short)
		// is looked up by no packet: it goes now too.
		if p.new == nil && (p.old == nil || early[p.id]) {
			early[p.id] = true
			first = append(append(first, p.writes...), p.frees...)
		}
	}
	staying := map[uint32]bool{} // backends a ring that stays for now points at
	for _, r := range old.Rings {
		if early[r.ServiceID] {
			continue
		}
		for h := range r.Halves {
			for _, b := range r.Halves[h] {
				staying[b] = true
			}
		}
	}
	var gone []uint32 // backends that go, in ID order
	for id := range oldB {
		if newB[id] == nil {
			gone = append(gone, id)
		}
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i] < gone[j] })
	goneEarly := map[uint32]bool{}
	for _, id := range gone {
		if !staying[id] {
			goneEarly[id] = true
			first = append(first, Change{Table: TableBackend, Op: Delete, Backend: oldB[id]})
		}
	}
	freedFirst := 0
	if len(first) > 0 && len(d.Changes) > 0 {
		barrier()
	}
	for _, c := range first {
		add(c)
		if c.Table == TableRing && c.Op == Delete {
			freedFirst++
		}
	}

	// 1. Backends in.
	for i := range new.Backends {
		b := &new.Backends[i]
		if o, ok := oldB[b.ID]; !ok {
			add(Change{Table: TableBackend, Op: Insert, Backend: b})
		} else if !BackendDatapathEqual(o, b) {
			add(Change{Table: TableBackend, Op: Modify, Backend: b})
		}
	}

	// 2. Services whose rings change, in waves.
	room := -1 // unlimited
	if ringEntries > 0 {
		room = max(0, ringEntries-old.RingEntries()+freedFirst)
	}
	// The services on both sides whose ring has something to write.
	var changing []*ringPlan
	done := map[uint32]bool{}
	for _, p := range plans {
		if p.old != nil && p.new != nil && len(p.writes)+len(p.frees) > 0 {
			changing = append(changing, p)
			done[p.id] = true
		}
	}
	for len(changing) > 0 {
		// A wave: as many services as the room holds, at least one.
		n, need := 0, 0
		for ; n < len(changing); n++ {
			g := changing[n].growth()
			if room >= 0 && n > 0 && need+g > room {
				break
			}
			need += g
		}
		wave := changing[:n]
		changing = changing[n:]
		for _, q := range wave {
			for _, c := range q.writes {
				add(c)
			}
		}
		freed := 0
		for _, q := range wave {
			if !ServiceDatapathEqual(q.old, q.new) {
				add(Change{Table: TableService, Op: Modify, Service: q.new})
			}
			freed += len(q.frees)
		}
		if freed > 0 {
			barrier()
		}
		for _, q := range wave {
			for _, c := range q.frees {
				add(c)
			}
		}
		if room >= 0 {
			room = max(0, room-need+freed)
		}
	}

	// 3. New services (their rings, then their rows), and rows that
	// change without a ring of their own to write. A ring with no row on
	// either side (left by a push cut short) is written here too: no
	// packet looks it up.
	for _, p := range plans {
		if p.new == nil || done[p.id] {
			continue
		}
		for _, c := range p.writes {
			add(c)
		}
	}
	for i := range new.Services {
		s := &new.Services[i]
		if done[s.ID] {
			continue
		}
		if o := ox.Service(s.ID); o == nil {
			add(Change{Table: TableService, Op: Insert, Service: s})
		} else if !ServiceDatapathEqual(o, s) {
			add(Change{Table: TableService, Op: Modify, Service: s})
		}
	}

	// 4. VIPs in.
	oldV := map[VIPKey]*VIPRow{}
	for i := range old.VIPs {
		oldV[old.VIPs[i].Key] = &old.VIPs[i]
	}
	for i := range new.VIPs {
		v := &new.VIPs[i]
		if o, ok := oldV[v.Key]; !ok {
			add(Change{Table: TableVIP, Op: Insert, VIP: v})
		} else if o.ServiceID != v.ServiceID {
			add(Change{Table: TableVIP, Op: Modify, VIP: v})
		}
	}

	// 5. The services that stayed while a VIP pointed to them, then
	// (after a barrier) their rings and the backends that are left.
	for i := range old.Services {
		if id := old.Services[i].ID; nx.Service(id) == nil && !early[id] {
			add(Change{Table: TableService, Op: Delete, Service: &old.Services[i]})
		}
	}
	var last []Change
	for _, p := range plans {
		if p.new == nil && p.old != nil && !early[p.id] {
			last = append(append(last, p.writes...), p.frees...)
		}
	}
	for _, id := range gone {
		if !goneEarly[id] {
			last = append(last, Change{Table: TableBackend, Op: Delete, Backend: oldB[id]})
		}
	}
	if len(last) > 0 {
		barrier()
	}
	for _, c := range last {
		add(c)
	}
	return d
}

// ringPlan is what one service's ring needs: writes that no packet looks
// up (into the half the old row does not use, or for a service without a
// row), and frees, the deletes of the half the old row uses and the new one
// does not, which wait until the row has moved away.
type ringPlan struct {
	id       uint32
	old, new *ServiceRow
	writes   []Change
	frees    []Change
}

// growth is how many more ring entries the target holds while the plan's
// writes are done and its frees are not.
func (p *ringPlan) growth() int {
	n := 0
	for _, c := range p.writes {
		switch c.Op {
		case Insert:
			n++
		case Delete:
			n--
		}
	}
	return n
}

// ringPlans returns a plan per service that has a ring or a row on either
// side, in service ID order.
func ringPlans(old, new *IR, ox, nx *Index) []*ringPlan {
	ids := map[uint32]bool{}
	for _, r := range old.Rings {
		ids[r.ServiceID] = true
	}
	for _, r := range new.Rings {
		ids[r.ServiceID] = true
	}
	for _, s := range old.Services {
		ids[s.ID] = true
	}
	for _, s := range new.Services {
		ids[s.ID] = true
	}
	order := make([]uint32, 0, len(ids))
	for id := range ids {
		order = append(order, id)
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	out := make([]*ringPlan, 0, len(order))
	for _, id := range order {
		p := &ringPlan{id: id, old: ox.Service(id), new: nx.Service(id)}
		or, nr := ox.Ring(id), nx.Ring(id)
		for h := 0; h < 2; h++ {
			var oh, nh []uint32
			if or != nil {
				oh = or.Halves[h]
			}
			if nr != nil {
				nh = nr.Halves[h]
			}
			// The half packets use now, and will not once the new row
			// (or the service's delete) is written, is freed after it.
			served := p.old != nil && int(p.old.ActiveHalf&1) == h
			leaves := p.new == nil || int(p.new.ActiveHalf&1) != h
			if served && leaves {
				diffHalf(id, uint8(h), oh, nh, func(c Change) { p.frees = append(p.frees, c) })
			} else {
				diffHalf(id, uint8(h), oh, nh, func(c Change) { p.writes = append(p.writes, c) })
			}
		}
		out = append(out, p)
	}
	return out
}

// RingEntries counts the ring slots the IR holds (both halves).
func (ir *IR) RingEntries() int {
	n := 0
	for _, r := range ir.Rings {
		for h := 0; h < 2; h++ {
			for _, b := range r.Halves[h] {
				if b != 0 {
					n++
				}
			}
		}
	}
	return n
}

func diffHalf(svc uint32, half uint8, oh, nh []uint32, add func(Change)) {
	n := max(len(oh), len(nh))
	for slot := 0; slot < n; slot++ {
		var o, v uint32
		if slot < len(oh) {
			o = oh[slot]
		}
		if slot < len(nh) {
			v = nh[slot]
		}
		switch {
		case o == v:
		case o == 0:
			add(Change{Table: TableRing, Op: Insert, Ring: &RingEntry{ServiceID: svc, Half: half, Slot: uint32(slot), BackendID: v}})
		case v == 0:
			add(Change{Table: TableRing, Op: Delete, Ring: &RingEntry{ServiceID: svc, Half: half, Slot: uint32(slot), BackendID: o}})
		default:
			add(Change{Table: TableRing, Op: Modify, Ring: &RingEntry{ServiceID: svc, Half: half, Slot: uint32(slot), BackendID: v}})
		}
	}
}

// Apply returns the IR a target holds after applying d to old; targets
// and tests use it to check that a diff is complete.
func (d Diff) Apply(old *IR) *IR {
	out := old.Clone()
	bs := newRowSet(out.Backends, func(r BackendRow) uint32 { return r.ID })
	ss := newRowSet(out.Services, func(r ServiceRow) uint32 { return r.ID })
	vs := newRowSet(out.VIPs, func(r VIPRow) VIPKey { return r.Key })
	rings := newRowSet(out.Rings, func(r RingRows) uint32 { return r.ServiceID })
	for _, c := range d.Changes {
		switch {
		case c.Backend != nil:
			bs.apply(*c.Backend, c.Op)
		case c.Service != nil:
			ss.apply(*c.Service, c.Op)
		case c.VIP != nil:
			vs.apply(*c.VIP, c.Op)
		case c.Ring != nil:
			i, ok := rings.pos[c.Ring.ServiceID]
			if !ok {
				rings.apply(RingRows{ServiceID: c.Ring.ServiceID}, Insert)
				i = rings.pos[c.Ring.ServiceID]
			}
			h := &rings.rows[i].Halves[c.Ring.Half]
			for uint32(len(*h)) <= c.Ring.Slot {
				*h = append(*h, 0)
			}
			if c.Op == Delete {
				(*h)[c.Ring.Slot] = 0
			} else {
				(*h)[c.Ring.Slot] = c.Ring.BackendID
			}
		}
	}
	out.Backends, out.Services, out.VIPs = bs.result(), ss.result(), vs.result()
	// Trim unset tails and drop rings with nothing left, as a target holds them.
	rs := rings.result()
	out.Rings = make([]RingRows, 0, len(rs))
	for _, r := range rs {
		for h := 0; h < 2; h++ {
			for len(r.Halves[h]) > 0 && r.Halves[h][len(r.Halves[h])-1] == 0 {
				r.Halves[h] = r.Halves[h][:len(r.Halves[h])-1]
			}
		}
		if len(r.Halves[0])+len(r.Halves[1]) > 0 {
			out.Rings = append(out.Rings, r)
		}
	}
	out.Sort()
	return out
}

// rowSet is a table being edited: rows indexed by key, deletions marked
// and compacted at the end, so that applying a diff is linear in its size.
type rowSet[T any, K comparable] struct {
	rows    []T
	pos     map[K]int
	deleted map[int]bool
	key     func(T) K
}

func newRowSet[T any, K comparable](rows []T, key func(T) K) *rowSet[T, K] {
	s := &rowSet[T, K]{rows: rows, pos: make(map[K]int, len(rows)), deleted: map[int]bool{}, key: key}
	for i, r := range rows {
		s.pos[key(r)] = i
	}
	return s
}

func (s *rowSet[T, K]) apply(row T, op Op) {
	k := s.key(row)
	i, ok := s.pos[k]
	switch {
	case op == Delete && ok:
		s.deleted[i] = true
		delete(s.pos, k)
	case op == Delete:
	case ok:
		s.rows[i] = row
	default:
		s.pos[k] = len(s.rows)
		s.rows = append(s.rows, row)
	}
}

func (s *rowSet[T, K]) result() []T {
	if len(s.deleted) == 0 {
		return s.rows
	}
	out := s.rows[:0]
	for i, r := range s.rows {
		if !s.deleted[i] {
			out = append(out, r)
		}
	}
	return out
}

// Clone returns a deep copy.
func (ir *IR) Clone() *IR {
	if ir == nil {
		return &IR{}
	}
	out := *ir
	out.VIPs = append([]VIPRow(nil), ir.VIPs...)
	out.Services = make([]ServiceRow, len(ir.Services))
	for i, s := range ir.Services {
		s.Eligible = append([]string(nil), s.Eligible...)
		out.Services[i] = s
	}
	out.Rings = make([]RingRows, len(ir.Rings))
	for i, r := range ir.Rings {
		out.Rings[i] = RingRows{ServiceID: r.ServiceID, Halves: [2][]uint32{append([]uint32(nil), r.Halves[0]...), append([]uint32(nil), r.Halves[1]...)}}
	}
	out.Backends = append([]BackendRow(nil), ir.Backends...)
	return &out
}
