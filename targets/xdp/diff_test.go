package xdp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/sim"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// The differential test drives the reference datapath (targets/sim) and
// the XDP program (test build, BPF_PROG_TEST_RUN) with the same packets
// and the same diffs, and requires the same verdict for every packet:
// action, service, backend, conntrack outcome and drop reason. Its
// generator covers every sessionAffinity × trackingMode × IPv4/IPv6, with
// the persistence option cycling through its valid values; protocols TCP
// (SYN, ACK, FIN, RST), UDP, ESP, GRE, ICMP echo and ICMP errors; every
// fragment kind; health, weight, remove and add events; draining
// deadlines; and a clock that advances in half-second steps so that
// entries reach their idle timeout exactly (R-AGE boundary).

const packetsPerConfig = 1600

var (
	affinities = []string{compiler.AffinityNone, compiler.AffinityClientIP, compiler.AffinityClientIPProto, compiler.AffinityClientIPPortProto}
	modes      = []string{compiler.TrackPerConnection, compiler.TrackPerSession}
)

type family struct {
	name                         string
	vipTCP, vipUDP, vipL3, other netip.Addr
	router                       netip.Addr
	client                       func(i int) netip.Addr
	backend                      func(i int) string
}

var families = []family{
	{name: "ipv4", vipTCP: netip.MustParseAddr("203.0.113.10"), vipUDP: netip.MustParseAddr("203.0.113.20"), vipL3: netip.MustParseAddr("203.0.113.30"),
		other: netip.MustParseAddr("203.0.113.99"), router: netip.MustParseAddr("192.0.2.254"),
		client:  func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + i)}) },
		backend: func(i int) string { return fmt.Sprintf("10.0.%d.%d", i/200, 1+i%200) }},
	{name: "ipv6", vipTCP: netip.MustParseAddr("2001:db8:100::10"), vipUDP: netip.MustParseAddr("2001:db8:100::20"), vipL3: netip.MustParseAddr("2001:db8:100::30"),
		other: netip.MustParseAddr("2001:db8:100::99"), router: netip.MustParseAddr("2001:db8:ffff::1"),
		client: func(i int) netip.Addr {
			return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0xc, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(1 + i)})
		},
		backend: func(i int) string { return fmt.Sprintf("2001:db8:b::%x", 1+i) }},
}

func endpoints(f family, prefix string, first, n int, mac bool) []compiler.Endpoint {
	var out []compiler.Endpoint
	for i := 0; i < n; i++ {
		e := compiler.Endpoint{Name: fmt.Sprintf("%s%d", prefix, i+1), IP: f.backend(first + i)}
		if mac {
			e.MAC = fmt.Sprintf("02:00:00:00:%02x:%02x", first/256, (first+i)%256)
		}
		out = append(out, e)
	}
	return out
}

