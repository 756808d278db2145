package bmv2

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/tick"
	"github.com/lbc-dev/lbc/runtime"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
)

// CPUPort is the port lb.p4 exchanges P4Runtime packet-outs and
// packet-ins on (its CPU_PORT): start simple_switch_grpc with
// --cpu-port 255.
const CPUPort = 255

// opClockProbe is the packet_out op that asks for the switch's clock.
const opClockProbe = 1

// ProbeTimeout bounds one clock probe's round trip.
const ProbeTimeout = 2 * time.Second

// ClockSample is one reading of the switch's clock by a clock probe: a
// packet-out that the program answers with a packet-in carrying its
// timestamp (lb.p4: ingress_global_timestamp in µs; p4/tna/lb.p4: the
// 48-bit global timestamp in ns).
type ClockSample struct {
	// Switch is the timestamp the program read.
	Switch uint64
	// At is the compile clock (targets.Clock) just before the probe left:
	// the switch read its clock no earlier than At. A deadline mapped from
	// this sample as Switch + (Deadline − At) is therefore never early,
	// and late by at most RTT.
	At time.Duration
	// RTT is the probe's round trip on the wall clock.
	RTT time.Duration
}

// DeadlineFunc turns a clock sample's switch timestamp and the time from
// it to a deadline into the value of set_backend's deadline parameter.
type DeadlineFunc func(switchNow uint64, remaining time.Duration) (uint64, error)

// BMv2Deadline is lb.p4's DeadlineFunc: microseconds of
// ingress_global_timestamp, rounded up.
func BMv2Deadline(switchNow uint64, remaining time.Duration) (uint64, error) {
	return tick.BMv2Deadline(switchNow, remaining)
}

// ErrNoClockProbe is returned when the switch does not answer a clock
// probe: the program has no packet_out/packet_in controller headers, or
// the switch has no CPU port.
var ErrNoClockProbe = errors.New("the switch did not answer the clock probe")

// ProbeClock reads the switch's clock: it sends up to three probes and
// keeps the sample with the shortest round trip (stopping early below
// 5 ms), so a mapped deadline is late by as little as the link allows.
func (t *Target) ProbeClock(ctx context.Context) (ClockSample, error) {
	var best ClockSample
	for i := 0; i < 3; i++ {
		s, err := t.probeOnce(ctx)
		if err != nil {
			return ClockSample{}, err
		}
		if i == 0 || s.RTT < best.RTT {
			best = s
		}
		if best.RTT < 5*time.Millisecond {
			break
		}
	}
	return best, nil
}

func (t *Target) probeOnce(ctx context.Context) (ClockSample, error) {
	sc := t.tr.Schema()
	out, err := sc.PacketMetadata("packet_out")
	if err != nil {
		return ClockSample{}, fmt.Errorf("%w: %w", ErrNoClockProbe, err)
	}
	in, err := sc.PacketMetadata("packet_in")
	if err != nil {
		return ClockSample{}, fmt.Errorf("%w: %w", ErrNoClockProbe, err)
	}
	md, err := out.Encode(runtime.U("op", opClockProbe))
	if err != nil {
		return ClockSample{}, err
	}
	// The payload carries a nonce to tell this probe's answer from a late
	// answer to an earlier one; padded to a minimum Ethernet frame.
	payload := make([]byte, 60)
	if _, err := rand.Read(payload[:8]); err != nil {
		return ClockSample{}, err
	}
	pctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	at := t.clock()
	sent := time.Now()
	p, err := t.c.Exchange(pctx, &p4v1.PacketOut{Payload: payload, Metadata: md}, func(p *p4v1.PacketIn) bool {
		return len(p.GetPayload()) >= 8 && binary.BigEndian.Uint64(p.GetPayload()) == binary.BigEndian.Uint64(payload)
	})
	switch {
	case err != nil && ctx.Err() != nil:
		return ClockSample{}, ctx.Err()
	case err != nil && pctx.Err() != nil:
		return ClockSample{}, fmt.Errorf("%w within %s (BMv2 needs --cpu-port %d; a Tofino switch its PCIe CPU port)", ErrNoClockProbe, ProbeTimeout, CPUPort)
	case err != nil:
		return ClockSample{}, fmt.Errorf("clock probe: %w", err)
	}
	v, err := in.Decode(p.GetMetadata())
	if err != nil {
		return ClockSample{}, fmt.Errorf("clock probe answer: %w", err)
	}
	if v["op"] != opClockProbe {
		return ClockSample{}, fmt.Errorf("clock probe answer: op %d, want %d", v["op"], opClockProbe)
	}
	ts, ok := v["timestamp"]
	if !ok {
		return ClockSample{}, fmt.Errorf("clock probe answer carries no timestamp")
	}
	return ClockSample{Switch: ts, At: at, RTT: time.Since(sent)}, nil
}

// deadlines returns the mapping of backend deadlines for a diff, probing
// the switch's clock once if a backend row written carries a deadline;
// nil when none does.
func (t *Target) deadlines(ctx context.Context, d compiler.Diff) (Deadlines, error) {
	need := false
	for _, c := range d.Changes {
		if c.Backend != nil && c.Op != compiler.Delete && c.Backend.Deadline != 0 {
			need = true
			break
		}
	}
	if !need {
		return nil, nil
	}
	s, err := t.ProbeClock(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: mapping backend deadlines (R-DRAIN, R-PERSIST-CAP) onto the switch's clock: %w", t.name, err)
	}
	t.lastProbe = s
	return func(b *compiler.BackendRow) (uint64, error) {
		v, err := t.deadlineFn(s.Switch, b.Deadline-s.At)
		if err != nil {
			return 0, fmt.Errorf("backend %q: %s deadline: %w", b.Name, b.DeadlineRule, err)
		}
		return v, nil
	}, nil
}

// LastProbe returns the clock sample the last Apply that wrote a deadline
// used (zero before).
func (t *Target) LastProbe() ClockSample { return t.lastProbe }
