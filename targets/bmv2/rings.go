package bmv2

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/ringpool"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"google.golang.org/protobuf/proto"
)

// The ring table is one pool of regions (internal/ringpool), as XDP's
// rings map is: a service row names its active ring by ring_base (and
// ring_size), and a ring slot is the entry at ring_base + slot. The
// compiler's IR still speaks of two halves per service; the target gives
// each half it writes a region of its own and frees it once the diff has
// deleted its entries, so at rest a service holds one ring and the spare
// room is shared (issue 35).
//
// Invariant: free space in the pool holds no entry on the switch. A
// region is allocated when the first batch that writes it (or a row that
// points at it) is written, and released after the batch that deletes
// its last entries, when no row points at it any more; the compiler's
// barrier before those deletes is the grace, so the space is free at once.
//
// Whose entries are these: a row names its active region; the slot-0 entry
// of every region names its service, half and length (ringMeta), written
// first and alone, deleted last and alone (plan, slotZeroLast), so a
// read-back after a push cut short finds every half the push left.
// Entries neither accounts for (strays) are deleted at the start of the
// next Apply, after a grace, before anything is placed.
//
// Compaction (ringpool) moves a live ring by copying its entries (read
// once from the switch per Apply), pointing its row at the copy (the seal
// cleared first, so that a push cut short in between makes the next one
// read the rings), and, after a grace, deleting the old entries.

// ringCtx is the pool's Mover for one Apply.
type ringCtx struct {
	t   *Target
	ctx context.Context
	st  *targets.ApplyStats
	// cache is the ring table's content (address → backend), read on the
	// first move and kept current by every ring write of the Apply.
	cache map[uint32]uint32
	// moved are regions copied elsewhere whose entries wait for a grace
	// before they are deleted.
	moved []ringpool.Span
}

func (t *Target) pool() *ringpool.Pool {
	if t.rings == nil {
		t.rings = ringpool.NewBanked(t.poolSize(), t.tr.RingBank())
	}
	return t.rings
}

// poolSize is the ring table's size, or the whole address space when the
// P4Info gives none (an exact-match table's addresses are any 32 bits).
func (t *Target) poolSize() uint32 {
	if n := t.RingEntries(); n > 0 && n <= math.MaxUint32 {
		return uint32(n)
	}
	return math.MaxUint32
}

// adopt rebuilds the pool from a read-back's layout: the regions the rows
// point at, and those the slot-0 entries describe (when the read took the
// ring table). A read of the rows alone also keeps the regions this
// process gave halves that no row points at, where they still fit.
func (t *Target) adopt(lay *Layout, withRings bool) error {
	old := t.rings
	p := ringpool.NewBanked(t.poolSize(), t.tr.RingBank())
	for _, k := range sortedKeys(lay.Regions) {
		sp := lay.Regions[k]
		if err := p.Place(k, sp); err != nil {
			return fmt.Errorf("service %d's row: ring region [%d, %d): %w", k.Svc, sp.Base, sp.End(), err)
		}
	}
	if !withRings && old != nil {
		for _, k := range old.Keys() {
			if _, live := lay.Regions[k]; live {
				continue
			}
			if _, has := lay.Regions[ringpool.Key{Svc: k.Svc, Half: k.Half ^ 1}]; !has {
				continue // the service's row is gone: so is this half's purpose
			}
			sp, _ := old.Region(k)
			_ = p.Place(k, sp) // overlapping a live region: the read-back wins
		}
	}
	p.Rebuild()
	t.rings, t.layout = p, lay
	if withRings {
		t.strays = lay.Strays
	}
	return nil
}

func sortedKeys(m map[ringpool.Key]ringpool.Span) []ringpool.Key {
	ks := make([]ringpool.Key, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b ringpool.Key) int {
		return cmp.Or(cmp.Compare(a.Svc, b.Svc), cmp.Compare(a.Half, b.Half))
	})
	return ks
}

// rowPoints returns where the row of svc the switch holds points: its
// active half and ring base (ok false without a row).
func (t *Target) rowPoints(svc uint32) (half uint8, base uint32, ok bool) {
	e := t.rows[svc]
	if e == nil {
		return 0, 0, false
	}
	d, err := t.tr.Schema().Decode(e)
	if err != nil {
		return 0, 0, false
	}
	var m serviceMeta
	_ = unmarshalMeta(e, &m)
	return m.Half & 1, uint32(d.Uint("ring_base")), t.tr.ringSize(d) > 0
}

