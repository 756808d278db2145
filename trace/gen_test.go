package trace

import (
	"bytes"
	"context"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/sim"
)

// TestGenerate: a seed gives one trace; the trace parses back, spans the
// protocol mix the generator promises, and replays on the reference
// datapath with its events without an error.
func TestGenerate(t *testing.T) {
	cfg, _ := loadConfig(t, "ct.yaml", "")
	o := GenOptions{Seed: 7, Packets: 3000, Clients: 50, Duration: 300, Events: true}
	a, b := Generate(cfg, o), Generate(cfg, o)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different traces")
	}
	o.Seed = 8
	if reflect.DeepEqual(a, Generate(cfg, o)) {
		t.Fatal("different seeds, same trace")
	}
	var buf bytes.Buffer
	if err := Write(&buf, a); err != nil {
		t.Fatal(err)
	}
	lines, err := Parse(&buf, "gen")
	if err != nil {
		t.Fatalf("generated trace does not parse: %v", err)
	}
	seen := map[string]int{}
	for _, l := range lines {
		switch {
		case l.Event != nil:
			seen["event:"+l.Event.Kind]++
		case l.Packet.Frag != targets.FragNone:
			seen["frag:"+l.Packet.Frag.String()]++
		case l.Packet.Inner != nil:
			seen["icmp-error"]++
		case l.Packet.Src.Is6():
			seen["ipv6"]++
		case l.Packet.Flags&targets.FlagSYN != 0:
			seen["syn"]++
		case l.Packet.Flags&targets.FlagFIN != 0:
			seen["fin"]++
		default:
			seen[ProtoName(l.Packet.Proto)]++
		}
	}
	for _, k := range []string{"event:health", "event:remove", "event:add", "frag:first", "frag:middle", "frag:last", "icmp-error", "ipv6", "syn", "fin", "tcp", "udp", "esp", "gre", "icmp"} {
		if seen[k] == 0 {
			t.Errorf("no %s in the generated trace (%v)", k, seen)
		}
	}
	ctx := context.Background()
	dp := sim.New(sim.Options{})
	rp, err := NewReplayer(ctx, cfg, nil, dp, dp)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if _, err := rp.Step(ctx, l); err != nil {
			t.Fatalf("replay: %v", err)
		}
	}
	s := rp.Summary()
	if s.Packets != o.Packets || s.CT["hit"] == 0 || s.CT["new"] == 0 || s.CT["untracked"] == 0 || s.NotOurs == 0 {
		t.Errorf("summary %+v", s)
	}
	t.Logf("%s; %+v", Describe(lines), s)
}

// liveFlowsConfig: a NEVER_PERSIST TCP service and a UDP service (UDP does
// not persist under DEFAULT_FOR_PROTOCOL), each on four backends.
const liveFlowsConfig = `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: never
    vip: 203.0.113.61
    protocol: TCP
    ports: [80]
    connectionTrackingPolicy: {connectionPersistenceOnUnhealthyBackends: NEVER_PERSIST}
    ringSize: 251
    backends:
      - name: g-never
        endpoints: [{name: n1, ip: 10.61.0.1}, {name: n2, ip: 10.61.0.2}, {name: n3, ip: 10.61.0.3}, {name: n4, ip: 10.61.0.4}]
  - name: dgram
    vip: 203.0.113.62
    protocol: UDP
    ports: [4000]
    sessionAffinity: CLIENT_IP_PORT_PROTO
    ringSize: 251
    backends:
      - name: g-dgram
        endpoints: [{name: d1, ip: 10.62.0.1}, {name: d2, ip: 10.62.0.2}, {name: d3, ip: 10.62.0.3}, {name: d4, ip: 10.62.0.4}]
`

// TestGenerateLiveFlows (R-PERSIST, R-CT-3): with LiveFlows, every health
// flap has flows of its service live across it, and on the reference some
// of them were on the failed backend: re-selected (a miss) at the first
// packet after the failure, then hits on the new backend, which is what
// issue 13 item 6 found the switch forgetting.
func TestGenerateLiveFlows(t *testing.T) {
	dec, err := compiler.Load("live.yaml", []byte(liveFlowsConfig))
	if err != nil {
		t.Fatal(err)
	}
	cfg := dec.Config
	o := GenOptions{Seed: 3, Packets: 400, Clients: 40, Duration: 60, Events: true, LiveFlows: 8}
	lines := Generate(cfg, o)
	vip := map[string]netip.Addr{}
	for _, s := range cfg.Services {
		for _, g := range s.Backends {
			for _, e := range g.Endpoints {
				vip[e.Name] = s.VIPAddr()
			}
		}
	}
	downs := 0
	for _, l := range lines {
		if l.Event == nil || l.Event.Kind != EventHealth || l.Event.Healthy {
			continue
		}
		downs++
		n := 0
		for _, m := range lines {
			if m.Packet != nil && m.Packet.Dst == vip[l.Event.Backend] && m.T > l.T && m.T <= l.T+1 {
				n++
			}
		}
		if n < 4*o.LiveFlows {
			t.Errorf("%d packets to %s's service within 1 s after it went down at %gs, want ≥ %d", n, l.Event.Backend, l.T, 4*o.LiveFlows)
		}
	}
	if downs == 0 {
		t.Fatal("no health flap generated")
	}

	ctx := context.Background()
	dp := sim.New(sim.Options{})
	rp, err := NewReplayer(ctx, cfg, nil, dp, dp)
	if err != nil {
		t.Fatal(err)
	}
	// A flow re-selected by R-PERSIST must hit from its next packet on,
	// until the next event.
	reselected := map[compiler.Tuple]bool{}
	stayed := 0
	for _, l := range lines {
		outs, err := rp.Step(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		if l.Event != nil {
			clear(reselected)
			continue
		}
		for _, o := range outs {
			if o.Line != l.No || o.Event != "" {
				continue
			}
			k := l.Packet.Tuple()
			if reselected[k] {
				if o.CT != targets.CTHit {
					t.Fatalf("line %d: a flow re-selected after its backend failed is a %s, want a hit", l.No, o.CT)
				}
				stayed++
				delete(reselected, k)
			}
			if slices.Contains(o.Rule, "R-PERSIST") && o.CT == targets.CTMiss {
				reselected[k] = true
			}
		}
	}
	if stayed == 0 {
		t.Fatal("no flow was re-selected and then stayed: the live flows do not exercise R-PERSIST")
	}
	t.Logf("%s; %d health flaps; %d re-selected flows stayed on their new backend", Describe(lines), downs, stayed)
}
