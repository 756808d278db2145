package targets

import (
	"context"
	"time"

	"github.com/lbc-dev/lbc/compiler"
)

// Target is a datapath that holds compiled tables.
type Target interface {
	// Name identifies the target in output ("sim", "xdp eth1", "bmv2 127.0.0.1:9559").
	Name() string
	// Read returns the tables the datapath holds now, as an IR (an empty IR
	// for an empty datapath), so that a push writes only the difference.
	Read(ctx context.Context) (*compiler.IR, error)
	// Apply performs the diff's changes in their order. A change the
	// datapath rejects is reported by name in the error; what was applied
	// stays applied, and the next Read shows it.
	Apply(ctx context.Context, d compiler.Diff) (ApplyStats, error)
	// Close releases the connection or handles; the datapath stays programmed.
	Close() error
}

// ApplyStats reports what an Apply wrote.
type ApplyStats struct {
	// Counts per table: [insert, modify, delete].
	Counts   map[string][3]int
	Writes   int // entity writes performed
	Batches  int // round trips (RPCs, syscalls)
	Bytes    int // encoded size, where the target knows it
	Duration time.Duration
}

// RingRoom is a target whose ring table has a fixed size: a push to it
// takes the services whose rings change in waves that fit
// (compiler.DiffWithin), so that it never needs more spare room than the
// largest changing ring.
type RingRoom interface {
	// RingEntries is how many ring entries the datapath holds; 0 when
	// it does not know.
	RingEntries() int
}

// Sized is a target that knows the size of its tables: a push to it is
// checked with compiler.CheckTransition before anything is written, and a
// configuration with compiler.CheckCapacity before it is taken.
type Sized interface {
	Capacity() (compiler.Capacity, error)
}

// DiffFor is the diff from held to want for t: compiler.DiffWithin when t
// is a RingRoom, compiler.DiffIR otherwise, and for an EntryMetadata
// target the modifies of rows whose stored names or flags changed.
func DiffFor(t Target, held, want *compiler.IR) compiler.Diff {
	var d compiler.Diff
	if r, ok := t.(RingRoom); ok {
		d = compiler.DiffWithin(held, want, r.RingEntries())
	} else {
		d = compiler.DiffIR(held, want)
	}
	if _, ok := t.(EntryMetadata); ok {
		d.Changes = append(d.Changes, compiler.MetaChanges(held, want)...)
	}
	return d
}

// EntryMetadata is a target that stores names, decisions, weights and
// failover flags in its entries and reads them back from there (P4
// metadata): DiffFor adds the modifies that keep them true
// (compiler.MetaChanges), so that status shows what is in force.
type EntryMetadata interface {
	MetadataInEntries()
}

// PacketTarget is a datapath that can run one packet for replay and
// differential tests.
type PacketTarget interface {
	// Process runs pkt at virtual time now and returns what the datapath did.
	Process(ctx context.Context, pkt Packet, now time.Duration) (Verdict, error)
}

// Clock reads the compile clock: the clock of compiler.Input.Now and of
// every BackendRow.Deadline. A target that enforces deadlines maps one onto
// its own clock when it writes a backend row, as
//
//	own deadline = own now + (Deadline − Clock()), rounded up to its tick,
//
// so that an expiry may come late by the tick and the write's latency,
// never early (design decision 8), and keeps the compile-clock value where
// Read can return it unchanged.
type Clock func() time.Duration

// WallClock is the controller's compile clock: time since the Unix epoch.
func WallClock() time.Duration { return time.Duration(time.Now().UnixNano()) }