// wait is a grace: no packet that read a row before it still reads a
// ring entry after it.
func wait(ctx context.Context) error {
	select {
	case <-time.After(compiler.Grace):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// write sends updates in batches of the client's size, counting them as
// ring or service writes.
func (rc *ringCtx) write(table string, op compiler.Op, us []*p4v1.Update) error {
	size := max(rc.t.c.Options().BatchSize, 1)
	for i := 0; i < len(us); i += size {
		j := min(i+size, len(us))
		if err := rc.t.c.Write(rc.ctx, us[i:j]); err != nil {
			rc.t.unsure = true
			return err
		}
		rc.st.Batches++
		for _, u := range us[i:j] {
			rc.st.Bytes += proto.Size(u)
		}
		x := rc.st.Counts[table]
		x[op] += j - i
		rc.st.Counts[table] = x
		rc.st.Writes += j - i
	}
	return nil
}

func ringUpdate(typ p4v1.Update_Type, e *p4v1.TableEntry) *p4v1.Update {
	return &p4v1.Update{Type: typ, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: e}}}
}

// fill reads the ring table once into the cache.
func (rc *ringCtx) fill() error {
	if rc.cache != nil {
		return nil
	}
	tabs, err := rc.t.readRingTables(rc.ctx)
	if err != nil {
		return err
	}
	cache := map[uint32]uint32{}
	for _, re := range rc.t.tr.ringEntries(tabs) {
		d, err := rc.t.tr.Schema().Decode(re.e)
		if err != nil {
			return err
		}
		cache[rc.t.tr.ringAddrOf(re.bank, d)] = uint32(d.Uint("backend_id"))
	}
	rc.cache = cache
	return nil
}

// note keeps the cache current after ring writes that succeeded.
func (rc *ringCtx) note(cs []compiler.Change) {
	if rc.cache == nil {
		return
	}
	for _, c := range cs {
		if c.Ring == nil {
			continue
		}
		addr, err := ringAddr(rc.t.rings, ringpool.Key{Svc: c.Ring.ServiceID, Half: c.Ring.Half & 1}, c.Ring.Slot)
		if err != nil {
			continue
		}
		if c.Op == compiler.Delete {
			delete(rc.cache, addr)
		} else {
			rc.cache[addr] = c.Ring.BackendID
		}
	}
}

// Move copies k's entries from → to, then points k's row at the copy if
// it points at from (ringpool.Mover).
func (rc *ringCtx) Move(k ringpool.Key, from, to ringpool.Span) error {
	if err := rc.fill(); err != nil {
		return err
	}
	t := rc.t
	half, base, pointed := t.rowPoints(k.Svc)
	pointed = pointed && half == k.Half && base == from.Base
	if pointed && t.sealed[k.Svc] != "" {
		if _, err := t.reseal(rc.ctx, []uint32{k.Svc}, nil); err != nil {
			return fmt.Errorf("clear the ring seal of service %d before moving its ring: %w", k.Svc, err)
		}
		x := rc.st.Counts[compiler.TableService]
		x[compiler.Modify]++
		rc.st.Counts[compiler.TableService] = x
		rc.st.Writes++
	}
	var us []*p4v1.Update
	copied := map[uint32]uint32{}
	for s := uint32(0); s < from.N; s++ {
		v, ok := rc.cache[from.Base+s]
		if !ok {
			continue
		}
		e, err := t.tr.RingEntry(to.Base+s, v, true)
		if err != nil {
			return err
		}
		if s == 0 {
			if e.Metadata, err = json.Marshal(ringMeta{Svc: k.Svc, Half: k.Half, N: to.N}); err != nil {
				return err
			}
		}
		us = append(us, ringUpdate(p4v1.Update_INSERT, e))
		copied[to.Base+s] = v
	}
	if err := rc.write(compiler.TableRing, compiler.Insert, us); err != nil {
		return fmt.Errorf("copy %d entries: %w", len(us), err)
	}
	for a, v := range copied {
		rc.cache[a] = v
	}
	rc.moved = append(rc.moved, from)
	if !pointed {
		return nil
	}
	e, err := t.rebase(t.rows[k.Svc], to.Base)
	if err != nil {
		return fmt.Errorf("service %d: %w", k.Svc, err)
	}
	if err := rc.write(compiler.TableService, compiler.Modify, []*p4v1.Update{ringUpdate(p4v1.Update_MODIFY, e)}); err != nil {
		return fmt.Errorf("point service %d's row at its moved ring: %w", k.Svc, err)
	}
	t.rows[k.Svc], t.sealed[k.Svc] = e, ""
	return nil
}

