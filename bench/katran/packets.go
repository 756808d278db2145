package main

import (
	"net/netip"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// The bench's addresses: one IPv4 TCP VIP on port 80, one client.
var (
	vip     = netip.MustParseAddr("203.0.113.10")
	notVIP  = netip.MustParseAddr("203.0.113.99")
	client  = netip.MustParseAddr("198.51.100.7")
	vipPort = uint16(80)
)

const payload = 64

// ack is the packet of a warm flow; syn the first of one.
func ack() targets.Packet {
	return targets.Packet{Src: client, Dst: vip, Proto: compiler.IPProtoTCP, SrcPort: 40000, DstPort: vipPort, Flags: targets.FlagACK, PayloadLen: payload}
}

func syn() targets.Packet {
	p := ack()
	p.Flags = targets.FlagSYN
	return p
}

// newFlowSource is the source address of the i-th new flow of the Repeat-1
// method: 100.64.0.0/10, so it never meets the wrapper's 10.0.0.0/8 nor the
// client.
func newFlowSource(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{100, 64 | byte(i>>16)&0x3f, byte(i >> 8), byte(i)})
}

func frame(p targets.Packet) ([]byte, error) { return xdp.BuildPacket(p) }

// newFlows builds n SYNs of distinct flows, starting at flow index from.
func newFlows(from, n int) ([][]byte, error) {
	out := make([][]byte, n)
	for i := range out {
		p := syn()
		p.Src = newFlowSource(from + i)
		f, err := frame(p)
		if err != nil {
			return nil, err
		}
		out[i] = f
	}
	return out, nil
}
