package sim

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// Step rules that are not rule IDs of the spec but name a stage of its
// per-packet algorithm (section 1), so that every step has a label.
const (
	StepLookup    = "LOOKUP"    // service lookup by VIP, protocol, port
	StepFallback  = "FALLBACK"  // P4 semantics: not parsed, sent to the fallback port
	StepMalformed = "MALFORMED" // inconsistent headers: dropped
	StepICMPError = "ICMP-ERROR"
	StepEncap     = "ENCAP"
)

// Detail is the structured account of one decision, for `lbc explain
// --json`. Fields that did not take part are zero.
type Detail struct {
	Service   string `json:"service,omitempty"`
	Match     string `json:"match,omitempty"` // port, all-ports, any-proto
	Class     string `json:"class,omitempty"`
	Fragment  bool   `json:"fragment,omitempty"`
	ICMPError bool   `json:"icmpError,omitempty"`

	TrackTuple string `json:"trackTuple,omitempty"` // 2-tuple, 3-tuple, 5-tuple; empty when untracked
	TrackBytes string `json:"trackBytes,omitempty"` // R-HASH layout, hex
	Entry      *Entry `json:"entry,omitempty"`      // the stored entry found, valid or not
	EntryValid bool   `json:"entryValid,omitempty"`
	Invalid    string `json:"invalid,omitempty"` // rule that invalidated the entry
	// Deadline (seconds, compile clock) and DeadlineRule of the entry's
	// backend, when it has one (R-DRAIN, R-PERSIST-CAP).
	Deadline     float64 `json:"deadline,omitempty"`
	DeadlineRule string  `json:"deadlineRule,omitempty"`

	AffinityTuple string   `json:"affinityTuple,omitempty"`
	AffinityBytes string   `json:"affinityBytes,omitempty"`
	Hash          uint32   `json:"hash,omitempty"`
	Slot          uint32   `json:"slot,omitempty"`
	RingSize      uint32   `json:"ringSize,omitempty"`
	Decision      string   `json:"decision,omitempty"`
	EligibleRule  string   `json:"eligibleRule,omitempty"`
	Eligible      []string `json:"eligible,omitempty"`

	BackendIP string `json:"backendIP,omitempty"`
	Encap     string `json:"encap,omitempty"`
	// VLAN is the packet's 802.1Q VID (R-VLAN): parsed, kept on what is
	// forwarded, and changing no decision.
	VLAN uint16 `json:"vlan,omitempty"`
	// IPLen, Overhead and MTU are the R-MTU check at encapsulation: the
	// packet's IP length, the outer header's and the egress MTU.
	IPLen    int    `json:"ipLen,omitempty"`
	Overhead int    `json:"overhead,omitempty"`
	MTU      uint16 `json:"mtu,omitempty"`
}

// Process implements targets.PacketTarget.
func (d *Datapath) Process(ctx context.Context, pkt targets.Packet, now time.Duration) (targets.Verdict, error) {
	v, _, err := d.ProcessDetail(pkt, now)
	return v, err
}

// run is one packet's decision under construction.
type run struct {
	d   *Datapath
	pkt targets.Packet
	v   targets.Verdict
	det Detail
}

func (r *run) step(rule, format string, args ...any) {
	r.v.Steps = append(r.v.Steps, targets.Step{Rule: rule, Detail: fmt.Sprintf(format, args...)})
}

// ProcessDetail is Process with the structured account of the decision.
// An error means the IR is inconsistent (a ring slot pointing nowhere),
// never a bad packet: bad packets get a defined drop.
func (d *Datapath) ProcessDetail(pkt targets.Packet, now time.Duration) (targets.Verdict, Detail, error) {
	r := &run{d: d, pkt: pkt}
	err := r.process(pkt, now)
	return r.v, r.det, err
}

func (r *run) drop(reason, rule, format string, args ...any) {
	r.v.Action = targets.Drop
	r.v.DropReason = reason
	r.step(rule, format, args...)
}

