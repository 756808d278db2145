package bmv2

import (
	"net/netip"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
)

// TestDescribeNamesProtocols: a write's description in an error names
// the VIP row's protocol (tcp, udp) as lbc status does, not its number
// (issue 36).
func TestDescribeNamesProtocols(t *testing.T) {
	tg := &Target{svcNames: map[uint32]string{1: "web"}}
	vip := netip.MustParseAddr("203.0.113.10")
	for _, tc := range []struct {
		key  compiler.VIPKey
		want string
	}{
		{compiler.VIPKey{VIP: vip, Proto: compiler.IPProtoTCP, Port: 80, Kind: compiler.MatchPort}, `insert vip 203.0.113.10 proto tcp port 80 → service "web"`},
		{compiler.VIPKey{VIP: vip, Proto: compiler.IPProtoUDP, Kind: compiler.MatchAllPorts}, `insert vip 203.0.113.10 proto udp all ports → service "web"`},
		{compiler.VIPKey{VIP: vip, Kind: compiler.MatchAnyProto}, `insert vip 203.0.113.10 any protocol → service "web"`},
	} {
		c := compiler.Change{Table: "vip", Op: compiler.Insert, VIP: &compiler.VIPRow{Key: tc.key, ServiceID: 1}}
		if got := tg.describe(c); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}
