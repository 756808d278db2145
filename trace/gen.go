package trace

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"sort"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// GenOptions shape a generated trace.
type GenOptions struct {
	Seed     uint64
	Packets  int     // packet lines to generate (events come on top)
	Clients  int     // distinct client addresses per address family
	Duration float64 // seconds the trace spans
	// Events adds health flaps, weight changes (weighted services) and
	// removals and re-additions of endpoints: at least one health flap on
	// every service whose entries may stop persisting on an unhealthy
	// backend (NEVER_PERSIST, and UDP under DEFAULT_FOR_PROTOCOL), and
	// about a quarter of the flows live across an event, with several
	// packets after it, so that re-selected entries are used again.
	Events bool
	// Oversize adds UDP datagrams and TCP segments of 1,400 to 1,480 bytes
	// of payload with DF set (IPv4; IPv6 always counts as DF), around and
	// above what fits a 1,500-byte MTU once encapsulated (R-MTU).
	Oversize bool
	// ICMPErrors adds many more ICMP errors (IPv4 destination unreachable
	// and time exceeded, ICMPv6 packet too big and destination
	// unreachable): about TCP and UDP flows with entries (a quarter of
	// the flows), about flows live across an event (after it), and about
	// flows no packet was sent for, which the ring decides without
	// creating an entry. Tagged like every packet, one in eight.
	ICMPErrors bool
}

// Generate returns a seeded, realistic trace for cfg: many clients; TCP
// connections (SYN, data, FIN or RST, sometimes a reused port); UDP
// datagrams, some fragmented (first, middle, last; occasionally out of
// order); ESP, GRE and ICMP echo to L3_DEFAULT services; ICMP errors
// quoting live TCP flows; packets to no service; IPv4 and IPv6 as the
// VIPs are; one packet in eight tagged with an 802.1Q VLAN (R-VLAN: it
// must change nothing). The same seed and configuration give the same
// trace.
func Generate(cfg *compiler.Config, o GenOptions) []Line {
	if o.Packets <= 0 {
		o.Packets = 1000
	}
	if o.Clients <= 0 {
		o.Clients = 100
	}
	if o.Duration <= 0 {
		o.Duration = 120
	}
	g := &gen{r: rand.New(rand.NewPCG(o.Seed, 0x6c6263)), o: o}
	for i := range cfg.Services {
		g.svcs = append(g.svcs, &cfg.Services[i])
	}
	var evs []genEvent
	if o.Events {
		evs = g.events()
	}
	for len(g.lines) < o.Packets && len(g.svcs) > 0 {
		if len(evs) > 0 && g.r.IntN(4) == 0 {
			g.liveFlow(evs[g.r.IntN(len(evs))])
		} else {
			g.flow()
		}
	}
	// Trim to the count and order by time (stable: a flow's packets keep
	// their order).
	sort.SliceStable(g.lines, func(i, j int) bool { return g.lines[i].T < g.lines[j].T })
	g.lines = g.lines[:min(len(g.lines), o.Packets)]
	for _, e := range evs {
		g.lines = append(g.lines, e.line)
	}
	sort.SliceStable(g.lines, func(i, j int) bool { return g.lines[i].T < g.lines[j].T })
	return g.lines
}

type gen struct {
	r     *rand.Rand
	o     GenOptions
	svcs  []*compiler.Service
	lines []Line
	live  []compiler.Tuple // TCP flows, for ICMP errors
}

func (g *gen) at(t float64) float64 { return math.Round(min(t, g.o.Duration)*1000) / 1000 }

func (g *gen) client(v6 bool) netip.Addr {
	n := g.r.IntN(g.o.Clients)
	if v6 {
		return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(n >> 8), byte(n)})
	}
	return netip.AddrFrom4([4]byte{100, 64 + byte(n>>16&63), byte(n >> 8), byte(n)})
}

func (g *gen) add(t float64, p targets.Packet) {
	if g.r.IntN(8) == 0 {
		p.VLAN = [...]uint16{10, 100, 4094}[g.r.IntN(3)] // R-VLAN: changes nothing
	}
	g.lines = append(g.lines, Line{T: g.at(t), Packet: &p})
}

// oversize makes p, sometimes, a full-size packet with DF set (R-MTU).
func (g *gen) oversize(p targets.Packet) targets.Packet {
	if g.o.Oversize && g.r.IntN(10) == 0 {
		p.PayloadLen, p.DF = 1400+g.r.IntN(81), p.Src.Is4()
	}
	return p
}