func (r *run) process(pkt targets.Packet, now time.Duration) error {
	if pkt.NotIP {
		r.v.Action = targets.NotOurs
		r.step(StepLookup, "not an IPv4 or IPv6 packet: not ours, left to the network as it is")
		return nil
	}
	src, dst := pkt.Src.Unmap(), pkt.Dst.Unmap()
	if !src.IsValid() || !dst.IsValid() || src.Is4() != dst.Is4() {
		r.drop(targets.DropMalformed, StepMalformed, "source %v and destination %v are not two addresses of one family", pkt.Src, pkt.Dst)
		return nil
	}
	pkt.Src, pkt.Dst = src, dst
	if pkt.Frag > targets.FragLast {
		r.drop(targets.DropMalformed, StepMalformed, "unknown fragment kind %d", pkt.Frag)
		return nil
	}
	frag := pkt.Fragmented()
	r.det.Fragment = frag
	r.det.VLAN = pkt.VLAN
	if r.d.fallback && (frag || (pkt.Proto != compiler.IPProtoTCP && pkt.Proto != compiler.IPProtoUDP && !pkt.IsICMPError())) {
		r.v.Action = targets.Fallback
		switch {
		case frag:
			r.step(StepFallback, "%s fragment: the switch does not reassemble; sent to the fallback port (R-FRAG)", pkt.Frag)
		case pkt.Proto == compiler.IPProtoICMP || pkt.Proto == compiler.IPProtoICMPv6:
			r.step(StepFallback, "ICMP type %d is not an error the switch looks up; sent to the fallback port", pkt.ICMPType)
		default:
			r.step(StepFallback, "protocol %s is not parsed by the switch; sent to the fallback port", compiler.ProtoName(pkt.Proto))
		}
		return nil
	}
	if pkt.IsICMPError() {
		return r.icmpError(pkt, now)
	}
	if (pkt.Proto == compiler.IPProtoICMP || pkt.Proto == compiler.IPProtoICMPv6) && pkt.Inner != nil {
		r.drop(targets.DropMalformed, StepMalformed, "ICMP type %d is not an error but quotes a packet", pkt.ICMPType)
		return nil
	}

	// Service lookup. A non-first fragment has no ports: it can only match
	// an all-ports or L3_DEFAULT service (R-FRAG).
	port := pkt.DstPort
	if pkt.Frag == targets.FragMiddle || pkt.Frag == targets.FragLast {
		port = 0
	}
	svc, kind, vip, ok := r.d.lookupVIP(pkt.Dst, pkt.Proto, port)
	if ok && svc == nil {
		r.noService(vip, kind, pkt.Dst)
		return nil
	}
	if !ok {
		r.v.Action = targets.NotOurs
		if port == 0 && frag {
			r.step(StepLookup, "no service for %v proto %s (a %s fragment has no ports: only all-ports and L3_DEFAULT services match it)", pkt.Dst, compiler.ProtoName(pkt.Proto), pkt.Frag)
		} else {
			r.step(StepLookup, "no service for %v proto %s port %d", pkt.Dst, compiler.ProtoName(pkt.Proto), pkt.DstPort)
		}
		return nil
	}
	r.service(svc, kind)
	r.step(StepLookup, "service %q (match %s: %v proto %s port %d)", svc.Name, kind, pkt.Dst, compiler.ProtoName(pkt.Proto), port)

	c := compiler.ClassOf(pkt.Proto)
	pol := svc.Classes[c]
	r.det.Class = c.String()
	if r.d.fallback && (pol.Track == compiler.Tuple2 || pol.Track == compiler.Tuple3) {
		// A session without ports is shared with the client's fragments and
		// unparsed protocols, which only the fallback sees: the switch sends
		// the whole session there, so that one conntrack holds it (p4/lb.p4).
		// The switch reports no service for what it punts.
		r.v = targets.Verdict{Action: targets.Fallback, Steps: r.v.Steps}
		r.step(StepFallback, "%s session (%s, no ports) is shared with fragments the switch does not see: sent to the fallback port", c, pol.Track.Name())
		return nil
	}
	if frag {
		r.step("R-FRAG", "%s fragment (id %d): its tuples have no ports (a 5-tuple becomes the 3-tuple)", pkt.Frag, pkt.FragID)
	}
	t := pkt.Tuple()
	if pkt.Frag == targets.FragMiddle || pkt.Frag == targets.FragLast {
		t.SrcPort, t.DstPort = 0, 0
	}

	if pol.Track == compiler.TupleNone {
		r.v.CT = targets.CTUntracked
		r.step("R-CT-3", "%s is not tracked under sessionAffinity of this service: no lookup, no entry", c)
		return r.selectBackend(svc, pol, t, frag, nil, now)
	}
	tk := compiler.Effective(pol.Track, frag)
	key := MakeKey(svc.ID, tk, t)
	key.Epoch = svc.Epoch
	r.det.TrackTuple = tk.String()
	r.det.TrackBytes = hex.EncodeToString(key.Tuple.AppendLayout(nil, tk))
	if pkt.Flags&(targets.FlagFIN|targets.FlagRST) != 0 && pkt.Proto == compiler.IPProtoTCP {
		r.step("R-CT-4", "FIN/RST does not delete the entry")
	}
	if pkt.IsSYN() {
		if svc.SynNew {
			r.v.CT = targets.CTNew
			// R-CT-2 reduces to R-CT-1 for the 5-tuple affinities.
			r.step("R-CT-1", "TCP SYN: a new connection, conntrack lookup skipped")
			return r.selectBackend(svc, pol, t, frag, &key, now)
		}
		r.step("R-CT-2", "TCP SYN under PER_SESSION with a client affinity: looks up the session entry")
	}
	r.step("R-TRK", "tracking tuple %s %s", compiler.TupleName(tk), r.det.TrackBytes)
	e, found := r.d.lookupCT(key, now)
	if found {
		ec := e
		r.det.Entry = &ec
		if b := r.d.backends[e.BackendID]; b != nil && b.Deadline != 0 {
			r.det.Deadline, r.det.DeadlineRule = b.Deadline.Seconds(), deadlineRule(b)
		}
		idle := time.Duration(svc.IdleTimeoutSec) * time.Second
		if h, ok := r.d.ct.(HitRefresher); ok && h.RefreshesHit() && e.Epoch == svc.Epoch {
			if old, _ := r.d.aged(e, now, idle); !old {
				// The switch refreshes a live entry where it reads it, before
				// its backend is checked: a re-selection below overwrites it,
				// and if none can be made the entry stays refreshed.
				h.RefreshHit(key, now, idle)
			}
		}
		if rule, why := r.valid(svc, pol, e, now); rule != "" {
			r.det.Invalid = rule
			r.step(rule, "entry → backend %d no longer valid: %s", e.BackendID, why)
		} else {
			r.det.EntryValid = true
			b := r.d.backends[e.BackendID]
			e.LastSeen, e.Copy = now, false
			r.d.storeCT(key, e, idle)
			r.v.CT = targets.CTHit
			r.step("R-AGE", "entry hit (last seen %s ago, idle timeout %ds); refreshed", now-ec.LastSeen, svc.IdleTimeoutSec)
			switch {
			case b.Draining:
			case !b.Healthy && svc.AllUnhealthy:
				r.step("R-PERSIST-LR", "backend %q is unhealthy but every backend is: entries stay valid whatever the persistence option", b.Name)
			case !b.Healthy:
				r.step("R-PERSIST", "backend %q is unhealthy; %s entries persist", b.Name, c)
			case !svc.NoBackends && !eligibleHas(svc, b.Name):
				// A healthy backend outside the eligible set: weight 0 under a
				// weighted policy, else the inactive failover side. Weights
				// are not datapath state, so the policy's rule tells which.
				rule := svc.Rule
				if strings.HasPrefix(rule, "R-ELIG-2") || strings.HasPrefix(rule, "R-ELIG-4") {
					rule = "R-WEIGHT-0"
				}
				r.step(rule, "backend %q takes no new connections (not in the eligible set) but keeps this one", b.Name)
			}
			if b.Deadline != 0 {
				r.det.Deadline, r.det.DeadlineRule = b.Deadline.Seconds(), deadlineRule(b)
				r.step(deadlineRule(b), "backend %q keeps its entries until t=%gs (%s)", b.Name, b.Deadline.Seconds(), deadlineWhy(b))
			}
			r.forward(svc, b)
			return nil
		}
	}
	r.v.CT = targets.CTMiss
	if !found {
		r.step("R-TRK", "no entry")
	}
	return r.selectBackend(svc, pol, t, frag, &key, now)
}

