package targets

import (
	"context"

	"github.com/lbc-dev/lbc/compiler"
)

// Counters are a datapath's own counters, cumulative since it was loaded.
// Maps are keyed by the IR's service and backend IDs.
type Counters struct {
	Services map[uint32]ServiceCounters
	Backends map[uint32]BackendCounters
	// Drops by reason (DropNoBackends, DropMalformed, ...).
	Drops map[string]uint64
	// FallbackPunts counts packets sent out the fallback port (P4 targets:
	// fragments and protocols the switch does not parse).
	FallbackPunts uint64
	// TooBig counts packets answered with ICMP fragmentation needed or
	// packet too big instead of being forwarded (R-MTU; XDP).
	TooBig uint64
	// CTRefused counts packets of flows refused a conntrack entry because
	// every slot they may take held a live entry (R-CT-CAP: the TNA
	// program's ct_refused; such a flow is forwarded by the ring).
	// HasCTRefused says whether the datapath counts them: the v1model
	// program evicts its least recently seen way instead, and a TNA P4Info
	// compiled before the counter existed has none.
	CTRefused    uint64
	HasCTRefused bool
}

// ServiceCounters are one service's counters.
type ServiceCounters struct {
	Packets, Bytes, NewConnections uint64
	// ICMPErrorMisses counts ICMP errors for the service that quote a
	// flow with no conntrack entry, so went to the backend the ring chose
	// for it (R-CT-3); NewConnections does not count them. The P4 programs
	// and XDP count them; other datapaths leave 0.
	ICMPErrorMisses uint64
	// Sessions is the number of live conntrack entries, where the datapath
	// can count them; HasSessions says whether it did (a datapath that
	// cannot count them must not report 0: the GSLB's maxSessions step
	// would take it for an idle site).
	Sessions    uint64
	HasSessions bool
}

// BackendCounters are one backend's counters.
type BackendCounters struct {
	Packets, Bytes, NewConnections uint64
}

// CounterTarget is a Target that can read its counters; `lbc run` exports
// them as Prometheus metrics and in `lbc status`.
type CounterTarget interface {
	Counters(ctx context.Context) (Counters, error)
}

// CounterStepper is a CounterTarget that reads its counters a piece at a
// time, each piece one request to the datapath (one counter array), so
// that a reader that holds the target between pieces only can let a push
// go first: a whole read of a switch's counters is tens of thousands of
// cells and takes long enough to hold a push up.
type CounterStepper interface {
	CounterTarget
	// CounterRead starts a read of the counters of ir's services and
	// backends (the IR the caller maps the counters to names with; the
	// datapath's own tables are not read back).
	CounterRead(ir *compiler.IR) CounterRead
}

// CounterRead is one read of a datapath's counters, in steps.
type CounterRead interface {
	// Step reads the next piece; done is true once there is nothing more
	// to read. A failed step ends the read.
	Step(ctx context.Context) (done bool, err error)
	// Counters is what the steps read, once done.
	Counters() Counters
}

// NewCounters returns Counters with its maps made.
func NewCounters() Counters {
	return Counters{Services: map[uint32]ServiceCounters{}, Backends: map[uint32]BackendCounters{}, Drops: map[string]uint64{}}
}

// FailedCounterRead is a CounterRead whose first step fails with err.
func FailedCounterRead(err error) CounterRead { return failedRead{err} }

type failedRead struct{ err error }

func (f failedRead) Step(context.Context) (bool, error) { return true, f.err }
func (f failedRead) Counters() Counters                 { return NewCounters() }
