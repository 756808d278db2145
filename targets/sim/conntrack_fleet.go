package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lbc-dev/lbc/targets"
)

// The conntrack read and written from outside the packet path, as fleet
// nodes do to share their exceptions (R-FLEET). Only a geometry that can
// list and delete its entries (Exact) supports it.

// Ranger is a geometry whose entries can be listed and deleted.
type Ranger interface {
	// Range calls fn with every stored entry until fn returns false.
	Range(fn func(Key, Entry) bool)
	// Delete removes k's entry.
	Delete(k Key)
}

// Range implements Ranger.
func (t *Exact) Range(fn func(Key, Entry) bool) {
	for k, e := range t.m {
		if !fn(k, e) {
			return
		}
	}
}

// Delete implements Ranger.
func (t *Exact) Delete(k Key) { delete(t.m, k) }

var _ targets.ConntrackTarget = (*Datapath)(nil)

func (d *Datapath) ranger() (Ranger, error) {
	r, ok := d.ct.(Ranger)
	if !ok {
		return nil, fmt.Errorf("%s: its conntrack geometry (%T) cannot list its entries", d.Name(), d.ct)
	}
	return r, nil
}

func (d *Datapath) ownNow() (time.Duration, error) {
	if d.opts.Now == nil {
		return 0, errors.New(d.Name() + ": no clock (sim.Options.Now) to age conntrack entries by")
	}
	return d.opts.Now(), nil
}

// live reports whether a stored entry is valid at now by every rule but
// R-PERSIST, which depends on the packet (as the XDP datapath counts its
// sessions).
func (d *Datapath) live(k Key, e Entry, now time.Duration) bool {
	svc := d.services[k.ServiceID]
	if svc == nil || e.Epoch != svc.Epoch {
		return false
	}
	if old, _ := d.aged(e, now, time.Duration(svc.IdleTimeoutSec)*time.Second); old {
		return false
	}
	b := d.backends[e.BackendID]
	return b != nil && b.ServiceID == svc.ID && !d.expired(b, now)
}

// ConntrackAt returns the entries valid at virtual time now.
func (d *Datapath) ConntrackAt(now time.Duration) ([]targets.ConntrackEntry, error) {
	r, err := d.ranger()
	if err != nil {
		return nil, err
	}
	var out []targets.ConntrackEntry
	r.Range(func(k Key, e Entry) bool {
		if d.live(k, e, now) {
			out = append(out, targets.ConntrackEntry{ServiceID: k.ServiceID, Kind: k.Kind, Tuple: k.Tuple, BackendID: e.BackendID, Epoch: e.Epoch, Idle: now - e.LastSeen, Copy: e.Copy})
		}
		return true
	})
	return out, nil
}

// WriteConntrackAt stores each entry as a copy last seen Idle before now,
// unless its backend is not held or a live entry of the same epoch for
// its key was seen at least as recently; over a live entry on the same
// backend it only moves the last-seen time and keeps the entry's Copy. It
// returns how many it stored.
func (d *Datapath) WriteConntrackAt(now time.Duration, es []targets.ConntrackEntry) int {
	n := 0
	for _, e := range es {
		if b := d.backends[e.BackendID]; b == nil || b.ServiceID != e.ServiceID {
			continue
		}
		k := MakeKey(e.ServiceID, e.Kind, e.Tuple)
		ls := now - e.Idle
		copied := true
		if old, ok := d.ct.Lookup(k); ok && old.Epoch == e.Epoch && d.live(k, old, now) {
			if old.LastSeen >= ls {
				continue
			}
			copied = old.Copy || old.BackendID != e.BackendID
		}
		d.ct.Store(k, Entry{BackendID: e.BackendID, Epoch: e.Epoch, LastSeen: ls, Copy: copied})
		n++
	}
	return n
}

// ReadConntrack implements targets.ConntrackTarget at Options.Now.
func (d *Datapath) ReadConntrack(ctx context.Context) ([]targets.ConntrackEntry, error) {
	now, err := d.ownNow()
	if err != nil {
		return nil, err
	}
	return d.ConntrackAt(now)
}

// WriteConntrack implements targets.ConntrackTarget at Options.Now.
func (d *Datapath) WriteConntrack(ctx context.Context, es []targets.ConntrackEntry) (int, error) {
	now, err := d.ownNow()
	if err != nil {
		return 0, err
	}
	if _, err := d.ranger(); err != nil {
		return 0, err
	}
	return d.WriteConntrackAt(now, es), nil
}

// DeleteConntrack implements targets.ConntrackTarget: it removes each
// entry's key when the stored entry is on e.BackendID and is still a
// copy.
func (d *Datapath) DeleteConntrack(ctx context.Context, es []targets.ConntrackEntry) (int, error) {
	r, err := d.ranger()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range es {
		k := MakeKey(e.ServiceID, e.Kind, e.Tuple)
		if old, ok := d.ct.Lookup(k); ok && old.BackendID == e.BackendID && old.Copy {
			r.Delete(k)
			n++
		}
	}
	return n, nil
}