// deadlineRule names the rule of a backend's deadline.
func deadlineRule(b *compiler.BackendRow) string {
	if b.DeadlineRule != "" {
		return b.DeadlineRule
	}
	return compiler.RuleDrain
}

func deadlineWhy(b *compiler.BackendRow) string {
	switch {
	case b.Draining && deadlineRule(b) == compiler.RulePersistCap:
		return "removed and draining; loadBalancingScheme INTERNAL caps it at 300 s outside the eligible set"
	case b.Draining:
		return "removed from the configuration; drainingTimeoutSec after the removal"
	case deadlineRule(b) == compiler.RulePersistCap:
		return "loadBalancingScheme INTERNAL: 300 s after it left the healthy eligible set"
	}
	return "deadline of the backend row"
}

func eligibleHas(svc *compiler.ServiceRow, name string) bool {
	for _, n := range svc.Eligible {
		if n == name {
			return true
		}
	}
	return false
}

// valid applies the validity rules to a stored entry; it returns the rule
// that invalidates it, or "".
func (r *run) valid(svc *compiler.ServiceRow, pol compiler.ClassPolicy, e Entry, now time.Duration) (string, string) {
	idle := time.Duration(svc.IdleTimeoutSec) * time.Second
	// R-AGE: at exactly idleTimeoutSec after the last packet the entry has
	// expired (now − lastSeen < idle is valid).
	if old, age := r.d.aged(e, now, idle); old {
		return "R-AGE", fmt.Sprintf("idle for %s ≥ idleTimeoutSec %ds", age, svc.IdleTimeoutSec)
	}
	if e.Epoch != svc.Epoch {
		return "R-EPOCH", fmt.Sprintf("entry epoch %d, service epoch %d (flushed on failover/failback)", e.Epoch, svc.Epoch)
	}
	b := r.d.backends[e.BackendID]
	if b == nil || b.ServiceID != svc.ID {
		return compiler.RuleDrain, fmt.Sprintf("backend %d is gone (removed, draining over)", e.BackendID)
	}
	if r.d.expired(b, now) {
		return deadlineRule(b), fmt.Sprintf("backend %q: its deadline t=%gs is reached (%s)", b.Name, b.Deadline.Seconds(), deadlineWhy(b))
	}
	if !b.Healthy && !pol.Persist && !svc.AllUnhealthy {
		return "R-PERSIST", fmt.Sprintf("backend %q is unhealthy and this protocol does not persist", b.Name)
	}
	return "", ""
}

