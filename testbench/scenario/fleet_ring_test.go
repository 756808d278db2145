package scenario

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/testbench/scenarios"
)

// fleetModelRunner is a fleet runner with the shipped fleet-ecmp
// scenario's lb.yaml and no network: the ring model only compiles.
func fleetModelRunner(t *testing.T) *fleetRunner {
	t.Helper()
	data, ok := scenarios.Get("fleet-ecmp")
	if !ok {
		t.Fatal("no shipped scenario fleet-ecmp")
	}
	sc, err := Parse("fleet-ecmp.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	r := &fleetRunner{sc: sc, fl: sc.Fleet, unhealthy: map[string]bool{}, env: &fleetEnv{}}
	for i := range sc.BackendNames() {
		r.env.hosts = append(r.env.hosts, Host{IP: netip.AddrFrom4([4]byte{10, 99, 0, byte(11 + i)}), MAC: fmt.Sprintf("02:98:00:00:02:%02x", i+1)})
	}
	if _, err := r.fleetConfig(); err != nil {
		t.Fatal(err)
	}
	return r
}

// R-MAGLEV: with exact shares, a backend leaving the ring moves its own
// slots and a few of the others'. The fleet scenario's event 9 once saw a
// connection to r2 break when n1 died with r3 out of the ring: its slot is
// one of those, so it was at risk, and the check must say so.
func TestFleetRing_RMAGLEV_ExactSharesMoveOtherBackendsSlots(t *testing.T) {
	r := fleetModelRunner(t)
	full, err := compileFleetRing(r.lb, nil)
	if err != nil {
		t.Fatal(err)
	}
	noR3, err := compileFleetRing(r.lb, map[string]bool{"r3": true})
	if err != nil {
		t.Fatal(err)
	}
	if full.Digest == noR3.Digest {
		t.Fatalf("the ring without r3 has the digest of the full ring %s", full.Digest)
	}
	r3, others := 0, 0
	for s := range full.owner {
		switch {
		case full.owner[s] == "" || noR3.owner[s] == "":
			t.Fatalf("slot %d unset: full %q, without r3 %q", s, full.owner[s], noR3.owner[s])
		case noR3.owner[s] == "r3":
			t.Fatalf("slot %d still r3's after r3 failed", s)
		case full.owner[s] == "r3":
			r3++
		case full.owner[s] != noR3.owner[s]:
			others++
		}
	}
	t.Logf("ring %d slots: r3 owned %d, %d slots of r1, r2, r4 changed owner too", full.RingSize, r3, others)
	if others == 0 {
		t.Fatal("no slot of r1, r2, r4 moved: the ring is minimal here, and the CI failure is unexplained")
	}

	// The connection of the CI failure: 10.98.0.102:43841 → r2.
	vip := netip.AddrPortFrom(fleetVIP, TCPPort)
	ci := netip.MustParseAddrPort("10.98.0.102:43841")
	slot, was := full.Owner(ci, vip)
	_, now := noR3.Owner(ci, vip)
	if was != "r2" || now == "r2" {
		t.Fatalf("slot %d of %s: %q on the full ring, %q without r3; the CI failure had it on r2, moved", slot, ci, was, now)
	}

	// A connection to r2 whose slot stayed r2's, one to r3.
	var stay, gone netip.AddrPort
	for port := uint16(40000); !stay.IsValid() || !gone.IsValid(); port++ {
		c := netip.AddrPortFrom(netip.MustParseAddr("10.98.0.10"), port)
		_, a := full.Owner(c, vip)
		_, b := noR3.Owner(c, vip)
		switch {
		case a == "r2" && b == "r2" && !stay.IsValid():
			stay = c
		case a == "r3" && !gone.IsValid():
			gone = c
		}
	}

	rings := []*fleetRing{noR3}
	for _, tc := range []struct {
		name             string
		conns            []heldConn
		atRisk, brokeRsk int
		unexplained      string
	}{
		{"nothing broke", []heldConn{{Local: stay, Backend: "r2"}, {Local: ci, Backend: "r2"}, {Local: gone, Backend: "r3"}}, 2, 0, ""},
		{"r3's connection broke", []heldConn{{Local: stay, Backend: "r2"}, {Local: gone, Backend: "r3", Broken: true, Why: "read: connection reset by peer"}}, 1, 1, ""},
		{"r2's moved slot broke (the CI failure)", []heldConn{{Local: ci, Backend: "r2", Broken: true, Why: "read: connection reset by peer"}}, 1, 1, ""},
		{"r2's kept slot broke: a bug", []heldConn{{Local: stay, Backend: "r2", Broken: true, Why: "read: connection reset by peer"}, {Local: gone, Backend: "r3", Broken: true}}, 1, 1,
			fmt.Sprintf("connection %s → r2 broke (read: connection reset by peer) although slot", stay)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := assessRingRisk(tc.conns, vip, rings)
			if rr.AtRisk != tc.atRisk || rr.BrokenAtRisk != tc.brokeRsk {
				t.Errorf("at risk %d, broken at risk %d; want %d, %d", rr.AtRisk, rr.BrokenAtRisk, tc.atRisk, tc.brokeRsk)
			}
			got := strings.Join(rr.Unexplained, "; ")
			if (tc.unexplained == "") != (got == "") || !strings.Contains(got, tc.unexplained) {
				t.Errorf("unexplained %q, want %q", got, tc.unexplained)
			}
			if got != "" && !strings.Contains(got, noR3.Digest) {
				t.Errorf("unexplained %q does not name the ring %s", got, noR3.Digest)
			}
		})
	}

	// During a fail event both rings are in force: r2's kept slot is safe
	// in both, r3's connection is at risk in the second.
	rr := assessRingRisk([]heldConn{{Local: stay, Backend: "r2"}, {Local: gone, Backend: "r3"}}, vip, []*fleetRing{full, noR3})
	if rr.AtRisk != 1 || rr.AtRiskBy["r3"] != 1 {
		t.Errorf("full then without r3: at risk %d %v, want r3's connection only", rr.AtRisk, rr.AtRiskBy)
	}
}

