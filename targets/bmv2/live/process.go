package live

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/tick"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/targets/xdp"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
)

type p4Update = p4v1.Update

func modify(e *p4v1.TableEntry) *p4v1.Update {
	return &p4v1.Update{Type: p4v1.Update_MODIFY, Entity: &p4v1.Entity{Entity: &p4v1.Entity_TableEntry{TableEntry: e}}}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// counterIDs are lb.p4's counters this package reads.
type counterIDs struct {
	newConns, icmpMisses, drops             uint32
	newConnsSize, icmpMissesSize, dropsSize int64
}

func lookupCounters(sc *runtime.Schema) (counterIDs, error) {
	var c counterIDs
	for _, x := range []struct {
		name string
		id   *uint32
		size *int64
	}{{"service_new_conns", &c.newConns, &c.newConnsSize}, {"service_icmp_error_misses", &c.icmpMisses, &c.icmpMissesSize}, {"drops", &c.drops, &c.dropsSize}} {
		ct, err := sc.Counter(x.name)
		if err != nil {
			return c, err
		}
		*x.id, *x.size = ct.Preamble.Id, ct.Size
	}
	return c, nil
}

// serviceCell names one service's cell of a per-service counter: the
// packets that selected a backend afresh for a tracked flow (entries
// created: service_new_conns; ICMP errors about a flow without a valid
// entry: service_icmp_error_misses).
type serviceCell struct {
	icmp bool
	svc  uint32
}

// cellOf is the counter cell that tells whether pkt, of service svc,
// selected a backend afresh.
func cellOf(pkt targets.Packet, svc *compiler.ServiceRow) serviceCell {
	return serviceCell{icmp: pkt.Proto == compiler.IPProtoICMP || pkt.Proto == compiler.IPProtoICMPv6, svc: svc.ID}
}

func (s *Switch) readCell(ctx context.Context, c serviceCell) (int64, error) {
	s.stats.CounterReads++
	id, size, name := s.ctrs.newConns, s.ctrs.newConnsSize, "service_new_conns"
	if c.icmp {
		id, size, name = s.ctrs.icmpMisses, s.ctrs.icmpMissesSize, "service_icmp_error_misses"
	}
	idx := int64(c.svc) % size
	ents, err := s.tgt.Client().Read(ctx, &p4v1.Entity{Entity: &p4v1.Entity_CounterEntry{CounterEntry: &p4v1.CounterEntry{
		CounterId: id, Index: &p4v1.Index{Index: idx}}}})
	if err != nil {
		return 0, fmt.Errorf("read %s[%d]: %w", name, idx, err)
	}
	for _, e := range ents {
		if ce := e.GetCounterEntry(); ce != nil && ce.GetIndex().GetIndex() == idx {
			return ce.GetData().GetPacketCount(), nil
		}
	}
	return 0, fmt.Errorf("read %s[%d]: no such cell in the answer", name, idx)
}

func (s *Switch) readDrops(ctx context.Context) (map[int64]int64, error) {
	s.stats.CounterReads++
	cells, err := s.tgt.Client().ReadCounter(ctx, s.ctrs.drops)
	if err != nil {
		return nil, fmt.Errorf("read drops: %w", err)
	}
	m := map[int64]int64{}
	for _, c := range cells {
		m[c.Index] = c.Packets
	}
	return m, nil
}

// ErrFreeClock is the error of a packet the free clock cannot map exactly.
var ErrFreeClock = errors.New("free clock")

// Process implements targets.PacketTarget: it maps now onto the switch's
// clock (see Clock), injects the packet and reports what came out.
func (s *Switch) Process(ctx context.Context, pkt targets.Packet, now time.Duration) (targets.Verdict, error) {
	if err := s.clock(ctx, now); err != nil {
		return targets.Verdict{}, err
	}
	return s.run(ctx, pkt, s.opts.Wait)
}

// virtualNow is the compile clock of a replay on this switch, the clock
// that backend deadlines are dated on (bmv2.Options.Clock): paced, the
// real time since the anchor (set here at virtual 0 when no packet has
// run yet); free, the virtual time of the last packet.
func (s *Switch) virtualNow() time.Duration {
	if !s.started {
		s.anchorAt(0)
	}
	if s.opts.Clock == ClockFree {
		return s.lastNow
	}
	return time.Since(s.anchor)
}

func (s *Switch) anchorAt(now time.Duration) {
	s.started = true
	s.anchor = time.Now().Add(-now)
	s.first, s.firstReal, s.lastNow = now, time.Now(), now
}

// Free-clock deadline values: set_backend's deadline as the switch then
// holds it. On the free clock the switch's own clock does not follow the
// trace's, so the clock probe's mapping would put every deadline far past
// the packets that should see it passed; instead, before each packet, the
// row of every backend with a deadline is written as passed (1 µs: every
// timestamp is past it) or not yet (the largest 48-bit value) as the
// trace's time says, with lb.p4's rounding (a deadline passes at its
// microsecond, rounded up). The switch still decides each hit from the
// row's deadline and its own clock; only the clock mapping, which the
// paced clock and targets/bmv2's tests cover, is left out.
const (
	deadlinePassed  = uint64(1)
	deadlinePending = uint64(1)<<tick.BMv2TimestampBits - 1
)

// freeDeadlines writes, on the free clock, the deadline rows that the
// trace's time now puts on the other side of their deadline.
func (s *Switch) freeDeadlines(ctx context.Context, now time.Duration) error {
	if s.ir == nil {
		return nil
	}
	var ups []*p4Update
	for i := range s.ir.Backends {
		b := &s.ir.Backends[i]
		if b.Deadline == 0 {
			continue
		}
		want := deadlinePending
		if now/tick.BMv2 >= (b.Deadline+tick.BMv2-1)/tick.BMv2 {
			want = deadlinePassed
		}
		if s.freeDL[b.ID] == want {
			continue
		}
		e, err := s.tgt.Translator().BackendEntry(b, [2]uint32{s.ir.NextServiceID, s.ir.NextBackendID}, want, true)
		if err != nil {
			return err
		}
		ups = append(ups, modify(e))
		s.freeDL[b.ID] = want
	}
	if len(ups) == 0 {
		return nil
	}
	if err := s.tgt.Client().Write(ctx, ups); err != nil {
		clear(s.freeDL) // unknown now: write them all again
		return fmt.Errorf("free clock: backend deadlines: %w", err)
	}
	return nil
}

func (s *Switch) clock(ctx context.Context, now time.Duration) error {
	if !s.started {
		s.anchorAt(now)
	}
	s.lastNow = now
	switch s.opts.Clock {
	case ClockPaced:
		d := time.Until(s.anchor.Add(now))
		if d <= 0 {
			s.stats.MaxLag = max(s.stats.MaxLag, -d)
			return nil
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	case ClockFree:
		if s.minIdle == 0 {
			return nil
		}
		if span := now - s.first; span >= s.minIdle {
			return fmt.Errorf("%w: the trace spans %s, not less than the idle timeout %s of service %q: conntrack would age in the trace but not on the switch; use the paced clock", ErrFreeClock, span, s.minIdle, s.svcName)
		}
		if run := time.Since(s.firstReal); run >= s.minIdle-time.Second {
			return fmt.Errorf("%w: the run has taken %s, close to the idle timeout %s of service %q: entries could age on the switch but not in the trace; use the paced clock", ErrFreeClock, run.Round(time.Millisecond), s.minIdle, s.svcName)
		}
	}
	if s.opts.Clock == ClockFree {
		return s.freeDeadlines(ctx, now)
	}
	return nil
}

// run injects one packet and waits up to wait for its fate.
func (s *Switch) run(ctx context.Context, pkt targets.Packet, wait time.Duration) (targets.Verdict, error) {
	frame, err := xdp.BuildPacket(pkt)
	if err != nil {
		// No frame can carry it (the XDP replay reports the same).
		return targets.Verdict{Action: targets.Drop, DropReason: targets.DropMalformed}, nil
	}
	s.stats.Packets++
	// Where the switch will look: the VIP tables hold the IR's VIP rows,
	// and only the flows of unfragmented TCP and UDP and of ICMP errors
	// quoting them reach them (the rest falls back).
	var svc *compiler.ServiceRow
	if f, ok := switchFlow(pkt); ok {
		if v, ok := s.ir.Lookup(f.Dst, f.Proto, f.DstPort); ok {
			svc = s.ir.Service(v.ServiceID)
		}
	}
	if svc != nil {
		c := cellOf(pkt, svc)
		if _, ok := s.newConns[c]; !ok {
			n, err := s.readCell(ctx, c)
			if err != nil {
				return targets.Verdict{}, err
			}
			s.newConns[c] = n
		}
	}
	// Anything still queued is nobody's outcome.
	for {
		if _, _, ok := s.io.read(); !ok {
			break
		}
		s.stats.Strays++
	}
	if err := s.io.send(frame); err != nil {
		return targets.Verdict{}, fmt.Errorf("inject on port %d: %w", PortClient, err)
	}
	deadline := time.Now().Add(wait)
	step := time.Millisecond
	for {
		f, port, ok, err := s.io.recv(step)
		if err != nil {
			return targets.Verdict{}, err
		}
		if ok {
			v, matched, err := s.classify(ctx, pkt, svc, frame, f, port)
			if err != nil {
				return v, err
			}
			if matched {
				return v, nil
			}
			s.stats.Strays++
			continue
		}
		// Nothing yet: dropped, or still in the switch?
		drops, err := s.readDrops(ctx)
		if err != nil {
			return targets.Verdict{}, err
		}
		for idx, n := range drops {
			if n > s.drops[idx] {
				s.drops = drops
				v := targets.Verdict{Action: targets.Drop, DropReason: bmv2.DropReason(idx)}
				if svc != nil {
					v.ServiceID, v.Service = svc.ID, svc.Name
					v.CT = notHit(pkt, svc)
				}
				return v, nil
			}
		}
		if time.Now().After(deadline) {
			return targets.Verdict{}, fmt.Errorf("packet %v → %v proto %s: nothing left the switch and no drop was counted within %s", pkt.Src, pkt.Dst, compiler.ProtoName(pkt.Proto), wait)
		}
		step = min(2*step, 50*time.Millisecond)
	}
}

// switchFlow is the flow lb.p4 decides pkt by: an unfragmented TCP or UDP
// packet's own, or for an ICMP error quoting a TCP or UDP packet of its
// family the quoted packet reversed (the client's flow). ok is false for
// what the switch sends to the fallback unlooked-at or drops as malformed.
func switchFlow(pkt targets.Packet) (compiler.Tuple, bool) {
	if pkt.Fragmented() {
		return compiler.Tuple{}, false
	}
	switch pkt.Proto {
	case compiler.IPProtoTCP, compiler.IPProtoUDP:
		return pkt.Tuple(), true
	case compiler.IPProtoICMP, compiler.IPProtoICMPv6:
		f := pkt.QuotedFlow()
		if !pkt.IsICMPError() || pkt.Inner == nil || (f.Proto != compiler.IPProtoTCP && f.Proto != compiler.IPProtoUDP) {
			return compiler.Tuple{}, false
		}
		if v4 := pkt.Src.Unmap().Is4(); f.Src.Is4() != v4 || f.Dst.Is4() != v4 {
			return compiler.Tuple{}, false
		}
		return f, true
	}
	return compiler.Tuple{}, false
}

// notHit is the conntrack outcome of a packet that did not hit: R-CT-3
// untracked, R-CT-1/2 new, else a miss. An ICMP error's is its flow's.
func notHit(pkt targets.Packet, svc *compiler.ServiceRow) string {
	f, _ := switchFlow(pkt)
	if svc.Classes[compiler.ClassOf(f.Proto)].Track == compiler.TupleNone {
		return targets.CTUntracked
	}
	if pkt.IsSYN() && svc.SynNew {
		return targets.CTNew
	}
	return targets.CTMiss
}

// l2Len is the length of a frame's Ethernet header: 18 with one 802.1Q
// tag, else 14.
func l2Len(frame []byte) int {
	if len(frame) >= 18 && binary.BigEndian.Uint16(frame[12:]) == 0x8100 {
		return 18
	}
	return 14
}

// punted reports whether the switch may have sent pkt to the fallback
// port only after its conntrack step, because it was too big to
// encapsulate (R-MTU): an unfragmented TCP or UDP packet of a service
// that does not send the whole session to the fallback (2- and 3-tuple
// sessions go there unprocessed, R-FRAG-CFG).
func punted(pkt targets.Packet, svc *compiler.ServiceRow) bool {
	f, ok := switchFlow(pkt)
	if svc == nil || !ok {
		return false
	}
	t := svc.Classes[compiler.ClassOf(f.Proto)].Track
	return t != compiler.Tuple2 && t != compiler.Tuple3
}

// classify reads one frame that left port port after in was injected.
// matched is false for a frame that is not in's outcome. A tagged packet
// must leave with its tag (R-VLAN): frames are compared tag included, and
// an encapsulated packet must carry the tag in front of its outer header.
func (s *Switch) classify(ctx context.Context, pkt targets.Packet, svc *compiler.ServiceRow, in, f []byte, port int) (targets.Verdict, bool, error) {
	l2 := l2Len(in)
	ip := in[l2:]
	switch port {
	case PortFallback:
		if !bytes.Equal(f, in) {
			return targets.Verdict{}, false, nil
		}
		if punted(pkt, svc) {
			// R-MTU: the packet was selected for, and may have created a
			// conntrack entry, before it turned out too big. The switch
			// shows no backend for it, nor does the model; read the
			// service's new-connections cell all the same, so that the
			// next packet's outcome counts only its own.
			if _, err := s.ctOutcome(ctx, pkt, svc); err != nil {
				return targets.Verdict{}, false, err
			}
		}
		return targets.Verdict{Action: targets.Fallback}, true, nil
	case PortClient:
		if len(f) > l2 && bytes.Equal(f[l2:], ip) {
			return targets.Verdict{}, false, fmt.Errorf("packet %v → %v came back out of the client port", pkt.Src, pkt.Dst)
		}
		return targets.Verdict{}, false, nil
	}
	if len(f) < l2 || l2Len(f) != l2 || !bytes.Equal(f[12:l2-2], in[12:l2-2]) {
		return targets.Verdict{}, false, nil // not this packet's tag (or lack of one)
	}
	var outer netip.Addr
	o := f[l2:] // the outer (or only) IP header
	switch et := binary.BigEndian.Uint16(f[l2-2:]); {
	case et == 0x0800 && len(o) >= 20 && (o[9] == compiler.IPProtoIPIP || o[9] == compiler.IPProtoIPv6) && bytes.Equal(o[20:], ip):
		outer = netip.AddrFrom4([4]byte(o[16:20]))
	case et == 0x86dd && len(o) >= 40 && (o[6] == compiler.IPProtoIPIP || o[6] == compiler.IPProtoIPv6) && bytes.Equal(o[40:], ip):
		outer = netip.AddrFrom16([16]byte(o[24:40]))
	case bytes.Equal(f[12:], in[12:]) && bytes.Equal(f[6:12], in[6:12]):
		// The packet itself: routed (not ours), or L2 DSR.
		mac := [6]byte(f[0:6])
		if mac == NextHopMAC {
			return targets.Verdict{Action: targets.NotOurs}, true, nil
		}
		if svc == nil || svc.Encap != compiler.EncapKindL2DSR {
			return targets.Verdict{}, false, fmt.Errorf("packet %v → %v left with destination MAC %x, neither the next hop's nor an L2 DSR service's", pkt.Src, pkt.Dst, mac)
		}
		return s.forward(ctx, pkt, svc, func(b *compiler.BackendRow) bool { return b.MAC == mac }, fmt.Sprintf("MAC %x", mac))
	default:
		return targets.Verdict{}, false, nil
	}
	if svc == nil {
		return targets.Verdict{}, false, fmt.Errorf("packet %v → %v was encapsulated to %v, but the tables hold no service for it", pkt.Src, pkt.Dst, outer)
	}
	return s.forward(ctx, pkt, svc, func(b *compiler.BackendRow) bool { return b.IP.Unmap() == outer }, outer.String())
}

// forward names the backend a forwarded packet went to and reads the
// service's new-connections cell to tell a hit from a new entry.
func (s *Switch) forward(ctx context.Context, pkt targets.Packet, svc *compiler.ServiceRow, is func(*compiler.BackendRow) bool, where string) (targets.Verdict, bool, error) {
	var be *compiler.BackendRow
	for i := range s.ir.Backends {
		b := &s.ir.Backends[i]
		if b.ServiceID == svc.ID && is(b) {
			if be != nil {
				return targets.Verdict{}, false, fmt.Errorf("service %q: backends %q and %q both have %s: the switch's choice is ambiguous", svc.Name, be.Name, b.Name, where)
			}
			be = b
		}
	}
	if be == nil {
		return targets.Verdict{}, false, fmt.Errorf("packet %v → %v went to %s, no backend of service %q", pkt.Src, pkt.Dst, where, svc.Name)
	}
	v := targets.Verdict{Action: targets.Forward, ServiceID: svc.ID, Service: svc.Name, BackendID: be.ID, Backend: be.Name}
	ct, err := s.ctOutcome(ctx, pkt, svc)
	if err != nil {
		return v, false, err
	}
	v.CT = ct
	return v, true, nil
}

// ctOutcome reads the service's new-connections cell to tell a conntrack
// hit from a new entry for a packet the pipeline selected a backend for
// (for an ICMP error, which creates no entry, its ICMP-misses cell: a hit
// from a selection by the ring).
func (s *Switch) ctOutcome(ctx context.Context, pkt targets.Packet, svc *compiler.ServiceRow) (string, error) {
	c := cellOf(pkt, svc)
	n, err := s.readCell(ctx, c)
	if err != nil {
		return "", err
	}
	created := n - s.newConns[c]
	s.newConns[c] = n
	f, _ := switchFlow(pkt)
	tracked := svc.Classes[compiler.ClassOf(f.Proto)].Track != compiler.TupleNone
	switch {
	case !tracked && created == 0:
		return targets.CTUntracked, nil
	case tracked && created == 0:
		return targets.CTHit, nil
	case tracked && created == 1:
		return notHit(pkt, svc), nil
	}
	return "", fmt.Errorf("service %q: %d new connections counted for one packet (tracked: %v)", svc.Name, created, tracked)
}