var commonPorts = []uint16{53, 80, 123, 443, 500, 4500, 5000, 8080}

func (g *gen) port(s *compiler.Service) uint16 {
	if s.Ports.All || len(s.Ports.List) == 0 {
		return commonPorts[g.r.IntN(len(commonPorts))]
	}
	return s.Ports.List[g.r.IntN(len(s.Ports.List))]
}

// flow emits one flow's packets.
func (g *gen) flow() {
	s := g.svcs[g.r.IntN(len(g.svcs))]
	vip := s.VIPAddr()
	src := g.client(vip.Is6())
	t := g.r.Float64() * g.o.Duration
	gap := func() float64 { return g.r.ExpFloat64() * 0.2 }
	sport := uint16(1024 + g.r.IntN(64511))
	pick := g.r.IntN(100)
	proto := s.Protocol
	if proto == compiler.ProtoL3Default {
		switch {
		case pick < 40:
			proto = compiler.ProtoTCP
		case pick < 70:
			proto = compiler.ProtoUDP
		default:
			proto = "other"
		}
	}
	switch {
	case pick >= 97:
		// Not ours: a neighbour of the VIP.
		b := vip.As16()
		b[15] ^= 0x80
		dst := netip.AddrFrom16(b)
		if vip.Is4() {
			dst = dst.Unmap()
		}
		g.add(t, targets.Packet{Src: src, Dst: dst, Proto: compiler.IPProtoTCP, SrcPort: sport, DstPort: 80, Flags: targets.FlagSYN})
	case proto == compiler.ProtoTCP:
		dport := g.port(s)
		p := targets.Packet{Src: src, Dst: vip, Proto: compiler.IPProtoTCP, SrcPort: sport, DstPort: dport}
		flags := func(f uint8) targets.Packet { q := p; q.Flags = f; return q }
		g.add(t, flags(targets.FlagSYN))
		t += gap()
		for n := g.r.IntN(6) + 1; n > 0; n-- {
			g.add(t, g.oversize(flags(targets.FlagACK|uint8(g.r.IntN(2))*targets.FlagPSH)))
			t += gap()
		}
		g.live = append(g.live, p.Tuple())
		switch x := g.r.IntN(10); {
		case x < 6:
			g.add(t, flags(targets.FlagFIN|targets.FlagACK))
			g.add(t+gap(), flags(targets.FlagACK))
		case x < 7:
			g.add(t, flags(targets.FlagRST))
		case x < 8:
			// Port reuse: a new SYN on the same 5-tuple (R-CT-1).
			g.add(t, flags(targets.FlagFIN|targets.FlagACK))
			g.add(t+1+gap(), flags(targets.FlagSYN))
			g.add(t+1.1+gap(), flags(targets.FlagACK))
		}
		// Sometimes a router reports an error about the flow's replies.
		if g.r.IntN(20) == 0 {
			g.icmpError(t+gap(), p.Tuple())
		}
		g.moreErrors(t+gap(), p.Tuple())
	case proto == compiler.ProtoUDP:
		dport := g.port(s)
		for n := g.r.IntN(4) + 1; n > 0; n-- {
			p := targets.Packet{Src: src, Dst: vip, Proto: compiler.IPProtoUDP, SrcPort: sport, DstPort: dport}
			if g.r.IntN(4) == 0 {
				g.fragments(t, p)
			} else {
				p.PayloadLen = 64 + g.r.IntN(1200)
				g.add(t, g.oversize(p))
			}
			t += gap()
			if n == 1 {
				g.moreErrors(t, p.Tuple())
			}
		}
	default:
		var p targets.Packet
		switch x := g.r.IntN(3); x {
		case 0:
			p = targets.Packet{Proto: compiler.IPProtoESP}
		case 1:
			p = targets.Packet{Proto: compiler.IPProtoGRE}
		default:
			p = targets.Packet{Proto: compiler.IPProtoICMP, ICMPType: 8}
			if vip.Is6() {
				p.Proto, p.ICMPType = compiler.IPProtoICMPv6, 128
			}
		}
		p.Src, p.Dst = src, vip
		for n := g.r.IntN(4) + 1; n > 0; n-- {
			g.add(t, p)
			t += gap()
		}
	}
}

