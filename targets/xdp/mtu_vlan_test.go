package xdp_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/sim"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// mtuIR is one TCP service on vip:80 (IP-in-IP) with one backend of the
// given address, and an L2 DSR service on vip:8080 with a MAC.
func mtuIR(vip, backend netip.Addr) *compiler.IR {
	ir := &compiler.IR{TunnelSource4: netip.MustParseAddr("192.0.2.1"), TunnelSource6: netip.MustParseAddr("2001:db8::1")}
	for i, port := range []uint16{80, 8080} {
		id := uint32(1 + i)
		ir.VIPs = append(ir.VIPs, compiler.VIPRow{Key: compiler.VIPKey{VIP: vip, Proto: compiler.IPProtoTCP, Port: port, Kind: compiler.MatchPort}, ServiceID: id})
		s := compiler.ServiceRow{ID: id, Name: fmt.Sprint("s", id), RingSize: 3, IdleTimeoutSec: 60, SynNew: true}
		if port == 8080 {
			s.Encap = compiler.EncapKindL2DSR
		}
		for c := range s.Classes {
			s.Classes[c] = compiler.PolicyFor(compiler.Class(c), compiler.AffinityNone, compiler.TrackPerConnection, compiler.PersistDefault)
		}
		ir.Services = append(ir.Services, s)
		bid := 10 * id
		ir.Rings = append(ir.Rings, compiler.RingRows{ServiceID: id, Halves: [2][]uint32{{bid, bid, bid}, nil}})
		ir.Backends = append(ir.Backends, compiler.BackendRow{ID: bid, ServiceID: id, Name: fmt.Sprint("b", bid), IP: backend, MAC: [6]byte{2, 0, 0, 0, 0, byte(id)}, Healthy: true})
	}
	return ir
}

