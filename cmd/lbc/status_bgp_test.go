package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/controller"
)

// TestControllerStatusBGP: lbc status --controller prints the BGP sessions
// and every VIP, with the reason a VIP is withdrawn.
func TestControllerStatusBGP(t *testing.T) {
	st := controller.Status{Config: "lb.yaml", Ready: true, DigestsAgree: true, Announce: &controller.AnnounceStatus{
		Protocol: "bgp", LocalASN: 64512, RouterID: "10.0.0.2", Healthy: true,
		Peers: []controller.PeerStatus{
			{Address: "10.0.0.1", ASN: 64500, State: "established", Established: true, Flaps: 2, Advertised: 1, LastError: "hold_timer_expired"},
			{Address: "10.0.0.9", ASN: 64500, State: "active"},
		},
		VIPs: []controller.VIPAnnounce{
			{Prefix: "203.0.113.10/32", Announced: true, Communities: []string{"64512:100"}, LocalPref: 200},
			{Prefix: "203.0.113.11/32", Why: "no eligible backend (service api drops new connections)"},
		},
	}}
	var b bytes.Buffer
	writeControllerStatus(&b, st)
	out := b.String()
	for _, want := range []string{
		"BGP: AS 64512, router ID 10.0.0.2",
		"10.0.0.1  64500  established",
		"hold_timer_expired",
		"10.0.0.9  64500  active",
		"203.0.113.10/32  yes        64512:100    200",
		"203.0.113.11/32  WITHDRAWN  -            -           no eligible backend (service api drops new connections)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}