// noService drops a packet whose VIP row names a service no row holds
// (targets.DropNoService).
func (r *run) noService(id uint32, kind compiler.MatchKind, dst netip.Addr) {
	r.det.Match = kind.String()
	r.drop(targets.DropNoService, StepLookup, "VIP %v (match %s) names service %d, which has no service row: dropped (lbc writes a service before its VIPs)", dst, kind, id)
}

func (r *run) service(svc *compiler.ServiceRow, kind compiler.MatchKind) {
	r.v.ServiceID = svc.ID
	r.v.Service = svc.Name
	r.det.Service = svc.Name
	r.det.Match = kind.String()
}

// selectBackend picks from the ring by the affinity tuple and, when key is
// set, records the entry (R-CT-3: only trackable packets create one).
func (r *run) selectBackend(svc *compiler.ServiceRow, pol compiler.ClassPolicy, t compiler.Tuple, frag bool, key *Key, now time.Duration) error {
	r.det.Decision, r.det.EligibleRule, r.det.Eligible = svc.Decision, svc.Rule, svc.Eligible
	if svc.NoBackends {
		rule := svc.Rule
		if rule == "" {
			rule = "R-ELIG"
		}
		r.drop(targets.DropNoBackends, rule, "eligible set is empty (%s): new connections are dropped", svc.Decision)
		return nil
	}
	ak := compiler.Effective(pol.Affinity, frag)
	lay := t.AppendLayout(nil, ak)
	h := compiler.HashBytes(lay)
	r.det.AffinityTuple = ak.String()
	r.det.AffinityBytes = hex.EncodeToString(lay)
	r.step("R-AFF", "affinity tuple %s %s", compiler.TupleName(ak), r.det.AffinityBytes)
	ring := r.d.ir.ActiveRing(svc)
	if svc.RingSize == 0 {
		return fmt.Errorf("service %q: ring size 0", svc.Name)
	}
	slot := compiler.Slot(h, svc.RingSize)
	r.det.Hash, r.det.Slot, r.det.RingSize = h, slot, svc.RingSize
	r.step("R-HASH", "crc32 %#08x", h)
	if int(slot) >= len(ring) || ring[slot] == 0 {
		// A ring half written part-way (a push that stopped) is active:
		// both P4 programs miss the ring table and drop the packet as
		// having no backend, before any conntrack write, so no entry is
		// created (p4/tna/lb.p4 creates one only for a ring hit).
		r.drop(targets.DropNoBackends, "R-MAGLEV-1", "ring half %d slot %d of %d is unset (a ring written part-way): no backend, dropped, no entry created", svc.ActiveHalf, slot, len(ring))
		return nil
	}
	b := r.d.backends[ring[slot]]
	if b == nil {
		return fmt.Errorf("service %q: ring slot %d points at backend %d, which the backend table does not hold", svc.Name, slot, ring[slot])
	}
	elig := svc.Rule
	if elig == "" {
		elig = "R-ELIG"
	}
	r.step(elig, "eligible set (%s): %s", svc.Decision, strings.Join(svc.Eligible, ", "))
	r.step("R-MAGLEV-1", "slot %d of %d (half %d) → backend %q", slot, svc.RingSize, svc.ActiveHalf, b.Name)
	if key != nil {
		if r.d.storeCT(*key, Entry{BackendID: b.ID, Epoch: svc.Epoch, LastSeen: now}, time.Duration(svc.IdleTimeoutSec)*time.Second) {
			r.step("R-CT-3", "entry created → %q (epoch %d)", b.Name, svc.Epoch)
		} else {
			r.step("R-CT-CAP", "no entry: every slot the flow may take holds a live entry; refused and counted (ct_refused), forwarded by the ring → %q", b.Name)
		}
	}
	r.forward(svc, b)
	return nil
}

