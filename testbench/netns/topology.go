// Package netns holds the test bench's namespace topologies (LBTopology:
// client, load balancer and backends on one bridge), built from the
// primitives of internal/netns.
package netns

import (
	"fmt"
	"net/netip"

	"github.com/lbc-dev/lbc/internal/netns"
)

// LBTopology is the testbench of the XDP datapath: one L2 segment (a
// bridge in its own namespace) joining a client, the load balancer and
// backends. Addresses are in 10.99.0.0/24 and VIPs in 10.99.100.0/24,
// all inside the namespaces of the set.
//
//	client (10.99.0.10, MTU 1400) ─┐ (all other links: MTU 1500)
//	lb     (10.99.0.2, XDP)       ─┼─ br0 (namespace "sw")
//	be1..N (10.99.0.11.., VIPs on lo, XDP decap) ─┘
type LBTopology struct {
	Set            *netns.Set
	Client, LB, SW string // namespace names
	Backends       []string
	ClientIP, LBIP netip.Addr
	BackendIPs     []netip.Addr
	BackendMACs    []string
	ClientIf, LBIf string // interfaces inside Client and LB
	LBPeer         string // the bridge port facing the LB (in SW)
	BackendIf      string // the interface inside each backend
	VIPs           []netip.Addr
	ClientMTU      int
}

// NewLBTopology builds the topology with n backends; VIPs are put on
// every backend's loopback and routed by the client to the LB. The client's
// MTU is 1400: its fragments carry no DF, and the XDP program cannot
// fragment the IP-in-IP packet it makes of a 1500-byte one, which a
// 1500-byte underlay then drops (docs/xdp.md, R-MTU). NewLBTopologyMTU
// chooses it.
func NewLBTopology(set *netns.Set, n int, vips []netip.Addr) (*LBTopology, error) {
	return NewLBTopologyMTU(set, n, vips, 1400)
}

// NewLBTopologyMTU is NewLBTopology with the client's MTU; every other
// link (the underlay from the LB to the backends) has 1500.
func NewLBTopologyMTU(set *netns.Set, n int, vips []netip.Addr, clientMTU int) (*LBTopology, error) {
	t := &LBTopology{Set: set, ClientIP: netip.MustParseAddr("10.99.0.10"), LBIP: netip.MustParseAddr("10.99.0.2"),
		ClientIf: "cl0", LBIf: "lb0", LBPeer: "sw-lb", BackendIf: "eth0", VIPs: vips, ClientMTU: clientMTU}
	var err error
	if t.SW, err = set.Add("sw"); err != nil {
		return nil, err
	}
	if t.Client, err = set.Add("client"); err != nil {
		return nil, err
	}
	if t.LB, err = set.Add("lb"); err != nil {
		return nil, err
	}
	ip := func(ns string, args ...string) {
		if err == nil {
			_, err = set.IP(ns, args...)
		}
	}
	// The bridge must carry malformed frames to the LB as a switch would:
	// br_netfilter would validate and drop bad IPv4 headers.
	if err = set.Sysctl(t.SW, "net.bridge.bridge-nf-call-iptables", "0"); err != nil {
		return nil, err
	}
	ip(t.SW, "link", "add", "br0", "type", "bridge")
	ip(t.SW, "link", "set", "br0", "up")
	// plug creates a veth with inner end `in` in ns and outer end `out`
	// on the bridge.
	plug := func(ns, in, out, mac string, mtu int) {
		ip(t.SW, "link", "add", out, "type", "veth", "peer", "name", in, "netns", ns)
		ip(t.SW, "link", "set", out, "master", "br0", "mtu", fmt.Sprint(mtu), "up")
		if mac != "" {
			ip(ns, "link", "set", in, "address", mac)
		}
		ip(ns, "link", "set", in, "mtu", fmt.Sprint(mtu), "up")
	}
	plug(t.Client, t.ClientIf, "sw-cl", "", t.ClientMTU)
	ip(t.Client, "addr", "add", t.ClientIP.String()+"/24", "dev", t.ClientIf)
	for _, v := range vips {
		ip(t.Client, "route", "add", v.String()+"/32", "via", t.LBIP.String())
	}
	plug(t.LB, t.LBIf, t.LBPeer, "02:99:00:00:00:02", 1500)
	ip(t.LB, "addr", "add", t.LBIP.String()+"/24", "dev", t.LBIf)
	for i := 0; i < n && err == nil; i++ {
		var ns string
		if ns, err = set.Add(fmt.Sprintf("be%d", i+1)); err != nil {
			break
		}
		addr := netip.AddrFrom4([4]byte{10, 99, 0, byte(11 + i)})
		mac := fmt.Sprintf("02:99:00:00:00:%02x", 0x11+i)
		plug(ns, t.BackendIf, fmt.Sprintf("sw-be%d", i+1), mac, 1500)
		ip(ns, "addr", "add", addr.String()+"/24", "dev", t.BackendIf)
		for _, v := range vips {
			ip(ns, "addr", "add", v.String()+"/32", "dev", "lo")
		}
		t.Backends = append(t.Backends, ns)
		t.BackendIPs = append(t.BackendIPs, addr)
		t.BackendMACs = append(t.BackendMACs, mac)
	}
	if err != nil {
		return nil, err
	}
	for _, ns := range append([]string{t.Client, t.LB}, t.Backends...) {
		for _, k := range []string{"net.ipv4.conf.all.rp_filter", "net.ipv4.conf.default.rp_filter"} {
			if err := set.Sysctl(ns, k, "0"); err != nil {
				return nil, err
			}
		}
	}
	// The client's packets cross an XDP_TX: no partial checksums, no GSO.
	if err := netns.Do(t.Client, func() error { return netns.DisableOffloads(t.ClientIf) }); err != nil {
		return nil, err
	}
	return t, nil
}
