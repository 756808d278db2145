package live

import (
	"net/netip"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/trace"
)

// icmpErrorsTrace is the spec's ICMP trace (testbench/testdata/
// icmp-errors.jsonl) for a real clock. The trace checks that an error does
// not refresh its flow's entry exactly at the idle timeout (last packet at
// t=1, idle 60 s, the aging packet at t=61); a real clock cannot meet a
// boundary, so the lines from t=61 on come ageMargin later, which changes
// no outcome.
func icmpErrorsTrace(t *testing.T) *trace.Spec {
	t.Helper()
	sp, err := trace.LoadSpec("../../../testbench/testdata/icmp-errors.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for i := range sp.Lines {
		if sp.Lines[i].T >= 61 {
			sp.Lines[i].T += ageMargin.Seconds()
		}
	}
	return sp
}

// TestICMPErrorsTraceOnSim: with lb.p4's semantics, the switch decides the
// trace's ICMP errors about TCP flows itself (the flow's entry, not
// refreshed, or the ring), and only the echo request goes to the fallback:
// what TestICMPErrorsOnRealClock compares on the switch.
func TestICMPErrorsTraceOnSim(t *testing.T) {
	sp := icmpErrorsTrace(t)
	out := simOnly(t, sp.Config, sp.State, sp.Lines)
	seen := map[string]int{}
	for _, l := range sp.Lines {
		if l.Packet == nil || (l.Packet.Proto != compiler.IPProtoICMP && l.Packet.Proto != compiler.IPProtoICMPv6) {
			continue
		}
		o := out[l.No]
		seen[o.Action+"/"+o.CT]++
	}
	want := map[string]int{"forward/hit": 3, "forward/miss": 1, "not-ours/": 1, "fallback/": 1, "drop/": 1}
	for k, n := range want {
		if seen[k] != n {
			t.Errorf("ICMP packets: %v, want %v", seen, want)
			break
		}
	}
	last := sp.Lines[len(sp.Lines)-1]
	if o := out[last.No]; last.Packet == nil || last.Packet.Inner != nil || o.Action != targets.Drop.String() || o.Drop != targets.DropMalformed {
		t.Errorf("line %d, an error quoting nothing: %s %s, want a malformed drop", last.No, o.Action, o.Drop)
	}
}

// TestICMPErrorsOnRealClock replays the spec's ICMP trace on the switch
// and the model with its geometry in lockstep, on the switch's clock:
// errors about IPv4 and IPv6 TCP flows go to the flow's backend without
// refreshing its entry, an error about a flow without an entry goes where
// the ring sends the flow and creates none, an error quoting a flow of no
// service is not ours, and one quoting nothing is a malformed drop.
func TestICMPErrorsOnRealClock(t *testing.T) {
	sw := liveSwitch(t, ClockPaced)
	sp := icmpErrorsTrace(t)
	out, mismatch := replayPairOpts(t, sw, sp.Config, sp.State, sp.Lines, sp.PushOnly)
	if mismatch != "" {
		if lag := sw.Stats().MaxLag; lag >= ageMargin {
			t.Skipf("the replay ran up to %s behind the trace (margin %s): too loaded to compare on a real clock; first difference: %s", lag, ageMargin, mismatch)
		}
		t.Fatal(mismatch)
	}
	t.Logf("%d packets agree; the switch ran at most %s behind the trace", len(out), sw.Stats().MaxLag.Round(time.Microsecond))
}