// fragments emits a datagram in 2..4 pieces, sometimes out of order, cut
// as a host on a 1500-byte link cuts them: every piece but the last is a
// 1500-byte IP packet (the first carries the UDP header; IPv6 pieces the
// Fragment header, in multiples of 8 bytes).
func (g *gen) fragments(t float64, p targets.Packet) {
	id := g.r.Uint32() & 0xffff
	n := 2 + g.r.IntN(3)
	first, middle := 1500-20-8, 1500-20
	if p.Dst.Is6() {
		first, middle = 1448-8, 1448
	}
	var ps []targets.Packet
	for i := 0; i < n; i++ {
		q := p
		q.FragID, q.PayloadLen = id, middle
		if i == 0 {
			q.PayloadLen = first
		}
		switch {
		case i == 0:
			q.Frag = targets.FragFirst
		case i == n-1:
			q.Frag, q.SrcPort, q.DstPort, q.PayloadLen = targets.FragLast, 0, 0, 8+g.r.IntN(1400)
		default:
			q.Frag, q.SrcPort, q.DstPort = targets.FragMiddle, 0, 0
		}
		ps = append(ps, q)
	}
	if g.r.IntN(5) == 0 {
		g.r.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	}
	for _, q := range ps {
		g.add(t, q)
		t += 0.0005
	}
}

// moreErrors is GenOptions.ICMPErrors for flow f, whose last packet was
// before t: sometimes an error about f, sometimes one about a flow of
// the same client and service that sent nothing (another client port).
func (g *gen) moreErrors(t float64, f compiler.Tuple) {
	if !g.o.ICMPErrors {
		return
	}
	if g.r.IntN(4) == 0 {
		g.icmpErrorOf(t, f, g.r.IntN(2))
	}
	if g.r.IntN(8) == 0 {
		u := f
		u.SrcPort = uint16(1024 + g.r.IntN(64511))
		g.icmpErrorOf(t+0.001, u, g.r.IntN(2))
	}
}

// icmpError emits an error from a router about the reply of flow f.
func (g *gen) icmpError(t float64, f compiler.Tuple) { g.icmpErrorOf(t, f, 0) }

// icmpErrorOf emits an error of kind k about the reply of flow f: 0 is
// fragmentation needed (ICMPv6: packet too big), 1 time exceeded (ICMPv6:
// destination unreachable).
func (g *gen) icmpErrorOf(t float64, f compiler.Tuple, k int) {
	router := netip.MustParseAddr("192.0.2.254")
	p := targets.Packet{Src: router, Dst: f.Dst, Proto: compiler.IPProtoICMP, ICMPType: 3, ICMPCode: 4}
	if k == 1 {
		p.ICMPType, p.ICMPCode = 11, 0
	}
	if f.Dst.Is6() {
		p.Src, p.Proto, p.ICMPType, p.ICMPCode = netip.MustParseAddr("2001:db8:ffff::fe"), compiler.IPProtoICMPv6, 2, 0
		if k == 1 {
			p.ICMPType, p.ICMPCode = 1, 4
		}
	}
	p.Inner = &compiler.Tuple{Src: f.Dst, Dst: f.Src, Proto: f.Proto, SrcPort: f.DstPort, DstPort: f.SrcPort}
	g.add(t, p)
}

// genEvent is a generated event and the service it concerns.
type genEvent struct {
	line Line
	svc  *compiler.Service
}

// mayStopPersisting reports a service whose entries on an unhealthy
// backend are diverted (R-PERSIST): NEVER_PERSIST, or UDP (which does not
// persist under DEFAULT_FOR_PROTOCOL).
func mayStopPersisting(s *compiler.Service) bool {
	return s.Persistence() == compiler.PersistNever || (s.Persistence() == compiler.PersistDefault && s.Protocol != compiler.ProtoTCP)
}

