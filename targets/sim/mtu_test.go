package sim

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// p4Datapath compiles yaml onto the v1model switch's semantics.
func p4Datapath(t *testing.T, yaml string, mtu uint16) *Datapath {
	t.Helper()
	dec, err := compiler.Load("mtu.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	res, err := compiler.Compile(compiler.Input{Config: dec.Config})
	if err != nil {
		t.Fatal(err)
	}
	res.IR.MTU = mtu
	g, err := NewRegister(1024, P4Ways)
	if err != nil {
		t.Fatal(err)
	}
	d := New(Options{Conntrack: g, Fallback: true})
	if _, err := d.Apply(context.Background(), compiler.DiffIR(nil, res.IR)); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(res.IR); err != nil {
		t.Fatal(err)
	}
	return d
}

const mtuConfig = `tunnel: {sourceIPv4: 192.0.2.1, sourceIPv6: "2001:db8::1"}
services:
  - name: v4
    vip: 203.0.113.70
    protocol: TCP
    ports: [80]
    ringSize: 61
    backends:
      - name: g4
        endpoints: [{name: b4, ip: 10.70.0.1}]
  - name: v6to6
    vip: "2001:db8::70"
    protocol: UDP
    ports: [53]
    ringSize: 61
    backends:
      - name: g6
        endpoints: [{name: b6, ip: "2001:db8:70::1"}]
  - name: dsr
    vip: 203.0.113.71
    protocol: TCP
    ports: [80]
    ringSize: 61
    encapsulation: L2_DSR
    backends:
      - name: gd
        endpoints: [{name: bd, ip: 10.71.0.1, mac: "02:00:00:00:71:01"}]
`

// TestRMTU_P4SwitchPuntsAfterConntrack: on the switch (Options.Fallback),
// a DF packet (every IPv6 packet) too big for the egress MTU once
// encapsulated leaves through the fallback port after the conntrack step
// (the entry exists: the next, smaller packet hits); without DF, at the
// limit, under L2 DSR or a larger MTU it is forwarded.
func TestRMTU_P4SwitchPuntsAfterConntrack(t *testing.T) {
	src4, src6 := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8:c::7")
	v4 := targets.Packet{Src: src4, Dst: netip.MustParseAddr("203.0.113.70"), Proto: compiler.IPProtoTCP, SrcPort: 4000, DstPort: 80, Flags: targets.FlagSYN}
	v6 := targets.Packet{Src: src6, Dst: netip.MustParseAddr("2001:db8::70"), Proto: compiler.IPProtoUDP, SrcPort: 4000, DstPort: 53}
	dsr := v4
	dsr.Dst = netip.MustParseAddr("203.0.113.71")
	with := func(p targets.Packet, payload int, df bool) targets.Packet {
		p.PayloadLen, p.DF = payload, df
		return p
	}
	for _, tc := range []struct {
		name string
		mtu  uint16
		pkt  targets.Packet
		want targets.Action
		ct   string
	}{
		{"IPv4 DF 1500 + 20 > 1500", 0, with(v4, 1460, true), targets.Fallback, targets.CTNew},
		{"IPv4 DF 1480 + 20 = 1500 fits", 0, with(v4, 1440, true), targets.Forward, targets.CTNew},
		{"IPv4 without DF is forwarded", 0, with(v4, 1460, false), targets.Forward, targets.CTNew},
		{"IPv4 DF fits a 9000 MTU", 9000, with(v4, 1460, true), targets.Forward, targets.CTNew},
		{"IPv4 DF over a 1400 MTU", 1400, with(v4, 1360, true), targets.Fallback, targets.CTNew},
		{"IPv6 is always DF: 1461 + 40 > 1500", 0, with(v6, 1413, false), targets.Fallback, targets.CTUntracked},
		{"IPv6 1460 + 40 = 1500 fits", 0, with(v6, 1412, false), targets.Forward, targets.CTUntracked},
		{"L2 DSR adds nothing and is not checked", 0, with(dsr, 1460, true), targets.Forward, targets.CTNew},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := p4Datapath(t, mtuConfig, tc.mtu)
			ctx := context.Background()
			v, err := d.Process(ctx, tc.pkt, 0)
			if err != nil {
				t.Fatal(err)
			}
			if v.Action != tc.want || v.CT != tc.ct || v.ServiceID == 0 {
				t.Fatalf("%v, want %s ct=%s with its service", v, tc.want, tc.ct)
			}
			if v.Action == targets.Fallback && (v.BackendID != 0 || v.MTU != 0) {
				t.Fatalf("a punted packet names backend %d, MTU %d: the switch shows neither", v.BackendID, v.MTU)
			}
			if tc.ct != targets.CTNew {
				return
			}
			// The entry was created before the MTU check: a small packet of
			// the flow hits it.
			small := tc.pkt
			small.Flags, small.PayloadLen = targets.FlagACK, 0
			a, err := d.Process(ctx, small, time.Second)
			if err != nil || a.Action != targets.Forward || a.CT != targets.CTHit {
				t.Fatalf("small packet after: %v (%v), want a forward that hits the entry", a, err)
			}
		})
	}
}
