package live

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"testing"

	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/xdp"
	"github.com/lbc-dev/lbc/trace"
)

// icmpCounts are the counters of icmpEdgeScenario's services that the
// switch decides itself (sess lives in the fallback on a switch), by name:
// per service new connections and ICMP error misses, per backend new
// connections.
type icmpCounts struct {
	Services map[string][2]uint64
	Backends map[string]uint64
}

// replayCounts replays icmpEdgeScenario on a datapath and reads its
// counters.
func replayCounts(t *testing.T, tgt targets.Target, pt targets.PacketTarget, ct targets.CounterTarget) icmpCounts {
	t.Helper()
	ctx := context.Background()
	cfg, st, lines, _ := icmpEdgeScenario(t)
	r, err := trace.NewReplayer(ctx, cfg, st, tgt, pt)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if _, err := r.Step(ctx, l); errors.Is(err, ErrFreeClock) {
			t.Skipf("line %d: %v", l.No, err)
		} else if err != nil {
			t.Fatalf("line %d: %v", l.No, err)
		}
	}
	c, err := ct.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := icmpCounts{Services: map[string][2]uint64{}, Backends: map[string]uint64{}}
	decided := map[uint32]bool{}
	for _, s := range r.IR().Services {
		if s.Name == "sess" {
			continue
		}
		decided[s.ID] = true
		v := c.Services[s.ID]
		out.Services[s.Name] = [2]uint64{v.NewConnections, v.ICMPErrorMisses}
	}
	for _, b := range r.IR().Backends {
		if decided[b.ServiceID] {
			out.Backends[b.Name] = c.Backends[b.ID].NewConnections
		}
	}
	return out
}

// TestICMPErrorCountersAcrossDatapaths (issue 24 §10): the counters mean
// the same on every datapath that keeps them. icmpEdgeScenario's ICMP
// errors about a tracked flow with no entry (web's parameter problem,
// web6's unreachable about another client) go where the ring sends the
// flow and create no entry (R-CT-3): lb.p4 counts them in
// service_icmp_error_misses, not in service_new_conns nor
// backend_new_conns, and an ICMP error about an untracked flow (dns) in
// neither; XDP counts them the same way. The model (targets/sim) keeps no
// counters.
func TestICMPErrorCountersAcrossDatapaths(t *testing.T) {
	want := icmpCounts{
		// {new connections, ICMP error misses}
		Services: map[string][2]uint64{"web": {1, 1}, "dns": {0, 0}, "web6": {1, 1}, "dark": {0, 0}},
	}
	got := map[string]icmpCounts{}
	t.Run("xdp", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to load BPF programs (CI runs as root)")
		}
		tgt, err := xdp.NewReplay(xdp.ReplayOptions{TunnelSource4: netip.MustParseAddr("192.0.2.1"), TunnelSource6: netip.MustParseAddr("2001:db8:ffff::1")})
		if err != nil {
			t.Fatal(err)
		}
		defer tgt.Close()
		got["xdp"] = replayCounts(t, tgt, tgt, tgt)
	})
	t.Run("bmv2", func(t *testing.T) {
		sw := liveSwitch(t, ClockFree)
		got["bmv2"] = replayCounts(t, sw, sw, sw.Target())
	})
	if len(got) == 0 {
		t.Skip("no datapath with counters could run here")
	}
	for name, c := range got {
		for svc, w := range want.Services {
			if g := c.Services[svc]; g != w {
				t.Errorf("%s: service %s: %d new connections, %d ICMP error misses; want %d and %d", name, svc, g[0], g[1], w[0], w[1])
			}
		}
		// One new connection per flow that created an entry (web's SYN,
		// web6's first datagram), each on one backend.
		var sum uint64
		for _, n := range c.Backends {
			sum += n
		}
		if sum != 2 {
			t.Errorf("%s: backends' new connections %v, want 2 in all", name, c.Backends)
		}
	}
	if x, b := got["xdp"], got["bmv2"]; x.Services != nil && b.Services != nil {
		for be, n := range b.Backends {
			if x.Backends[be] != n {
				t.Errorf("backend %s: %d new connections on XDP, %d on BMv2", be, x.Backends[be], n)
			}
		}
	}
}