// Grace waits until no packet can read what the rows pointed at before,
// then deletes the entries of the regions moved away, so that the space
// the pool frees next holds no entry (ringpool.Mover).
func (rc *ringCtx) Grace() error {
	if err := wait(rc.ctx); err != nil {
		return err
	}
	var us []*p4v1.Update
	var gone []uint32
	for _, sp := range rc.moved {
		for a := sp.Base; a < sp.End(); a++ {
			if _, ok := rc.cache[a]; !ok {
				continue
			}
			e, err := rc.t.tr.RingEntry(a, 0, false)
			if err != nil {
				return err
			}
			us = append(us, ringUpdate(p4v1.Update_DELETE, e))
			gone = append(gone, a)
		}
	}
	if err := rc.write(compiler.TableRing, compiler.Delete, us); err != nil {
		return fmt.Errorf("delete %d entries of moved rings: %w", len(us), err)
	}
	for _, a := range gone {
		delete(rc.cache, a)
	}
	rc.moved = nil
	return nil
}

// rebase returns a copy of a service entry pointing at base, its ring
// seal cleared.
func (t *Target) rebase(e *p4v1.TableEntry, base uint32) (*p4v1.TableEntry, error) {
	a, err := t.tr.Schema().Action(aSetService)
	if err != nil {
		return nil, err
	}
	p, err := runtime.Param(a, "ring_base")
	if err != nil {
		return nil, err
	}
	c, err := withRingSeal(e, "")
	if err != nil {
		return nil, err
	}
	c = proto.Clone(c).(*p4v1.TableEntry)
	for _, ap := range c.GetAction().GetAction().GetParams() {
		if ap.ParamId == p.Id {
			ap.Value = runtime.Uint(uint64(base))
			return c, nil
		}
	}
	return nil, errors.New("service entry without ring_base")
}

// deleteStrays deletes the ring entries a full read-back found outside
// every region, after a grace (one may be a ring a row left microseconds
// before this process started).
func (rc *ringCtx) deleteStrays() error {
	t := rc.t
	if len(t.strays) == 0 {
		return nil
	}
	if err := wait(rc.ctx); err != nil {
		return err
	}
	us := make([]*p4v1.Update, 0, len(t.strays))
	for _, a := range t.strays {
		e, err := t.tr.RingEntry(a, 0, false)
		if err != nil {
			return err
		}
		us = append(us, ringUpdate(p4v1.Update_DELETE, e))
	}
	if err := rc.write(compiler.TableRing, compiler.Delete, us); err != nil {
		return fmt.Errorf("%s: delete %d ring entries no row points at (left by a push cut short): %w", t.name, len(us), err)
	}
	for _, a := range t.strays {
		delete(rc.cache, a)
	}
	t.strays = nil
	return nil
}

// ringNeeds is what a diff asks of the pool: per half, the room its
// writes need, and what each service row points at in the end.
type ringNeeds struct {
	need      map[ringpool.Key]uint32 // highest slot written + 1, or the row's ring size
	lastWrite map[ringpool.Key]int    // index of the diff's last insert or modify of the half
	lastDel   map[ringpool.Key]int    // index of its last delete
	final     map[uint32]*compiler.ServiceRow
	deleted   map[uint32]bool // services whose rows the diff deletes
}

func needsOf(d compiler.Diff) *ringNeeds {
	n := &ringNeeds{need: map[ringpool.Key]uint32{}, lastWrite: map[ringpool.Key]int{}, lastDel: map[ringpool.Key]int{},
		final: map[uint32]*compiler.ServiceRow{}, deleted: map[uint32]bool{}}
	for i, c := range d.Changes {
		switch {
		case c.Ring != nil:
			k := ringpool.Key{Svc: c.Ring.ServiceID, Half: c.Ring.Half & 1}
			if c.Op == compiler.Delete {
				n.lastDel[k] = i
			} else {
				n.lastWrite[k] = i
				n.need[k] = max(n.need[k], c.Ring.Slot+1)
			}
		case c.Service != nil:
			if c.Op == compiler.Delete {
				delete(n.final, c.Service.ID)
				n.deleted[c.Service.ID] = true
				continue
			}
			n.final[c.Service.ID], n.deleted[c.Service.ID] = c.Service, false
		}
	}
	for _, s := range n.final {
		k := ringpool.Key{Svc: s.ID, Half: s.ActiveHalf & 1}
		if _, writes := n.lastWrite[k]; writes {
			n.need[k] = max(n.need[k], s.RingSize)
		}
	}
	return n
}