// icmpEdgeScenario: ICMP errors the switch decides, sends to the fallback
// or drops, tagged and untagged, over IPv4 and IPv6, as lb.p4 parses them.
// want is each packet's action/ct in the model with lb.p4's semantics.
func icmpEdgeScenario(t *testing.T) (*compiler.Config, compiler.State, []trace.Line, []string) {
	cfg := mustLoad(t, "icmp.yaml", `tunnel: {sourceIPv4: 192.0.2.1, sourceIPv6: "2001:db8:ffff::1"}
services:
  - name: web
    vip: 203.0.113.71
    protocol: TCP
    ports: [80]
    connectionTrackingPolicy: {idleTimeoutSec: 3600}
    ringSize: 251
    backends:
      - name: g-web
        endpoints: [{name: w1, ip: 10.71.0.1}, {name: w2, ip: 10.71.0.2}, {name: w3, ip: 10.71.0.3}]
  - name: dns
    vip: 203.0.113.72
    protocol: UDP
    ports: [53]
    ringSize: 251
    backends:
      - name: g-dns
        endpoints: [{name: d1, ip: 10.72.0.1}, {name: d2, ip: 10.72.0.2}]
  - name: sess
    vip: 203.0.113.73
    protocol: L3_DEFAULT
    sessionAffinity: CLIENT_IP_PROTO
    connectionTrackingPolicy: {trackingMode: PER_SESSION, idleTimeoutSec: 3600}
    ringSize: 251
    backends:
      - name: g-sess
        endpoints: [{name: s1, ip: 10.73.0.1}, {name: s2, ip: 10.73.0.2}]
  - name: web6
    vip: 2001:db8:71::1
    protocol: UDP
    ports: [443]
    sessionAffinity: CLIENT_IP_PORT_PROTO
    connectionTrackingPolicy: {idleTimeoutSec: 3600}
    ringSize: 251
    backends:
      - name: g-web6
        endpoints: [{name: u1, ip: "2001:db8:71:1::1"}, {name: u2, ip: "2001:db8:71:1::2"}]
  - name: dark
    vip: 203.0.113.74
    protocol: TCP
    ports: [80]
    failoverPolicy: {dropTrafficIfUnhealthy: true}
    ringSize: 251
    backends:
      - name: g-dark
        endpoints: [{name: k1, ip: 10.74.0.1}]
`)
	st := compiler.State{}
	st.SetHealthy("k1", false)
	a := netip.MustParseAddr
	router4, router6 := a("192.0.2.254"), a("2001:db8:ffff::fe")
	err4 := func(typ uint8, vip string, in compiler.Tuple, vlan uint16) targets.Packet {
		return targets.Packet{Src: router4, Dst: a(vip), Proto: compiler.IPProtoICMP, ICMPType: typ, ICMPCode: 0, Inner: &in, VLAN: vlan}
	}
	err6 := func(typ uint8, vip string, in compiler.Tuple, vlan uint16) targets.Packet {
		return targets.Packet{Src: router6, Dst: a(vip), Proto: compiler.IPProtoICMPv6, ICMPType: typ, Inner: &in, VLAN: vlan}
	}
	// reply is the packet a backend sent the client from the VIP.
	reply := func(vip string, vport uint16, client string, cport uint16, proto uint8) compiler.Tuple {
		return compiler.Tuple{Src: a(vip), Dst: a(client), Proto: proto, SrcPort: vport, DstPort: cport}
	}
	syn := tcp("198.51.100.71", 30001, "203.0.113.71", targets.FlagSYN)
	u6 := targets.Packet{Src: a("2001:db8:c0::71"), Dst: a("2001:db8:71::1"), Proto: compiler.IPProtoUDP, SrcPort: 40001, DstPort: 443, PayloadLen: 100}
	sessUDP := targets.Packet{Src: a("198.51.100.73"), Dst: a("203.0.113.73"), Proto: compiler.IPProtoUDP, SrcPort: 5000, DstPort: 5000, PayloadLen: 100}
	lines := flowLines(
		0.01, syn,
		0.02, err4(3, "203.0.113.71", reply("203.0.113.71", 80, "198.51.100.71", 30001, compiler.IPProtoTCP), 0),
		0.03, err4(11, "203.0.113.71", reply("203.0.113.71", 80, "198.51.100.71", 30001, compiler.IPProtoTCP), 100),
		0.04, err4(12, "203.0.113.71", reply("203.0.113.71", 80, "198.51.100.71", 30002, compiler.IPProtoTCP), 4094),
		0.05, err4(3, "203.0.113.72", reply("203.0.113.72", 53, "198.51.100.72", 33333, compiler.IPProtoUDP), 0),
		0.06, u6,
		0.07, err6(2, "2001:db8:71::1", reply("2001:db8:71::1", 443, "2001:db8:c0::71", 40001, compiler.IPProtoUDP), 10),
		0.08, err6(1, "2001:db8:71::1", reply("2001:db8:71::1", 443, "2001:db8:c0::72", 40001, compiler.IPProtoUDP), 0),
		0.09, err6(4, "2001:db8:71::1", reply("2001:db8:71::1", 443, "2001:db8:c0::71", 40001, compiler.IPProtoUDP), 0),
		0.10, sessUDP,
		0.11, err4(3, "203.0.113.73", reply("203.0.113.73", 5000, "198.51.100.73", 5000, compiler.IPProtoUDP), 0),
		0.12, err4(3, "203.0.113.73", reply("203.0.113.73", 0, "198.51.100.73", 0, compiler.IPProtoESP), 0),
		0.13, err4(3, "203.0.113.74", reply("203.0.113.74", 80, "198.51.100.74", 1234, compiler.IPProtoTCP), 0),
		0.14, err4(3, "203.0.113.71", reply("2001:db8:71::1", 80, "2001:db8:c0::71", 30001, compiler.IPProtoTCP), 0),
		0.15, err4(3, "203.0.113.71", reply("203.0.113.71", 8080, "198.51.100.71", 30001, compiler.IPProtoTCP), 0),
		0.16, targets.Packet{Src: a("198.51.100.71"), Dst: a("203.0.113.71"), Proto: compiler.IPProtoICMP, ICMPType: 8},
		0.17, targets.Packet{Src: router6, Dst: a("2001:db8:71::1"), Proto: compiler.IPProtoICMPv6, ICMPType: 2, VLAN: 100},
		0.18, tcp("198.51.100.71", 30001, "203.0.113.71", targets.FlagACK),
	)
	want := []string{
		"forward/new",       // the flow's SYN creates its entry
		"forward/hit",       // unreachable: the flow's entry
		"forward/hit",       // time exceeded, tagged
		"forward/miss",      // parameter problem about a flow without an entry: the ring, no entry
		"forward/untracked", // a UDP flow of a NONE service: the ring
		"forward/miss",      // the IPv6 UDP flow's first datagram
		"forward/hit",       // packet too big, tagged
		"forward/miss",      // unreachable about another client's flow
		"forward/hit",       // parameter problem
		"fallback/",         // a 3-tuple session lives in the fallback
		"fallback/",         // and so do the errors about it
		"fallback/",         // an error quoting ESP: the switch parses TCP and UDP ports only
		"drop/miss",         // no eligible backend (dropTrafficIfUnhealthy): no entry to follow either
		"drop/",             // an IPv4 error quoting an IPv6 packet: malformed
		"not-ours/",         // an error quoting a port of no service
		"fallback/",         // an echo request: not an error
		"drop/",             // an error type without its quoted packet: malformed
		"forward/hit",       // the flow's entry is still there, and the errors created none
	}
	return cfg, st, lines, want
}

// TestICMPEdgeScenarioOnSim checks icmpEdgeScenario's outcomes on the
// model with lb.p4's semantics (always run).
func TestICMPEdgeScenarioOnSim(t *testing.T) {
	cfg, st, lines, want := icmpEdgeScenario(t)
	out := simOnly(t, cfg, st, lines)
	for i, l := range lines {
		o := out[l.No]
		if got := o.Action + "/" + o.CT; got != want[i] {
			t.Errorf("line %d %s: %s, want %s", l.No, trace.FormatPacket(*l.Packet), got, want[i])
		}
	}
	if a, b := out[2].Backend, out[1].Backend; a != b {
		t.Errorf("the error went to %q, its flow to %q", a, b)
	}
}

// TestICMPErrorsMatchSim: icmpEdgeScenario on the switch and the model in
// lockstep (free clock: nothing ages).
func TestICMPErrorsMatchSim(t *testing.T) {
	sw := liveSwitch(t, ClockFree)
	cfg, st, lines, _ := icmpEdgeScenario(t)
	out, mismatch := replayPair(t, sw, cfg, st, lines)
	if mismatch != "" {
		t.Fatal(mismatch)
	}
	t.Logf("%d packets agree", len(out))
}
