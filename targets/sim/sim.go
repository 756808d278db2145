package sim

import (
	"context"
	"net/netip"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// Options select the behaviour of a Datapath.
type Options struct {
	// Name is the datapath's name in output; default "sim".
	Name string
	// Conntrack is the table geometry; nil is an exact, unbounded table
	// keyed by the tracking tuple (NewExact).
	Conntrack Conntrack
	// Fallback gives P4-switch semantics: fragments, and every protocol
	// the switch does not parse (anything but TCP, UDP and ICMP errors),
	// get Action Fallback (sent out the fallback port unchanged) instead
	// of being processed (design decision 5); so do the sessions tracked
	// without ports (2- and 3-tuple) and the ICMP errors about them, ICMP
	// errors quoting a protocol other than TCP and UDP, and packets too
	// big to encapsulate (R-MTU). An ICMP error about a TCP or UDP flow
	// the switch handles is decided by the switch, by the flow's entry or
	// the ring, as without Fallback.
	Fallback bool
	// Clock reads the compile clock and Now the datapath's own (the
	// virtual time Process is given) when a backend row is written; the
	// datapath maps a deadline onto its clock as Now() + (Deadline −
	// Clock()), as every target does (targets.Clock). With either nil the
	// two clocks are one (replay, differential tests): a deadline is its
	// own.
	Clock targets.Clock
	Now   func() time.Duration
	// MTU is the datapath's own egress MTU, used when the IR gives none
	// (compiler.IR.MTU 0): XDP's is its interface's. Zero means
	// compiler.DefaultMTU (R-MTU).
	MTU uint16
	// Tick is the clock resolution of the modelled datapath (XDP: a
	// jiffy, 1/HZ), for R-AGE and deadlines alike: a deadline is rounded
	// up to a whole tick and now down, and an idle entry expires after
	// ⌈(idle − 1 ns)/Tick⌉ + 1 whole ticks, so an expiry comes at most one
	// tick late, never early (R-AGE, design decision 8). Zero is exact,
	// unless the geometry keeps its own time (an Ager or DeadlineChecker,
	// such as TNA).
	Tick time.Duration
}

// Datapath is the reference datapath. It is a targets.Target (it holds an
// IR, updated by Apply) and a targets.PacketTarget. It is not safe for
// concurrent use.
type Datapath struct {
	ir       *compiler.IR
	ct       Conntrack
	fallback bool
	opts     Options

	// deadlines maps backend IDs to their deadline on the compile clock
	// and on the datapath's own, mapped when the row was written.
	deadlines map[uint32]deadline

	// Indexes of ir, rebuilt by Apply.
	services map[uint32]*compiler.ServiceRow
	backends map[uint32]*compiler.BackendRow
	vips     map[compiler.VIPKey]uint32
}

var (
	_ targets.Target       = (*Datapath)(nil)
	_ targets.PacketTarget = (*Datapath)(nil)
)

// New returns an empty datapath (no services: every packet is not ours).
func New(opts Options) *Datapath {
	d := &Datapath{ct: opts.Conntrack, fallback: opts.Fallback, opts: opts, deadlines: map[uint32]deadline{}}
	if d.ct == nil {
		d.ct = NewExact()
	}
	d.setIR(&compiler.IR{})
	return d
}

// Name implements targets.Target.
func (d *Datapath) Name() string {
	if d.opts.Name != "" {
		return d.opts.Name
	}
	return "sim"
}

// Read implements targets.Target: a copy of the tables held.
func (d *Datapath) Read(ctx context.Context) (*compiler.IR, error) {
	return d.ir.Clone(), nil
}

// Apply implements targets.Target. The reference applies a diff at once:
// a packet sees the IR before or after it, never in between.
func (d *Datapath) Apply(ctx context.Context, diff compiler.Diff) (targets.ApplyStats, error) {
	start := time.Now()
	d.setIR(diff.Apply(d.ir))
	return targets.ApplyStats{Counts: diff.Counts(), Writes: len(diff.Changes), Batches: 1, Duration: time.Since(start)}, nil
}

// Commit records what a diff does not carry: the tunnel sources and MTU
// (datapath configuration rather than table rows), and the informational fields of the rows held
// (eligible set, decision and rule, weights) that explanations quote. It
// changes no forwarding decision. Callers that have the full IR call it
// after Apply.
func (d *Datapath) Commit(ir *compiler.IR) error {
	out := d.ir.Clone()
	out.TunnelSource4, out.TunnelSource6, out.MTU = ir.TunnelSource4, ir.TunnelSource6, ir.MTU
	out.NextServiceID, out.NextBackendID = ir.NextServiceID, ir.NextBackendID
	x := ir.Index()
	for i := range out.Services {
		if s := x.Service(out.Services[i].ID); s != nil {
			o := &out.Services[i]
			o.Decision, o.Rule, o.FailoverSide = s.Decision, s.Rule, s.FailoverSide
			o.Eligible = append([]string(nil), s.Eligible...)
		}
	}
	for i := range out.Backends {
		if b := x.Backend(out.Backends[i].ID); b != nil {
			out.Backends[i].Weight, out.Backends[i].Failover = b.Weight, b.Failover
			out.Backends[i].Name, out.Backends[i].DeadlineRule = b.Name, b.DeadlineRule
		}
	}
	d.setIR(out)
	return nil
}

// Close implements targets.Target.
func (d *Datapath) Close() error { return nil }

// IR returns the tables the datapath holds; the caller must not modify them.
func (d *Datapath) IR() *compiler.IR { return d.ir }

// Conntrack returns the conntrack table.
func (d *Datapath) Conntrack() Conntrack { return d.ct }

func (d *Datapath) setIR(ir *compiler.IR) {
	d.ir = ir
	dls := make(map[uint32]deadline)
	for i := range ir.Backends {
		b := &ir.Backends[i]
		if b.Deadline == 0 {
			continue
		}
		if old, ok := d.deadlines[b.ID]; ok && old.compile == b.Deadline {
			dls[b.ID] = old // unchanged: mapped when first written
			continue
		}
		own := b.Deadline
		if d.opts.Clock != nil && d.opts.Now != nil {
			own = d.opts.Now() + (b.Deadline - d.opts.Clock())
		}
		dls[b.ID] = deadline{compile: b.Deadline, own: own}
	}
	d.deadlines = dls
	d.services = make(map[uint32]*compiler.ServiceRow, len(ir.Services))
	for i := range ir.Services {
		d.services[ir.Services[i].ID] = &ir.Services[i]
	}
	d.backends = make(map[uint32]*compiler.BackendRow, len(ir.Backends))
	for i := range ir.Backends {
		d.backends[ir.Backends[i].ID] = &ir.Backends[i]
	}
	d.vips = make(map[compiler.VIPKey]uint32, len(ir.VIPs))
	for _, v := range ir.VIPs {
		d.vips[v.Key] = v.ServiceID
	}
}

// deadline is a backend's deadline on the compile clock and on the
// datapath's own.
type deadline struct{ compile, own time.Duration }

// DeadlineChecker is implemented by a geometry whose target keeps time in
// its own ticks (TNA): it says whether a backend deadline, mapped onto the
// datapath's clock, has passed at now as the target compares them.
type DeadlineChecker interface {
	DeadlineExpired(deadline, now time.Duration) bool
}

// expired reports whether backend b's deadline has passed at now: a
// conntrack hit on it is then a miss (design decision 8). It returns the
// deadline on the compile clock.
func (d *Datapath) expired(b *compiler.BackendRow, now time.Duration) bool {
	dl, ok := d.deadlines[b.ID]
	if !ok {
		return false
	}
	if c, ok := d.ct.(DeadlineChecker); ok {
		return c.DeadlineExpired(dl.own, now)
	}
	if tk := d.opts.Tick; tk > 0 {
		return floorDiv(now, tk) >= -floorDiv(-dl.own, tk)
	}
	return now >= dl.own
}

// aged reports whether entry e has been idle for idle at now (R-AGE), as
// the modelled datapath measures it; it returns the age it saw.
func (d *Datapath) aged(e Entry, now, idle time.Duration) (bool, time.Duration) {
	if a, ok := d.ct.(Ager); ok {
		return a.Aged(e, now, idle) // the target's clock (TNA: 32-bit ticks)
	}
	age := now - e.LastSeen
	if tk := d.opts.Tick; tk > 0 {
		ticks := floorDiv(now, tk) - floorDiv(e.LastSeen, tk)
		limit := -floorDiv(-(idle-1), tk) + 1
		return ticks >= limit, ticks * tk
	}
	return age >= idle, age
}

func floorDiv(a, b time.Duration) time.Duration {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// lookup finds the service of (dst, proto, port) in the datapath order of
// compiler.IR.Lookup: exact port, all ports of the protocol, any protocol.
func (d *Datapath) lookup(dst netip.Addr, proto uint8, port uint16) (*compiler.ServiceRow, compiler.MatchKind, bool) {
	svc, kind, _, ok := d.lookupVIP(dst, proto, port)
	return svc, kind, ok && svc != nil
}

// lookupVIP finds the most specific VIP row that matches (exact port, all
// ports of the protocol, any protocol), as every datapath does: the first
// row found decides, and its service is nil when no service row has its
// ID (then the packet is dropped, targets.DropNoService, not offered to a
// less specific row).
func (d *Datapath) lookupVIP(dst netip.Addr, proto uint8, port uint16) (*compiler.ServiceRow, compiler.MatchKind, uint32, bool) {
	dst = dst.Unmap()
	for _, k := range [...]compiler.VIPKey{
		{VIP: dst, Proto: compiler.IPProto(proto), Port: port, Kind: compiler.MatchPort},
		{VIP: dst, Proto: compiler.IPProto(proto), Kind: compiler.MatchAllPorts},
		{VIP: dst, Kind: compiler.MatchAnyProto},
	} {
		if k.Kind == compiler.MatchPort && port == 0 {
			continue // ports are 1..65535; a portless packet cannot match one
		}
		if id, ok := d.vips[k]; ok {
			return d.services[id], k.Kind, id, true
		}
	}
	return nil, 0, 0, false
}

// EntryOf returns the conntrack key this datapath would look up for pkt
// and what its table stores under it, without changing anything and
// without the validity rules. tracks is false when this datapath keeps no
// entry for the packet: no service, an untracked class (R-CT-3), an ICMP
// error (it never creates one), or, with Fallback, a packet the switch
// sends to the fallback port. Differential tests use it to compare the
// conntrack state of datapaths key by key.
func (d *Datapath) EntryOf(pkt targets.Packet) (k Key, e Entry, found, tracks bool) {
	src, dst := pkt.Src.Unmap(), pkt.Dst.Unmap()
	if !src.IsValid() || !dst.IsValid() || src.Is4() != dst.Is4() || pkt.IsICMPError() {
		return Key{}, Entry{}, false, false
	}
	frag := pkt.Fragmented()
	if d.fallback && (frag || (pkt.Proto != compiler.IPProtoTCP && pkt.Proto != compiler.IPProtoUDP)) {
		return Key{}, Entry{}, false, false
	}
	port := pkt.DstPort
	if pkt.Frag == targets.FragMiddle || pkt.Frag == targets.FragLast {
		port = 0
	}
	svc, _, ok := d.lookup(dst, pkt.Proto, port)
	if !ok {
		return Key{}, Entry{}, false, false
	}
	pol := svc.Classes[compiler.ClassOf(pkt.Proto)]
	if pol.Track == compiler.TupleNone || (d.fallback && (pol.Track == compiler.Tuple2 || pol.Track == compiler.Tuple3)) {
		return Key{}, Entry{}, false, false
	}
	t := compiler.Tuple{Src: src, Dst: dst, Proto: pkt.Proto, SrcPort: pkt.SrcPort, DstPort: pkt.DstPort}
	if pkt.Frag == targets.FragMiddle || pkt.Frag == targets.FragLast {
		t.SrcPort, t.DstPort = 0, 0
	}
	k = MakeKey(svc.ID, compiler.Effective(pol.Track, frag), t)
	k.Epoch = svc.Epoch
	e, found = d.ct.Lookup(k)
	return k, e, found, true
}

// lookupCT looks k up as the geometry does at now (TimedLookup), or by
// Lookup.
func (d *Datapath) lookupCT(k Key, now time.Duration) (Entry, bool) {
	if t, ok := d.ct.(TimedLookup); ok {
		return t.LookupAt(k, now)
	}
	return d.ct.Lookup(k)
}

// storeCT stores e under k with the service's idle timeout (Expirer), or by
// Store; it reports false when the geometry refused the flow (R-CT-CAP).
func (d *Datapath) storeCT(k Key, e Entry, idle time.Duration) bool {
	if x, ok := d.ct.(Expirer); ok {
		return x.StoreIdle(k, e, idle)
	}
	d.ct.Store(k, e)
	return true
}