// diffConfig is one combination: three services sharing the affinity,
// tracking mode and persistence under test.
func diffConfig(f family, affinity, mode, persist string, dsr bool) *compiler.Config {
	idle := 10
	ratio := 0.5
	ctp := func() *compiler.ConnectionTrackingPolicy {
		return &compiler.ConnectionTrackingPolicy{TrackingMode: mode, ConnectionPersistenceOnUnhealthyBackends: persist, IdleTimeoutSec: &idle}
	}
	cfg := &compiler.Config{Tunnel: compiler.Tunnel{SourceIPv4: "192.0.2.1", SourceIPv6: "2001:db8::1"}}
	cfg.Services = []compiler.Service{
		{Name: "tcp", VIP: f.vipTCP.String(), Protocol: compiler.ProtoTCP, Ports: compiler.Ports{List: []uint16{80, 443}},
			SessionAffinity: affinity, ConnectionTrackingPolicy: ctp(), RingSize: 251,
			FailoverPolicy:     &compiler.FailoverPolicy{FailoverRatio: &ratio, DisableConnectionDrainOnFailover: true},
			ConnectionDraining: &compiler.ConnectionDraining{DrainingTimeoutSec: 5},
			Backends: []compiler.BackendGroup{
				{Name: "ig-a", Endpoints: endpoints(f, "a", 0, 2, false)},
				{Name: "ig-d", Endpoints: endpoints(f, "d", 2, 2, false)},
				{Name: "ig-b", Failover: true, Endpoints: endpoints(f, "b", 4, 2, false)},
			}},
		{Name: "udp", VIP: f.vipUDP.String(), Protocol: compiler.ProtoUDP, Ports: compiler.Ports{All: true},
			SessionAffinity: affinity, ConnectionTrackingPolicy: ctp(), RingSize: 1021, LocalityLbPolicy: compiler.LbWeightedMaglev,
			HealthCheck: &compiler.HealthCheck{Type: "HTTP", Port: 8080, RequestPath: "/w"},
			Backends:    []compiler.BackendGroup{{Name: "ig-u", Endpoints: endpoints(f, "u", 10, 3, false)}}},
		{Name: "l3", VIP: f.vipL3.String(), Protocol: compiler.ProtoL3Default, Ports: compiler.Ports{All: true},
			SessionAffinity: affinity, ConnectionTrackingPolicy: ctp(), RingSize: 257,
			Backends: []compiler.BackendGroup{{Name: "ig-l", Endpoints: endpoints(f, "l", 20, 3, true)}}},
		// Small enough that health events empty it: R-ELIG-3 drops.
		{Name: "edge", VIP: f.vipTCP.String(), Protocol: compiler.ProtoTCP, Ports: compiler.Ports{List: []uint16{8443}},
			SessionAffinity: affinity, ConnectionTrackingPolicy: ctp(), RingSize: 101,
			FailoverPolicy: &compiler.FailoverPolicy{FailoverRatio: &ratio, DropTrafficIfUnhealthy: true},
			Backends: []compiler.BackendGroup{
				{Name: "ig-e", Endpoints: endpoints(f, "e", 30, 1, false)},
				{Name: "ig-f", Failover: true, Endpoints: endpoints(f, "f", 31, 1, false)},
			}},
	}
	if dsr {
		cfg.Services[2].Encapsulation = compiler.EncapL2DSR
	}
	return cfg
}

// pair drives both datapaths.
type pair struct {
	t      *testing.T
	cfg    *compiler.Config
	st     compiler.State
	ir     *compiler.IR
	sim    *sim.Datapath
	xdp    *xdp.Target
	now    time.Duration
	events int
}