// place gives half k a region of at least n entries: first fit, a grace,
// or compaction (ringpool), or, for a half that holds a smaller one, a
// move of its entries to a larger one.
func (rc *ringCtx) place(k ringpool.Key, n uint32) error {
	p := rc.t.rings
	old, held := p.Region(k)
	if held && old.N >= n {
		return nil
	}
	var ps ringpool.Stats
	sp, err := p.Alloc(k, n, rc, &ps)
	if err != nil {
		var full *ringpool.FullError
		if errors.As(err, &full) {
			return fmt.Errorf("the ring table (%d entries, %d in use) has no room for %d more, even after compaction: %w", full.Size, full.Used, full.Need, err)
		}
		return err
	}
	if held {
		if err := rc.Move(k, old, sp); err != nil {
			return err
		}
		p.Quarantine(old)
	}
	return nil
}

// before places what a batch writes: the halves its ring inserts and
// modifies fill, and the regions its service rows point at.
func (rc *ringCtx) before(b *batch, n *ringNeeds) error {
	for _, c := range b.changes {
		var k ringpool.Key
		var size uint32
		switch {
		case c.Ring != nil && c.Op != compiler.Delete:
			k = ringpool.Key{Svc: c.Ring.ServiceID, Half: c.Ring.Half & 1}
			size = n.need[k]
		case c.Service != nil && c.Op != compiler.Delete && c.Service.RingSize > 0:
			k = ringpool.Key{Svc: c.Service.ID, Half: c.Service.ActiveHalf & 1}
			size = c.Service.RingSize
			// An empty ring still has its region: the row's base must
			// point at entries no other ring holds, so its lookups miss.
		default:
			continue
		}
		if err := rc.place(k, size); err != nil {
			return fmt.Errorf("%s: %w", rc.t.describe(c), err)
		}
	}
	return nil
}

// after frees the halves whose last entries a batch (written in full)
// deleted and that no row points at in the end: their space holds no
// entry, and the barrier before the deletes was the grace.
func (rc *ringCtx) after(b *batch, n *ringNeeds) {
	first := b.at
	p := rc.t.rings
	freed := false
	for i, c := range b.changes {
		if c.Ring == nil || c.Op != compiler.Delete {
			continue
		}
		k := ringpool.Key{Svc: c.Ring.ServiceID, Half: c.Ring.Half & 1}
		if n.lastDel[k] != first+i {
			continue
		}
		if w, ok := n.lastWrite[k]; ok && w > first+i {
			continue
		}
		if s, ok := n.final[k.Svc]; ok && s.ActiveHalf&1 == k.Half {
			continue
		}
		if _, ok := n.final[k.Svc]; !ok && !n.deleted[k.Svc] {
			if half, _, ok := rc.t.rowPoints(k.Svc); ok && half == k.Half {
				continue // the row the diff leaves alone points at it
			}
		}
		p.Release(k)
		freed = true
	}
	if freed && len(rc.moved) == 0 {
		p.Unquarantine()
	}
}

// slotZeroLast moves, in each run of deletes of one ring half, the
// delete of slot 0 to the end: slot 0 says whose region the entries are
// (ringMeta), so a read-back after a push cut short in between still
// finds the rest.
func slotZeroLast(d compiler.Diff) compiler.Diff {
	out := compiler.Diff{Changes: make([]compiler.Change, 0, len(d.Changes)), Barriers: d.Barriers}
	var held *compiler.Change
	flush := func() {
		if held != nil {
			out.Changes = append(out.Changes, *held)
			held = nil
		}
	}
	for i, c := range d.Changes {
		isDel := c.Ring != nil && c.Op == compiler.Delete
		if held != nil && (!isDel || c.Ring.ServiceID != held.Ring.ServiceID || c.Ring.Half != held.Ring.Half || slices.Contains(d.Barriers, i)) {
			flush()
		}
		if isDel && c.Ring.Slot == 0 {
			held = &d.Changes[i]
			continue
		}
		out.Changes = append(out.Changes, c)
	}
	flush()
	return out
}

// finish deletes what moves left behind, so that nothing the pool calls
// free holds an entry when the Apply returns.
func (rc *ringCtx) finish() error {
	if len(rc.moved) == 0 {
		return nil
	}
	if err := rc.Grace(); err != nil {
		return err
	}
	rc.t.rings.Unquarantine()
	return nil
}
