package sim

import (
	"time"

	"github.com/lbc-dev/lbc/compiler"
)

// Key is a conntrack key: the service and the tracking tuple (R-TRK) of
// kind Kind. Fields of Tuple that Kind does not cover are zero and
// addresses are unmapped, so that equal flows give equal keys; build it
// with MakeKey.
type Key struct {
	ServiceID uint32
	Kind      compiler.TupleKind
	Tuple     compiler.Tuple
	// Epoch is the service's epoch when the key is looked up or stored
	// (R-EPOCH). Only a geometry that folds it into its signature (TNA)
	// reads it; the others key on the flow alone and leave the R-EPOCH
	// check to the datapath.
	Epoch uint32
}

// MakeKey returns the key of t's kind-tuple in service svc.
func MakeKey(svc uint32, kind compiler.TupleKind, t compiler.Tuple) Key {
	k := Key{ServiceID: svc, Kind: kind, Tuple: compiler.Tuple{Src: t.Src.Unmap(), Dst: t.Dst.Unmap()}}
	if kind >= compiler.Tuple3 {
		k.Tuple.Proto = t.Proto
	}
	if kind == compiler.Tuple5 {
		k.Tuple.SrcPort, k.Tuple.DstPort = t.SrcPort, t.DstPort
	}
	return k
}

// Hash is the R-HASH hash of the key's tuple (what a target that indexes
// its table by the tracking tuple computes).
func (k Key) Hash() uint32 { return k.Tuple.Hash(k.Kind) }

// Entry is what a conntrack entry records.
type Entry struct {
	BackendID uint32
	// Epoch is the service's epoch when the entry was created (R-EPOCH).
	Epoch uint32
	// LastSeen is the virtual time of the last packet that matched or
	// created it (R-AGE).
	LastSeen time.Duration
	// Expiry is the tick at which the entry expires, where the target
	// stores that instead of a last-seen time (TNA); set by the
	// geometry's lookup, zero elsewhere.
	Expiry uint32 `json:"-"`
	// Copy marks an entry WriteConntrack stored (a fleet peer's, R-FLEET)
	// that no packet has refreshed since.
	Copy bool `json:"copy,omitempty"`
}

// Conntrack is a conntrack table geometry. It only stores: the datapath
// applies every validity rule (R-AGE, R-EPOCH, R-DRAIN, R-PERSIST) to what
// Lookup returns, so a geometry models exactly what its target's memory
// holds, nothing more.
//
// A geometry with finite capacity may lose or overwrite other entries in
// Store (an LRU map evicts its least recently used entry; a register array
// overwrites the slot the key hashes to); Lookup must then miss for them,
// as the target would. Lookup must not change what is stored: a lookup
// that does not refresh (an ICMP error's, R-CT-4 aside) calls only Lookup;
// a hit that refreshes is followed by a Store of the same key. An LRU
// geometry that counts a lookup as a use should do so in Store.
type Conntrack interface {
	// Lookup returns the raw stored entry of k.
	Lookup(k Key) (Entry, bool)
	// Store inserts or overwrites the entry of k.
	Store(k Key, e Entry)
	// Len is the number of stored entries.
	Len() int
}

// Exact is the default geometry: an unbounded table keyed by the exact
// tracking tuple, which never collides or evicts.
type Exact struct {
	m map[Key]Entry
}

// NewExact returns an empty exact table.
func NewExact() *Exact { return &Exact{m: map[Key]Entry{}} }

// Lookup implements Conntrack.
func (t *Exact) Lookup(k Key) (Entry, bool) {
	k.Epoch = 0
	e, ok := t.m[k]
	return e, ok
}

// Store implements Conntrack.
func (t *Exact) Store(k Key, e Entry) {
	k.Epoch = 0
	t.m[k] = e
}

// Len implements Conntrack.
func (t *Exact) Len() int { return len(t.m) }