// TestRMTU_TooBigAnswer: an IP-in-IP packet that would exceed the egress
// MTU (1500 here) once encapsulated is answered from the VIP with ICMP
// fragmentation needed (type 3 code 4, next-hop MTU = 1500 − 20 or − 40)
// or ICMPv6 packet too big, when it may not be fragmented (IPv4 DF, every
// IPv6 packet): the answer's headers and checksums are right, it quotes
// the packet's start, goes back where the packet came from and keeps its
// VLAN tag. Without DF it is forwarded; at exactly the MTU it is
// forwarded; L2 DSR adds nothing and is never answered. Answers count in
// too-big, and the conntrack step happened (R-MTU).
func TestRMTU_TooBigAnswer(t *testing.T) {
	needBPF(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name           string
		client, vip, b netip.Addr
	}{
		{"ipv4 over ipv4", netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("10.0.0.1")},
		{"ipv4 over ipv6", netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("2001:db8:b::1")},
		{"ipv6 over ipv6", netip.MustParseAddr("2001:db8:c::7"), netip.MustParseAddr("2001:db8:100::10"), netip.MustParseAddr("2001:db8:b::1")},
		{"ipv6 over ipv4", netip.MustParseAddr("2001:db8:c::7"), netip.MustParseAddr("2001:db8:100::10"), netip.MustParseAddr("10.0.0.1")},
	} {
		for _, from := range []string{"replay option", "configuration (IR.MTU)"} {
			t.Run(tc.name+", MTU from the "+from, func(t *testing.T) {
				ro := xdp.ReplayOptions{TunnelSource4: netip.MustParseAddr("192.0.2.1"), TunnelSource6: netip.MustParseAddr("2001:db8::1")}
				ir := mtuIR(tc.vip, tc.b)
				if from == "replay option" {
					ro.MTU = 1500
				} else {
					ir.MTU = 1500
				}
				tgt, err := xdp.NewReplay(ro)
				if err != nil {
					t.Fatal(err)
				}
				defer tgt.Close()
				if _, err := tgt.Apply(ctx, compiler.DiffIR(nil, ir)); err != nil {
					t.Fatal(err)
				}
				if err := tgt.Commit(ir); err != nil {
					t.Fatal(err)
				}
				over := 20
				if tc.b.Is6() {
					over = 40
				}
				base := targets.Packet{Src: tc.client, Dst: tc.vip, Proto: compiler.IPProtoTCP, SrcPort: 40000, DstPort: 80, Flags: targets.FlagACK, DF: true}
				// Payload sized so that the IP datagram is n bytes.
				sized := func(p targets.Packet, n int) targets.Packet {
					p.PayloadLen = 1
					f, err := xdp.BuildPacket(p)
					if err != nil {
						t.Fatal(err)
					}
					l2 := 14
					if p.VLAN != 0 {
						l2 = 18
					}
					p.PayloadLen = n - (len(f) - l2 - 1)
					return p
				}
				answered := 0
				for _, c := range []struct {
					name string
					pkt  targets.Packet
					want targets.Action
				}{
					{"fits exactly", sized(base, 1500-over), targets.Forward},
					{"one byte over, DF", sized(base, 1500-over+1), targets.TooBig},
					{"one byte over, DF, VLAN 42", func() targets.Packet { p := sized(base, 1500-over+1); p.VLAN = 42; return p }(), targets.TooBig},
					{"one byte over, no DF", func() targets.Packet { p := sized(base, 1500-over+1); p.DF = false; return p }(), map[bool]targets.Action{true: targets.Forward, false: targets.TooBig}[tc.client.Is4()]},
					{"SYN of a new flow, over", func() targets.Packet { p := sized(base, 1500); p.SrcPort, p.Flags = 40001, targets.FlagSYN; return p }(), targets.TooBig},
					{"L2 DSR, over", func() targets.Packet { p := sized(base, 1500); p.DstPort = 8080; return p }(), targets.Forward},
				} {
					v, out, err := tgt.ProcessFrame(c.pkt, 0)
					if err != nil {
						t.Fatal(err)
					}
					if v.Action != c.want {
						t.Fatalf("%s: %s, want %s", c.name, v, c.want)
					}
					if v.Action != targets.TooBig {
						continue
					}
					answered++
					if want := uint16(1500 - over); v.MTU != want {
						t.Fatalf("%s: announced MTU %d, want %d", c.name, v.MTU, want)
					}
					if v.BackendID == 0 || v.CT == "" {
						t.Fatalf("%s: %+v: the conntrack step did not happen", c.name, v)
					}
					in, _ := xdp.BuildPacket(c.pkt)
					if err := checkTooBig(in, out, c.pkt, v.MTU); err != nil {
						t.Fatalf("%s: %v", c.name, err)
					}
				}
				// The SYN's entry was created: its next packet is a hit.
				next := sized(base, 100)
				next.SrcPort = 40001
				if v, err := tgt.Process(ctx, next, 0); err != nil || v.CT != targets.CTHit {
					t.Fatalf("after an answered SYN: %s %v, want a conntrack hit", v, err)
				}
				c, err := tgt.Counters(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if c.TooBig != uint64(answered) {
					t.Fatalf("too-big counter %d, want %d", c.TooBig, answered)
				}
				// The one DF-clear IPv4 packet over the MTU was forwarded, and counted.
				st, err := tgt.Datapath().ReadStats()
				if err != nil {
					t.Fatal(err)
				}
				if want := map[bool]uint64{true: 1, false: 0}[tc.client.Is4()]; st.Global["forward-oversize"] != want {
					t.Fatalf("forward-oversize %d, want %d", st.Global["forward-oversize"], want)
				}
				// Read returns the configuration's MTU, not the one in effect.
				back, err := tgt.Read(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if back.MTU != ir.MTU {
					t.Fatalf("Read says MTU %d, the configuration %d", back.MTU, ir.MTU)
				}
			})
		}
	}
}

// TestRMTU_ReplayMTUIsTheModels (issue 24 §3): a replay runs on no
// interface; without tunnel.mtu it checks the MTU the reference model
// uses, compiler.DefaultMTU (it used to check none: a DF packet the model
// answered too big was forwarded). With ReplayOptions.MTU (the model's
// sim.Options.MTU) both use that one. Each packet, a byte under and over
// what fits once encapsulated, gets the same verdict from both.
func TestRMTU_ReplayMTUIsTheModels(t *testing.T) {
	needBPF(t)
	vip := netip.MustParseAddr("203.0.113.10")
	ir := mtuIR(vip, netip.MustParseAddr("10.0.0.1"))
	for _, mtu := range []uint16{0, 9000} {
		t.Run(fmt.Sprintf("MTU option %d", mtu), func(t *testing.T) {
			tgt, err := xdp.NewReplay(xdp.ReplayOptions{TunnelSource4: netip.MustParseAddr("192.0.2.1"), MTU: mtu})
			if err != nil {
				t.Fatal(err)
			}
			defer tgt.Close()
			ref := sim.New(sim.Options{MTU: mtu})
			for _, d := range []targets.Target{tgt, ref} {
				if _, err := d.Apply(t.Context(), compiler.DiffIR(nil, ir)); err != nil {
					t.Fatal(err)
				}
			}
			effective := mtu
			if effective == 0 {
				effective = compiler.DefaultMTU
			}
			base := targets.Packet{Src: netip.MustParseAddr("198.51.100.7"), Dst: vip, Proto: compiler.IPProtoTCP, DstPort: 80, Flags: targets.FlagSYN, DF: true, PayloadLen: 1}
			f, err := xdp.BuildPacket(base)
			if err != nil {
				t.Fatal(err)
			}
			hdrs := len(f) - 14 - 1 // IP and TCP headers
			for i, over := range []int{0, 1} {
				p := base
				p.SrcPort = uint16(1000 + i)
				p.PayloadLen = int(effective) - 20 - hdrs + over
				vx, err := tgt.Process(t.Context(), p, 0)
				if err != nil {
					t.Fatal(err)
				}
				vs, err := ref.Process(t.Context(), p, 0)
				if err != nil {
					t.Fatal(err)
				}
				want, wantMTU := targets.Forward, uint16(0)
				if over > 0 {
					want, wantMTU = targets.TooBig, effective-20
				}
				if vx.Action != want || vx.MTU != wantMTU || !vx.Same(vs) {
					t.Errorf("%d-byte DF packet, egress MTU %d: xdp %s (mtu %d), model %s (mtu %d), want %s (mtu %d) from both",
						p.PayloadLen+hdrs, effective, vx, vx.MTU, vs, vs.MTU, want, wantMTU)
				}
			}
		})
	}
}

// checkTooBig parses the answer with gopacket and checks it field by field.
func checkTooBig(in, out []byte, p targets.Packet, mtu uint16) error {
	pk := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	if el := pk.ErrorLayer(); el != nil {
		return fmt.Errorf("gopacket: %v", el.Error())
	}
	eth := pk.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if !bytes.Equal(eth.DstMAC, xdp.RouterMAC[:]) || !bytes.Equal(eth.SrcMAC, xdp.LBMAC[:]) {
		return fmt.Errorf("MACs %s → %s, want back to the router", eth.SrcMAC, eth.DstMAC)
	}
	l2 := 14
	if p.VLAN != 0 {
		d, _ := pk.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q)
		if d == nil || d.VLANIdentifier != p.VLAN {
			return fmt.Errorf("VLAN tag %v, want %d kept", d, p.VLAN)
		}
		l2 = 18
	} else if pk.Layer(layers.LayerTypeDot1Q) != nil {
		return fmt.Errorf("a VLAN tag on an untagged packet's answer")
	}
	const quote = 128
	ipIn := in[l2:]
	if p.Src.Is4() {
		ip, _ := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if ip == nil || ip.SrcIP.String() != p.Dst.String() || ip.DstIP.String() != p.Src.String() || ip.Protocol != layers.IPProtocolICMPv4 || ip.TTL != 64 {
			return fmt.Errorf("IPv4 header %+v, want ICMP from the VIP to the client", ip)
		}
		hdr := out[l2 : l2+20]
		if onesSum(hdr) != 0xffff || int(ip.Length) != len(out)-l2 {
			return fmt.Errorf("IPv4 header checksum or length wrong")
		}
		icmp := out[l2+20:]
		if icmp[0] != 3 || icmp[1] != 4 || binary.BigEndian.Uint16(icmp[6:]) != mtu || onesSum(icmp) != 0xffff {
			return fmt.Errorf("ICMP type %d code %d MTU %d (checksum ok %v), want 3/4/%d", icmp[0], icmp[1], binary.BigEndian.Uint16(icmp[6:]), onesSum(icmp) == 0xffff, mtu)
		}
		if !bytes.Equal(icmp[8:], ipIn[:quote]) {
			return fmt.Errorf("the quote is not the packet's first %d bytes", quote)
		}
		return nil
	}
	ip, _ := pk.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	if ip == nil || ip.SrcIP.String() != p.Dst.String() || ip.DstIP.String() != p.Src.String() || ip.NextHeader != layers.IPProtocolICMPv6 || ip.HopLimit != 64 {
		return fmt.Errorf("IPv6 header %+v, want ICMPv6 from the VIP to the client", ip)
	}
	icmp := out[l2+40:]
	if int(ip.Length) != len(icmp) || icmp[0] != 2 || icmp[1] != 0 || binary.BigEndian.Uint32(icmp[4:]) != uint32(mtu) {
		return fmt.Errorf("ICMPv6 type %d code %d MTU %d length %d, want 2/0/%d", icmp[0], icmp[1], binary.BigEndian.Uint32(icmp[4:]), ip.Length, mtu)
	}
	var pseudo []byte
	pseudo = append(pseudo, p.Dst.AsSlice()...)
	pseudo = append(pseudo, p.Src.AsSlice()...)
	pseudo = binary.BigEndian.AppendUint32(pseudo, uint32(len(icmp)))
	pseudo = append(pseudo, 0, 0, 0, 58)
	if onesSum(append(pseudo, icmp...)) != 0xffff {
		return fmt.Errorf("ICMPv6 checksum wrong")
	}
	if !bytes.Equal(icmp[8:], ipIn[:quote]) {
		return fmt.Errorf("the quote is not the packet's first %d bytes", quote)
	}
	return nil
}

// TestRVLAN_TagsKept: a packet with one 802.1Q tag, or two (802.1ad QinQ,
// which targets.Packet cannot describe, so built here by hand), is
// balanced exactly as the same packet untagged, and the tags stay in
// front of what is forwarded: before the outer IP header of IP-in-IP, in
// place for L2 DSR (R-VLAN).
func TestRVLAN_TagsKept(t *testing.T) {
	needBPF(t)
	ctx := t.Context()
	tgt, err := xdp.NewReplay(xdp.ReplayOptions{TunnelSource4: netip.MustParseAddr("192.0.2.1"), TunnelSource6: netip.MustParseAddr("2001:db8::1")})
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	vip := netip.MustParseAddr("203.0.113.10")
	ir := mtuIR(vip, netip.MustParseAddr("10.0.0.1"))
	if _, err := tgt.Apply(ctx, compiler.DiffIR(nil, ir)); err != nil {
		t.Fatal(err)
	}
	for _, port := range []uint16{80, 8080} {
		p := targets.Packet{Src: netip.MustParseAddr("198.51.100.7"), Dst: vip, Proto: compiler.IPProtoTCP, SrcPort: 41000, DstPort: port, Flags: targets.FlagSYN}
		untagged, _ := xdp.BuildPacket(p)
		vu, outU, err := tgt.RunFrame(untagged, 0)
		if err != nil {
			t.Fatal(err)
		}
		// One tag, then QinQ: 802.1ad outer (VID 100), 802.1Q inner (VID 42).
		one := insertTags(untagged, []uint16{0x8100, 42})
		two := insertTags(untagged, []uint16{0x88a8, 100, 0x8100, 42})
		for _, in := range [][]byte{one, two} {
			tags := (len(in) - len(untagged)) / 4
			v, out, err := tgt.RunFrame(in, 0)
			if err != nil {
				t.Fatal(err)
			}
			if v.Action != vu.Action || v.BackendID != vu.BackendID {
				t.Fatalf("port %d, %d tags: %s, untagged %s", port, tags, v, vu)
			}
			// The tagged output is the untagged one with the same tags
			// after the MACs.
			if want := insertTags(outU, tagWords(in, tags)); !bytes.Equal(out, want) {
				t.Fatalf("port %d, %d tags: output\n%x\nwant\n%x", port, tags, out, want)
			}
		}
	}
	c, err := tgt.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = c
	s, err := tgt.Datapath().ReadStats()
	if err != nil {
		t.Fatal(err)
	}
	if s.Global["vlan"] != 4 {
		t.Fatalf("vlan counter %d, want 4", s.Global["vlan"])
	}
}

// insertTags puts 16-bit words (TPID, TCI, ...) after a frame's MACs.
func insertTags(frame []byte, words []uint16) []byte {
	out := append([]byte(nil), frame[:12]...)
	for _, w := range words {
		out = binary.BigEndian.AppendUint16(out, w)
	}
	return append(out, frame[12:]...)
}

func tagWords(frame []byte, tags int) []uint16 {
	var w []uint16
	for i := 0; i < 2*tags; i++ {
		w = append(w, binary.BigEndian.Uint16(frame[12+2*i:]))
	}
	return w
}