// events emits health flaps, weight changes and remove/add cycles that
// keep the configuration valid (a group never loses its last endpoint):
// first one health flap on every service whose entries may stop
// persisting, then random ones.
func (g *gen) events() []genEvent {
	type ep struct {
		svc      *compiler.Service
		group    string
		e        compiler.Endpoint
		groupLen int
	}
	var eps []ep
	for _, s := range g.svcs {
		for _, gr := range s.Backends {
			for _, e := range gr.Endpoints {
				eps = append(eps, ep{s, gr.Name, e, len(gr.Endpoints)})
			}
		}
	}
	if len(eps) == 0 {
		return nil
	}
	var out []genEvent
	add := func(s *compiler.Service, t float64, e *Event) {
		out = append(out, genEvent{line: Line{T: t, Event: e}, svc: s})
	}
	busy := map[string]bool{}     // one pending event pair per endpoint
	removing := map[string]bool{} // one removal per group, so none empties
	flap := func(x ep) {
		t := g.at(g.r.Float64() * g.o.Duration * 0.8)
		back := g.at(t + 5 + g.r.Float64()*g.o.Duration*0.3)
		add(x.svc, t, &Event{Kind: EventHealth, Backend: x.e.Name, Healthy: false})
		add(x.svc, back, &Event{Kind: EventHealth, Backend: x.e.Name, Healthy: true})
	}
	for _, s := range g.svcs {
		if !mayStopPersisting(s) {
			continue
		}
		var mine []ep
		for _, x := range eps {
			if x.svc == s && !busy[x.e.Name] {
				mine = append(mine, x)
			}
		}
		if len(mine) > 0 {
			x := mine[g.r.IntN(len(mine))]
			busy[x.e.Name] = true
			flap(x)
		}
	}
	n := max(2, int(g.o.Duration/20))
	for i := 0; i < n; i++ {
		x := eps[g.r.IntN(len(eps))]
		if busy[x.e.Name] {
			continue
		}
		busy[x.e.Name] = true
		t := g.at(g.r.Float64() * g.o.Duration * 0.8)
		back := g.at(t + 5 + g.r.Float64()*g.o.Duration*0.3)
		switch k := g.r.IntN(10); {
		case k < 6:
			flap(x)
		case k < 8 && x.svc.Weighted():
			add(x.svc, t, &Event{Kind: EventWeight, Backend: x.e.Name, Weight: g.r.IntN(3) * 100})
			add(x.svc, back, &Event{Kind: EventWeight, Backend: x.e.Name, Weight: 100 + g.r.IntN(900)})
		case x.groupLen > 1 && !removing[x.svc.Name+"/"+x.group]:
			removing[x.svc.Name+"/"+x.group] = true
			add(x.svc, t, &Event{Kind: EventRemove, Backend: x.e.Name})
			add(x.svc, back, &Event{Kind: EventAdd, Group: x.group, Service: x.svc.Name, Endpoint: x.e})
		default:
			flap(x)
		}
	}
	return out
}

// liveFlow emits a flow of the event's service that is live across the
// event: its first packets before it, then several packets after it, so
// that an entry re-selected by the event (R-PERSIST, R-DRAIN, R-EPOCH) is
// used again.
func (g *gen) liveFlow(ev genEvent) {
	s := ev.svc
	vip := s.VIPAddr()
	src := g.client(vip.Is6())
	te := ev.line.T
	t := max(0, te-0.05-g.r.Float64()*2)
	p := targets.Packet{Src: src, Dst: vip, Proto: compiler.IPProtoTCP, SrcPort: uint16(1024 + g.r.IntN(64511)), DstPort: g.port(s)}
	if s.Protocol == compiler.ProtoUDP || (s.Protocol == compiler.ProtoL3Default && g.r.IntN(2) == 0) {
		p.Proto = compiler.IPProtoUDP
	}
	next := func(f uint8) targets.Packet {
		q := p
		if q.Proto == compiler.IPProtoTCP {
			q.Flags = f
		} else {
			q.PayloadLen = 64 + g.r.IntN(512)
		}
		return q
	}
	g.add(t, next(targets.FlagSYN))
	g.add(t+0.01, next(targets.FlagACK))
	t = te + 0.001
	for n := 3 + g.r.IntN(4); n > 0; n-- {
		t += 0.01 + g.r.Float64()*0.05
		g.add(t, next(targets.FlagACK))
	}
	// After the event: an error about the flow, whose entry may have been
	// re-selected (R-PERSIST) or flushed (R-EPOCH).
	g.moreErrors(t+0.005, p.Tuple())
}

// Describe is a one-line summary of a generated trace, for logs.
func Describe(lines []Line) string {
	var pk, ev, fr int
	for _, l := range lines {
		switch {
		case l.Packet != nil:
			pk++
			if l.Packet.Fragmented() {
				fr++
			}
		case l.Event != nil:
			ev++
		}
	}
	return fmt.Sprintf("%d packets (%d fragments), %d events", pk, fr, ev)
}
