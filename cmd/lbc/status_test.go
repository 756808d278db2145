package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
)

// TestStatusTextNamesProtocols: lbc status's text names each VIP row's
// protocol as its JSON does (tcp, udp), not by number (issue 36), for the
// three match kinds.
func TestStatusTextNamesProtocols(t *testing.T) {
	const cfg = `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: web
    vip: 203.0.113.10
    protocol: TCP
    ports: [80]
    backends: [{name: g, endpoints: [{name: w1, ip: 10.0.0.1}]}]
  - name: dns
    vip: 203.0.113.10
    protocol: UDP
    ports: ALL
    backends: [{name: g, endpoints: [{name: d1, ip: 10.0.0.2}]}]
  - name: rest
    vip: 203.0.113.10
    protocol: L3_DEFAULT
    backends: [{name: g, endpoints: [{name: r1, ip: 10.0.0.3}]}]
`
	dec, err := compiler.Load("lb.yaml", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	res, err := compiler.Compile(compiler.Input{Config: dec.Config})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	writeStatus(&b, "sim", res.IR, nil)
	out := b.String()
	for _, tc := range []struct{ want, not string }{
		{"  vip 203.0.113.10 proto tcp port 80\n", "proto 6 "},
		{"  vip 203.0.113.10 proto udp all ports\n", "proto 17 "},
		{"  vip 203.0.113.10 any protocol\n", "proto any"},
		// The eligible set as explain prints it, not as a Go slice.
		{"  eligible (primary, R-ELIG-1): w1\n", "[w1]"},
	} {
		if !strings.Contains(out, tc.want) {
			t.Errorf("lacks %q:\n%s", tc.want, out)
		}
		if strings.Contains(out, tc.not) {
			t.Errorf("has %q:\n%s", tc.not, out)
		}
	}
}

// TestControllerStatusEligible: lbc status --controller writes the eligible
// set as lbc status of a target, lbc explain and the controller's log do,
// "r1, r2", not "{r1,r2}"; an empty set is "none".
func TestControllerStatusEligible(t *testing.T) {
	for _, tc := range []struct {
		eligible []string
		want     string
	}{
		{[]string{"vm-a1", "vm-a2"}, "service web: primary (R-ELIG-3d), epoch 0, eligible: vm-a1, vm-a2\n"},
		{[]string{"vm-b1"}, "service web: primary (R-ELIG-3d), epoch 0, eligible: vm-b1\n"},
		{nil, "service web: primary (R-ELIG-3d), epoch 0, eligible: none\n"},
	} {
		var b bytes.Buffer
		writeControllerStatus(&b, controller.Status{Services: []controller.ServiceStatus{{Name: "web", Decision: "primary", Rule: "R-ELIG-3d", Eligible: tc.eligible}}})
		if out := b.String(); !strings.Contains(out, tc.want) || strings.Contains(out, "{") {
			t.Errorf("eligible %v: want %q:\n%s", tc.eligible, tc.want, out)
		}
	}
}
