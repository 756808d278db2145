package targets

import (
	"context"
	"time"

	"github.com/lbc-dev/lbc/compiler"
)

// ConntrackEntry is one conntrack entry in the IR's terms: what fleet
// nodes share (R-FLEET). IDs and epochs are the datapath's own.
type ConntrackEntry struct {
	ServiceID uint32
	// Kind is the tracking tuple (R-CT-3); fields of Tuple that it does
	// not cover are zero, and addresses are unmapped.
	Kind      compiler.TupleKind
	Tuple     compiler.Tuple
	BackendID uint32
	Epoch     uint32
	// Idle is how long ago the entry's flow was last seen (R-AGE).
	Idle time.Duration
	// Copy: WriteConntrack stored the entry and no packet of this
	// datapath has hit it since. The datapath clears it on the first hit
	// that refreshes the entry, so it tells a peer's copy from an entry
	// whose flow moved here without comparing clocks (R-FLEET).
	Copy bool
}

// ConntrackTarget is a datapath whose conntrack can be read and written
// from outside the packet path, so that fleet nodes can hand each other
// the entries that today's ring would not reproduce (R-FLEET).
type ConntrackTarget interface {
	// ReadConntrack returns the entries that are valid now: not aged out
	// (R-AGE), of their service's epoch (R-EPOCH), on a backend row the
	// datapath holds for that service and before its deadline (R-DRAIN,
	// R-PERSIST-CAP). The walk is not atomic.
	ReadConntrack(ctx context.Context) ([]ConntrackEntry, error)
	// WriteConntrack stores each entry as a copy (Copy set, last seen
	// Idle ago) and returns how many it stored. Where the datapath holds
	// a valid entry of the same epoch for the key, it stores nothing if
	// that entry was seen at least as recently; if that entry is on the
	// same backend, it only moves its last-seen time to the later one and
	// leaves Copy as it was (an entry this node's traffic refreshed stays
	// its own). Epoch and BackendID must be the datapath's current ones.
	WriteConntrack(ctx context.Context, es []ConntrackEntry) (int, error)
	// DeleteConntrack removes each entry's key when the stored entry is on
	// e.BackendID and is still a copy (no packet refreshed it since a
	// write stored it), and returns how many it removed.
	DeleteConntrack(ctx context.Context, es []ConntrackEntry) (int, error)
}