func (p *pair) reconcile(ctx context.Context) {
	p.t.Helper()
	if _, err := compiler.Validate(p.cfg); err != nil {
		p.t.Fatalf("generated configuration invalid: %v", err)
	}
	rec, err := controller.Reconcile(p.cfg, p.st, p.ir, p.now)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.sim.Apply(ctx, rec.Diff); err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.xdp.Apply(ctx, rec.Diff); err != nil {
		p.t.Fatal(err)
	}
	p.ir = rec.IR
	p.events++
	// The kernel's maps must hold exactly what the reference holds.
	held, err := p.xdp.Read(ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	if d := compiler.DiffIR(held, p.sim.IR()); !d.Empty() {
		p.t.Fatalf("t=%v: the maps differ from the reference IR by %d writes:\n%s", p.now, len(d.Changes), d.Summary())
	}
}

func (p *pair) advance(ctx context.Context, to time.Duration) {
	for {
		dl, ok := controller.NextDeadline(p.ir)
		if !ok || dl > to {
			break
		}
		p.now = dl
		p.reconcile(ctx)
	}
	p.now = to
}

func TestDifferentialAgainstSim(t *testing.T) {
	needBPF(t)
	ctx := context.Background()
	total, byCT, byAction := 0, map[string]int{}, map[string]int{}
	combo := 0
	for _, f := range families {
		for _, aff := range affinities {
			for _, mode := range modes {
				persists := []string{compiler.PersistDefault, compiler.PersistNever, compiler.PersistAlways}
				persist := persists[combo%3]
				if mode == compiler.TrackPerSession && persist == compiler.PersistAlways {
					persist = compiler.PersistDefault
				}
				seed := uint64(combo)
				dsr := combo%2 == 1
				combo++
				name := fmt.Sprintf("%s/%s/%s/%s", f.name, aff, mode, persist)
				t.Run(name, func(t *testing.T) {
					n := runDifferential(ctx, t, f, diffConfig(f, aff, mode, persist, dsr), seed, 0, byCT, byAction)
					total += n
				})
			}
		}
	}
	t.Logf("%d packets agreed with the reference; ct %v; actions %v", total, byCT, byAction)
	if byAction[targets.TooBig.String()] == 0 {
		t.Error("no packet was answered too big: the generator's oversize packets (R-MTU) did not reach the check")
	}
	if total < 20000 && !t.Failed() {
		t.Fatalf("only %d packets compared, want ≥ 20000", total)
	}
}

// TestRAGE_DifferentialAtProductionTick runs four of the combinations on a
// test clock with production's tick (4 ms, HZ=250): the program then keeps
// an entry one tick past its idle timeout, and the reference, given the
// same tick geometry, must predict every packet.
func TestRAGE_DifferentialAtProductionTick(t *testing.T) {
	needBPF(t)
	ctx := context.Background()
	byCT, byAction := map[string]int{}, map[string]int{}
	total := 0
	for i, f := range families {
		for j, aff := range []string{compiler.AffinityNone, compiler.AffinityClientIP} {
			mode := modes[j]
			t.Run(fmt.Sprintf("%s/%s/%s", f.name, aff, mode), func(t *testing.T) {
				total += runDifferential(ctx, t, f, diffConfig(f, aff, mode, compiler.PersistDefault, false), uint64(100+2*i+j), 4*time.Millisecond, byCT, byAction)
			})
		}
	}
	t.Logf("%d packets agreed at a 4 ms tick; ct %v", total, byCT)
}

// tickedConntrack is the XDP program's clock as the reference sees it:
// entries age in whole ticks (ticks of now − ticks of last seen), and a
// difference of n ticks is at least (n − 1) ticks and 1 ns of real time,
// which is how the program's limit ⌈(idle − 1 ns)/tick⌉ + 1 reads it
// (fallback.IdleTicks).
type tickedConntrack struct {
	*sim.Exact
	tick time.Duration
}

var _ sim.Ager = (*tickedConntrack)(nil)

func (c *tickedConntrack) Aged(e sim.Entry, now, idle time.Duration) (bool, time.Duration) {
	n := now/c.tick - e.LastSeen/c.tick
	age := time.Duration(0)
	if n > 0 {
		age = (n-1)*c.tick + 1
	}
	return age >= idle, age
}

// runDifferential drives one configuration. tick is the XDP test
// clock's tick (0: 1 ns, exact); with a coarser one the reference is given
// the program's tick geometry (tickedConntrack) and the clock also moves
// by single ticks, so entries are looked up at their idle timeout and one
// tick after it.
func runDifferential(ctx context.Context, t *testing.T, f family, cfg *compiler.Config, seed uint64, tick time.Duration, byCT, byAction map[string]int) int {
	rnd := rand.New(rand.NewPCG(seed, 0x1bc))
	tgt, err := xdp.NewReplay(xdp.ReplayOptions{TunnelSource4: netip.MustParseAddr(cfg.Tunnel.SourceIPv4), TunnelSource6: netip.MustParseAddr(cfg.Tunnel.SourceIPv6), Tick: tick, MTU: compiler.DefaultMTU})
	if err != nil {
		t.Fatalf("load the XDP test build: %v", err)
	}
	defer tgt.Close()
	st := compiler.State{}
	for _, e := range cfg.Services[1].Backends[0].Endpoints {
		st.SetWeight(e.Name, 1+rnd.IntN(5))
	}
	so := sim.Options{}
	if tick > 0 {
		so.Conntrack = &tickedConntrack{Exact: sim.NewExact(), tick: tick}
	}
	p := &pair{t: t, cfg: cfg, st: st, sim: sim.New(so), xdp: tgt}
	p.reconcile(ctx)

	type flow struct {
		client     netip.Addr
		sport      uint16
		vip        netip.Addr
		dport      uint16
		proto      uint8
		fragID     uint32
		nextIsSYN  bool
		icmpQuoted bool
	}
	var flows []*flow
	newFlow := func() *flow {
		fl := &flow{client: f.client(rnd.IntN(12)), sport: uint16(30000 + rnd.IntN(8)*7), nextIsSYN: true}
		switch r := rnd.IntN(10); {
		case r < 4:
			fl.proto, fl.vip, fl.dport = compiler.IPProtoTCP, f.vipTCP, []uint16{80, 443, 8443}[rnd.IntN(3)]
		case r < 7:
			fl.proto, fl.vip, fl.dport = compiler.IPProtoUDP, f.vipUDP, uint16(5000+rnd.IntN(3))
		case r < 8:
			fl.proto, fl.vip, fl.dport = compiler.IPProtoTCP, f.vipL3, uint16(22)
		default:
			fl.proto, fl.vip = []uint8{compiler.IPProtoESP, compiler.IPProtoGRE, compiler.IPProtoICMP}[rnd.IntN(3)], f.vipL3
			if fl.proto == compiler.IPProtoICMP && f.vipL3.Is6() {
				fl.proto = compiler.IPProtoICMPv6
			}
		}
		return fl
	}
	removed := 0
	for i := 0; i < packetsPerConfig; i++ {
		// The clock: half-second steps, so entries meet their 10 s idle
		// timeout exactly now and then.
		if rnd.IntN(8) == 0 {
			p.advance(ctx, p.now+time.Duration(1+rnd.IntN(6))*500*time.Millisecond)
		} else if tick > 0 && rnd.IntN(8) == 0 {
			p.advance(ctx, p.now+tick)
		}
		// Events.
		if i > 0 && i%150 == 0 {
			p.event(ctx, rnd, f, &removed)
		}
		if len(flows) < 40 || rnd.IntN(4) == 0 {
			flows = append(flows, newFlow())
		}
		fl := flows[rnd.IntN(len(flows))]
		pkt := targets.Packet{Src: fl.client, Dst: fl.vip, Proto: fl.proto, PayloadLen: 8 + rnd.IntN(40)}
		if fl.proto == compiler.IPProtoTCP || fl.proto == compiler.IPProtoUDP {
			pkt.SrcPort, pkt.DstPort = fl.sport, fl.dport
		}
		switch fl.proto {
		case compiler.IPProtoTCP:
			switch {
			case fl.nextIsSYN || rnd.IntN(20) == 0:
				pkt.Flags = targets.FlagSYN
				fl.nextIsSYN = false
			case rnd.IntN(15) == 0:
				pkt.Flags = targets.FlagACK | targets.FlagFIN
			case rnd.IntN(30) == 0:
				pkt.Flags = targets.FlagRST
			default:
				pkt.Flags = targets.FlagACK | targets.FlagPSH
			}
		case compiler.IPProtoICMP:
			pkt.ICMPType = 8
		case compiler.IPProtoICMPv6:
			pkt.ICMPType = 128
		}
		if rnd.IntN(8) == 0 {
			pkt.VLAN = []uint16{10, 100, 4094}[rnd.IntN(3)] // R-VLAN: changes no decision
		}
		if rnd.IntN(10) == 0 {
			// R-MTU: a full-size packet, around the egress MTU (1500 on
			// both sides) once encapsulated; DF on most IPv4 ones (IPv6
			// always counts as DF).
			pkt.PayloadLen, pkt.DF = 1400+rnd.IntN(81), rnd.IntN(4) != 0
		}
		switch r := rnd.IntN(20); {
		case r == 0 && fl.proto != compiler.IPProtoICMP && fl.proto != compiler.IPProtoICMPv6:
			pkt.Frag = targets.Frag(1 + rnd.IntN(3))
			fl.fragID++
			pkt.FragID = fl.fragID
			if pkt.Frag != targets.FragFirst {
				pkt.SrcPort, pkt.DstPort, pkt.Flags = 0, 0, 0
			}
		case r == 1 && (fl.proto == compiler.IPProtoTCP || fl.proto == compiler.IPProtoUDP):
			// An ICMP error about the reply this flow's backend sent.
			pkt = icmpError(f, rnd, fl.vip, fl.client, fl.proto, fl.dport, fl.sport, pkt.VLAN)
		case r == 2:
			pkt.Dst = f.other // not ours
		}
		p.compare(t, pkt, i, byCT, byAction)
		if t.Failed() {
			return i
		}
	}
	return packetsPerConfig
}

func icmpError(f family, rnd *rand.Rand, vip, client netip.Addr, proto uint8, vport, cport, vlan uint16) targets.Packet {
	pkt := targets.Packet{Src: f.router, Dst: vip, VLAN: vlan, Inner: &compiler.Tuple{Src: vip, Dst: client, Proto: proto, SrcPort: vport, DstPort: cport}}
	if vip.Is4() {
		pkt.Proto = compiler.IPProtoICMP
		pkt.ICMPType, pkt.ICMPCode = []uint8{3, 11, 12}[rnd.IntN(3)], 4
	} else {
		pkt.Proto = compiler.IPProtoICMPv6
		pkt.ICMPType = uint8(1 + rnd.IntN(4))
	}
	return pkt
}

// event changes health, weight or membership, as a trace's events do.
func (p *pair) event(ctx context.Context, rnd *rand.Rand, f family, removed *int) {
	svc := &p.cfg.Services[rnd.IntN(len(p.cfg.Services))]
	var all []*compiler.Endpoint
	for gi := range svc.Backends {
		for ei := range svc.Backends[gi].Endpoints {
			all = append(all, &svc.Backends[gi].Endpoints[ei])
		}
	}
	switch r := rnd.IntN(6); {
	case r <= 2 && len(all) > 0:
		e := all[rnd.IntN(len(all))]
		p.st.SetHealthy(e.Name, !p.st.IsHealthy(e.Name))
	case r == 3 && svc.Weighted():
		e := all[rnd.IntN(len(all))]
		p.st.SetWeight(e.Name, rnd.IntN(4))
	case r == 4 && len(all) > 1:
		g := &svc.Backends[rnd.IntN(len(svc.Backends))]
		if len(g.Endpoints) > 1 {
			g.Endpoints = g.Endpoints[1:]
		}
	default:
		g := &svc.Backends[rnd.IntN(len(svc.Backends))]
		*removed++
		e := compiler.Endpoint{Name: fmt.Sprintf("n%d", *removed), IP: f.backend(100 + *removed)}
		if svc.Encap() == compiler.EncapL2DSR {
			e.MAC = fmt.Sprintf("02:00:00:01:00:%02x", *removed%256)
		}
		if svc.Weighted() {
			p.st.SetWeight(e.Name, 1+rnd.IntN(3))
		}
		g.Endpoints = append(g.Endpoints, e)
	}
	p.reconcile(ctx)
}

func (p *pair) compare(t *testing.T, pkt targets.Packet, i int, byCT, byAction map[string]int) {
	t.Helper()
	now := p.now
	want, err := p.sim.Process(context.Background(), pkt, now)
	if err != nil {
		t.Fatalf("packet %d: sim: %v", i, err)
	}
	got, frame, err := p.xdp.ProcessFrame(pkt, now)
	if err != nil {
		t.Fatalf("packet %d %+v: xdp: %v", i, pkt, err)
	}
	if !got.Same(want) {
		t.Fatalf("packet %d at t=%v: %s %v→%v proto %d ports %d→%d flags %#x frag %s icmp %d inner %v:\n  sim: %s (service %d)\n  xdp: %s (service %d)\n  sim steps: %v",
			i, p.now, "", pkt.Src, pkt.Dst, pkt.Proto, pkt.SrcPort, pkt.DstPort, pkt.Flags, pkt.Frag, pkt.ICMPType, pkt.Inner, want, want.ServiceID, got, got.ServiceID, want.Steps)
	}
	byCT[got.CT]++
	byAction[got.Action.String()]++
	in, _ := xdp.BuildPacket(pkt)
	switch got.Action {
	case targets.Forward:
		if err := checkFrame(p.ir, got.BackendID, in, frame, pkt.VLAN); err != nil {
			t.Fatalf("packet %d: output frame: %v", i, err)
		}
	case targets.TooBig:
		if err := checkTooBig(in, frame, pkt, got.MTU); err != nil {
			t.Fatalf("packet %d: ICMP answer: %v", i, err)
		}
	}
}

// checkFrame parses the frame the program sent with gopacket and checks
// that it is what the backend must receive: IP-in-IP with the tunnel
// source, the backend's address, TTL 64 and a valid header checksum,
// carrying the original packet unchanged; or, for L2 DSR, the original
// packet with the backend's MAC.
func checkFrame(ir *compiler.IR, backendID uint32, in, out []byte, vlan uint16) error {
	b := ir.Backend(backendID)
	svc := ir.Service(b.ServiceID)
	pk := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	if el := pk.ErrorLayer(); el != nil {
		return fmt.Errorf("gopacket: %v", el.Error())
	}
	eth, _ := pk.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if eth == nil {
		return fmt.Errorf("no Ethernet header")
	}
	wantDst := xdp.RouterMAC[:]
	if b.MAC != [6]byte{} {
		wantDst = b.MAC[:]
	}
	if !bytes.Equal(eth.DstMAC, wantDst) || !bytes.Equal(eth.SrcMAC, xdp.LBMAC[:]) {
		return fmt.Errorf("MACs %s → %s, want %x → %x", eth.SrcMAC, eth.DstMAC, xdp.LBMAC, wantDst)
	}
	// R-VLAN: the tag stays in front of what is sent.
	l2 := 14
	etype := eth.EthernetType
	d, _ := pk.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q)
	switch {
	case vlan == 0 && d != nil:
		return fmt.Errorf("a VLAN tag (%d) on an untagged packet's output", d.VLANIdentifier)
	case vlan != 0 && (d == nil || d.VLANIdentifier != vlan):
		return fmt.Errorf("VLAN tag %v on the output, want %d kept", d, vlan)
	case vlan != 0:
		l2, etype = 18, d.Type
	}
	if svc.Encap == compiler.EncapKindL2DSR {
		if !bytes.Equal(out[12:], in[12:]) {
			return fmt.Errorf("L2 DSR changed the packet beyond the MACs")
		}
		return nil
	}
	var inner []byte
	switch etype {
	case layers.EthernetTypeIPv4:
		ip, _ := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if ip == nil {
			return fmt.Errorf("no outer IPv4")
		}
		if ip.TTL != 64 || ip.SrcIP.String() != ir.TunnelSource4.String() || ip.DstIP.String() != b.IP.String() {
			return fmt.Errorf("outer IPv4 %s → %s ttl %d, want %s → %s ttl 64", ip.SrcIP, ip.DstIP, ip.TTL, ir.TunnelSource4, b.IP)
		}
		hdr := out[l2 : l2+20]
		if sum := onesSum(hdr); sum != 0xffff {
			return fmt.Errorf("outer IPv4 header checksum %#04x is wrong", ip.Checksum)
		}
		want := layers.IPProtocolIPv4
		if in[l2-2] == 0x86 {
			want = layers.IPProtocolIPv6
		}
		if ip.Protocol != want || int(ip.Length) != len(out)-l2 {
			return fmt.Errorf("outer IPv4 protocol %d length %d, want %d, %d", ip.Protocol, ip.Length, want, len(out)-l2)
		}
		inner = out[l2+20:]
	case layers.EthernetTypeIPv6:
		ip, _ := pk.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		if ip == nil {
			return fmt.Errorf("no outer IPv6")
		}
		if ip.HopLimit != 64 || ip.SrcIP.String() != ir.TunnelSource6.String() || ip.DstIP.String() != b.IP.String() {
			return fmt.Errorf("outer IPv6 %s → %s hop limit %d, want %s → %s 64", ip.SrcIP, ip.DstIP, ip.HopLimit, ir.TunnelSource6, b.IP)
		}
		want := layers.IPProtocolIPv4
		if in[l2-2] == 0x86 {
			want = layers.IPProtocolIPv6
		}
		if ip.NextHeader != want || int(ip.Length) != len(out)-l2-40 {
			return fmt.Errorf("outer IPv6 next header %d payload %d, want %d, %d", ip.NextHeader, ip.Length, want, len(out)-l2-40)
		}
		inner = out[l2+40:]
	default:
		return fmt.Errorf("ethertype %s, want IPv4 or IPv6", etype)
	}
	if !bytes.Equal(inner, in[l2:]) {
		return fmt.Errorf("the encapsulated packet differs from the one received")
	}
	return nil
}

func onesSum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// needBPF skips a test that loads a BPF program when this process may not
// (non-root); CI runs as root, and targets/sim covers the same behaviour.
func needBPF(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF programs (CI runs as root); the reference model (targets/sim) covers the same behaviour")
	}
}