// The ring model is only used when the nodes hold it: the digest they
// report must be the model's, and a difference is an error naming both.
func TestFleetRing_ModelMatchesTheNodesDigest(t *testing.T) {
	r := fleetModelRunner(t)
	r.unhealthy["r3"] = true
	want, err := compileFleetRing(r.lb, r.unhealthy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ringModel(map[string]string{"n1": want.Digest, "n2": want.Digest}); err != nil {
		t.Fatalf("the nodes hold the model's digest: %v", err)
	}
	for _, tc := range []struct {
		name    string
		digests map[string]string
		want    string
	}{
		{"no node", nil, "no running node reported a ring digest"},
		{"one node differs", map[string]string{"n1": want.Digest, "n2": "0123abcd"}, "the nodes do not hold the test's ring " + want.Digest + " (without r3): n2 holds 0123abcd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.ringModel(tc.digests)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestFleetParseErrors(t *testing.T) {
	const head = `
name: f
service: {name: web, protocol: TCP, ports: [80], backends: [{name: g, endpoints: [{name: a}, {name: b}]}]}
fleet:
  events:
`
	for _, tc := range []struct {
		name, event, want string
	}{
		{"brokenBackends replaced", "    - {kill: n1, observe: 1s, expect: {maxBroken: 4, brokenBackends: [a]}}",
			"fleet: events[0] (kill n1): expect.brokenBackends: no longer accepted: write brokenOnlyIfRingMoved: true"},
		{"ring moved without maxBroken", "    - {kill: n1, observe: 1s, expect: {brokenOnlyIfRingMoved: true}}",
			"fleet: events[0] (kill n1): expect.brokenOnlyIfRingMoved allows breaks that maxBroken 0 forbids: set maxBroken (at most connections: 48)"},
		{"killAfterChange without a backend change", "    - {kill: n1, killAfterChange: n2, observe: 1s}",
			"fleet: events[0] (kill n1): killAfterChange needs a fail or recover"},
		{"killAfterChange of no node", "    - {fail: a, killAfterChange: n7, observe: 1s}",
			`fleet: events[0]: killAfterChange "n7": nodes are n1..n3, or lagging`},
		{"killAfterChange with a hand-written bound", "    - {fail: a, killAfterChange: n2, observe: 1s, expect: {maxBroken: 2}}",
			"expect.maxBroken with killAfterChange: the bound is derived from the measured window"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(head+tc.event+"\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// A node that held a ring the model does not know (its health check
// flapped, it restarted) makes the at-risk set unknowable: unmodelled
// names it once, with the time it was first seen.
func TestFleetRing_UnmodelledDigests(t *testing.T) {
	rings := []*fleetRing{{Digest: "aaa"}, {Digest: "bbb"}}
	for _, tc := range []struct {
		name   string
		window []FleetSample
		want   string
	}{
		{"all modelled", []FleetSample{{T: 1e9, Digests: map[string]string{"n1": "aaa", "n2": "bbb"}}, {T: 2e9, Digests: map[string]string{"n2": ""}}}, ""},
		{"one node off twice", []FleetSample{
			{T: 1e9, Digests: map[string]string{"n1": "aaa", "n2": "ccc"}},
			{T: 1.5e9, Digests: map[string]string{"n1": "ddd", "n2": "ccc"}},
		}, "n2 held ring ccc at 1.0 s, n1 held ring ddd at 1.5 s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := unmodelled(tc.window, rings); got != tc.want {
				t.Errorf("unmodelled = %q, want %q", got, tc.want)
			}
		})
	}
}