func (r *run) forward(svc *compiler.ServiceRow, b *compiler.BackendRow) {
	r.v.Action = targets.Forward
	r.v.BackendID = b.ID
	r.v.Backend = b.Name
	r.det.BackendIP = b.IP.String()
	tag := ""
	if r.pkt.VLAN != 0 {
		tag = fmt.Sprintf("; VLAN %d kept on the frame sent (R-VLAN)", r.pkt.VLAN)
	}
	if svc.Encap == compiler.EncapKindL2DSR {
		r.det.Encap = fmt.Sprintf("L2 DSR: destination MAC %x", b.MAC[:])
		r.step(StepEncap, "%s%s", r.det.Encap, tag)
		return // nothing is added: no R-MTU check
	}
	src := r.d.ir.TunnelSource4
	if b.IP.Is6() {
		src = r.d.ir.TunnelSource6
	}
	r.det.Encap = fmt.Sprintf("IP-in-IP: outer %v → %v", src, b.IP)
	r.step(StepEncap, "%s%s", r.det.Encap, tag)
	r.mtu(b)
}

// mtu is R-MTU, at encapsulation and after the conntrack step (an entry
// was refreshed or created exactly as for a forwarded packet): a packet
// that would exceed the egress MTU once encapsulated is answered with ICMP
// when it may not be fragmented, forwarded otherwise; a P4 switch, which
// cannot build the answer, sends it to the fallback port unchanged.
func (r *run) mtu(b *compiler.BackendRow) {
	mtu := r.d.ir.MTU
	if mtu == 0 {
		mtu = r.d.opts.MTU
	}
	if mtu == 0 {
		mtu = compiler.DefaultMTU
	}
	over := 20
	if b.IP.Is6() {
		over = 40
	}
	n := r.pkt.IPLen()
	r.det.IPLen, r.det.Overhead, r.det.MTU = n, over, mtu
	if n+over <= int(mtu) {
		return
	}
	df := r.pkt.DF || !r.pkt.Src.Unmap().Is4()
	switch {
	case r.d.fallback:
		r.v = targets.Verdict{Action: targets.Fallback, Steps: r.v.Steps}
		r.step("R-MTU", "%d bytes + %d of outer header > MTU %d: the switch cannot answer with ICMP; sent to the fallback port unchanged", n, over, mtu)
	case r.det.ICMPError:
		r.step("R-MTU", "%d bytes + %d of outer header > MTU %d, but an ICMP error is never answered with one (RFC 1122, RFC 4443): forwarded", n, over, mtu)
	case df:
		r.v.Action = targets.TooBig
		r.v.MTU = mtu - uint16(over)
		what := "ICMP fragmentation needed (type 3 code 4)"
		if !r.pkt.Src.Unmap().Is4() {
			what = "ICMPv6 packet too big"
		}
		r.step("R-MTU", "%d bytes + %d of outer header > MTU %d and may not be fragmented: answered from the VIP with %s, next-hop MTU %d", n, over, mtu, what, r.v.MTU)
	default:
		r.step("R-MTU", "%d bytes + %d of outer header > MTU %d, DF clear: forwarded; the outer packet is fragmented on the way", n, over, mtu)
	}
}

