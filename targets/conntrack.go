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
	// WriteConntrack stores each entry (last seen Idle ago) unless the
	// datapath holds a valid entry for its key that was seen more
	// recently, and returns how many it stored. Epoch and BackendID must
	// be the datapath's current ones.
	WriteConntrack(ctx context.Context, es []ConntrackEntry) (int, error)
	// DeleteConntrack removes each entry's key when the stored entry is on
	// e.BackendID and has been idle at least e.Idle (no packet refreshed
	// it since it was written), and returns how many it removed.
	DeleteConntrack(ctx context.Context, es []ConntrackEntry) (int, error)
	// ConntrackTick is the unit of the datapath's last-seen times: a
	// written Idle is rounded down to it, a read one is whole ticks (the
	// XDP program's jiffies, 4 ms at HZ=250; 1 ns for the sim). An Idle
	// read back differs from the one written plus the time since by less
	// than two ticks.
	ConntrackTick() time.Duration
}