// icmpError sends an ICMP error to the backend of the flow it quotes: the
// quoted packet went from the VIP to the client, so the flow is its
// reverse. Conntrack is looked up without creating or refreshing an entry;
// on a miss the ring decides by the flow's affinity tuple. The error
// itself is never tracked (R-CT-3). CT reports the flow's lookup: hit,
// miss, or untracked when the flow's protocol is not tracked.
func (r *run) icmpError(pkt targets.Packet, now time.Duration) error {
	r.det.ICMPError = true
	if pkt.Inner == nil {
		r.drop(targets.DropMalformed, StepMalformed, "ICMP error type %d quotes no packet", pkt.ICMPType)
		return nil
	}
	in := *pkt.Inner
	flow := pkt.QuotedFlow()
	if !flow.Src.IsValid() || !flow.Dst.IsValid() || flow.Src.Is4() != flow.Dst.Is4() || flow.Src.Is4() != pkt.Src.Is4() {
		r.drop(targets.DropMalformed, StepMalformed, "quoted packet %v → %v does not match the error's address family", in.Src, in.Dst)
		return nil
	}
	r.step(StepICMPError, "ICMP error type %d code %d quotes %v:%d → %v:%d proto %s; flow is %v:%d → %v:%d", pkt.ICMPType, pkt.ICMPCode,
		in.Src, in.SrcPort, in.Dst, in.DstPort, compiler.ProtoName(in.Proto), flow.Src, flow.SrcPort, flow.Dst, flow.DstPort)
	if r.d.fallback && flow.Proto != compiler.IPProtoTCP && flow.Proto != compiler.IPProtoUDP {
		// The switch parses TCP and UDP ports in a quoted packet only; a
		// flow of another protocol lives in the fallback's conntrack.
		r.v.Action = targets.Fallback
		r.step(StepFallback, "the quoted packet's protocol %s is not parsed by the switch; sent to the fallback port", compiler.ProtoName(flow.Proto))
		return nil
	}
	port := flow.DstPort
	svc, kind, vip, ok := r.d.lookupVIP(flow.Dst, flow.Proto, port)
	if ok && svc == nil {
		r.noService(vip, kind, flow.Dst)
		return nil
	}
	if !ok {
		r.v.Action = targets.NotOurs
		r.step(StepLookup, "no service for the quoted flow (%v proto %s port %d)", flow.Dst, compiler.ProtoName(flow.Proto), port)
		return nil
	}
	r.service(svc, kind)
	r.step(StepLookup, "service %q (match %s)", svc.Name, kind)
	c := compiler.ClassOf(flow.Proto)
	pol := svc.Classes[c]
	r.det.Class = c.String()
	if r.d.fallback && (pol.Track == compiler.Tuple2 || pol.Track == compiler.Tuple3) {
		// The flow's session lives in the fallback's conntrack (see
		// process): so does the decision about its errors.
		r.v = targets.Verdict{Action: targets.Fallback, Steps: r.v.Steps}
		r.step(StepFallback, "the quoted flow's %s session (%s, no ports) lives in the fallback's conntrack: sent to the fallback port", c, pol.Track.Name())
		return nil
	}
	if pol.Track == compiler.TupleNone {
		r.v.CT = targets.CTUntracked
		r.step("R-CT-3", "the quoted flow's protocol is not tracked")
		return r.selectBackend(svc, pol, flow, false, nil, now)
	}
	key := MakeKey(svc.ID, pol.Track, flow)
	key.Epoch = svc.Epoch
	r.det.TrackTuple = pol.Track.String()
	r.det.TrackBytes = hex.EncodeToString(key.Tuple.AppendLayout(nil, pol.Track))
	r.step("R-TRK", "tracking tuple of the flow %s %s (lookup only: the error is never tracked)", compiler.TupleName(pol.Track), r.det.TrackBytes)
	if e, found := r.d.lookupCT(key, now); found {
		ec := e
		r.det.Entry = &ec
		if rule, why := r.valid(svc, pol, e, now); rule != "" {
			r.det.Invalid = rule
			r.step(rule, "the flow's entry is not valid: %s", why)
		} else {
			r.det.EntryValid = true
			r.v.CT = targets.CTHit
			r.step("R-AGE", "the flow's entry is valid (not refreshed)")
			r.forward(svc, r.d.backends[e.BackendID])
			return nil
		}
	}
	r.v.CT = targets.CTMiss
	return r.selectBackend(svc, pol, flow, false, nil, now)
}
