package dnsserver

import (
	"context"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/gslb"
	"github.com/lbc-dev/lbc/gslb/policy"
	"github.com/miekg/dns"
)

const (
	seoulV4     = "203.0.113.10"
	virginiaV4  = "198.51.100.20"
	frankfurtV4 = "192.0.2.30"
)

// answer asks over both UDP and TCP and checks they agree.
func (h *harness) answer(t *testing.T, ecs string) string {
	t.Helper()
	var got []string
	for _, n := range []string{"udp", "tcp"} {
		r := h.ask(t, q{net: n, name: "www.example.com.", qtype: dns.TypeA, ecs: ecs})
		if len(r.Answer) != 1 {
			t.Fatalf("%s: %d answers: %v", n, len(r.Answer), r)
		}
		if ttl := r.Answer[0].Header().Ttl; ttl != 1 {
			t.Fatalf("TTL %d, want 1: a resolver holds an old answer at most that long", ttl)
		}
		got = append(got, addrs(r)[0])
	}
	if got[0] != got[1] {
		t.Fatalf("UDP %s, TCP %s", got[0], got[1])
	}
	return got[0]
}

func (h *harness) decidedBy(t *testing.T, ecs string) policy.Step {
	q := gslb.Query{Name: "www.example.com.", Family: 4, Resolver: netip.MustParseAddr("127.0.0.1"), DryRun: true}
	if ecs != "" {
		q.ECS = netip.MustParsePrefix(ecs)
	}
	return h.eng.Select(context.Background(), q).Decision.DecidedBy
}

// G-1 end to end: a site whose backends all fail stops being answered
// within one poll interval (plus the TTL for resolvers' caches), and comes
// back the same way.
func TestE2E_G1_KillSiteBackendsMovesAnswer(t *testing.T) {
	h := start(t, opts{})
	const tokyoECS = "203.0.113.0/24"
	if a := h.answer(t, tokyoECS); a != seoulV4 {
		t.Fatalf("Tokyo client: %s, want Seoul %s", a, seoulV4)
	}
	h.sites["seoul"].setWeb(0, 0)
	h.waitPolls(t, "seoul", 2) // one whole poll after the change
	if a := h.answer(t, tokyoECS); a != frankfurtV4 {
		t.Fatalf("Seoul down: %s, want the next nearest, Frankfurt %s", a, frankfurtV4)
	}
	h.sites["seoul"].setWeb(1, 0)
	h.waitPolls(t, "seoul", 2)
	if a := h.answer(t, tokyoECS); a != seoulV4 {
		t.Fatalf("Seoul back: %s", a)
	}
}

// A site whose metrics endpoint dies becomes unknown after unknownAfter
// missed polls; known-healthy sites win over it.
func TestE2E_G1_SiteUnreachableBecomesUnknown(t *testing.T) {
	h := start(t, opts{})
	h.sites["seoul"].srv.Close()
	h.waitPolls(t, "seoul", 4) // unknownAfter 3 missed polls
	if a := h.answer(t, "203.0.113.0/24"); a != frankfurtV4 {
		t.Fatalf("Seoul unreachable: %s, want Frankfurt", a)
	}
	if by := h.decidedBy(t, "203.0.113.0/24"); by != policy.GeoProximity {
		t.Fatalf("decided by %s, want geo-proximity among the known-healthy sites", by)
	}
}

// G-2 end to end: over its session limit a site is not chosen.
func TestE2E_G2_OverloadedSiteNotChosen(t *testing.T) {
	h := start(t, opts{})
	h.sites["seoul"].setWeb(2, 5000) // maxSessions 1000
	h.waitPolls(t, "seoul", 2)
	if a := h.answer(t, "203.0.113.0/24"); a != frankfurtV4 {
		t.Fatalf("Seoul overloaded: Tokyo client got %s, want Frankfurt", a)
	}
	// Without ECS nothing tells the others apart but least-selected, and
	// Seoul never comes up. Frankfurt was already selected twice above
	// (UDP and TCP), so Virginia catches up first: 7 and 5.
	seen := map[string]int{}
	for i := 0; i < 12; i++ {
		seen[addrs(h.ask(t, q{name: "www.example.com.", qtype: dns.TypeA}))[0]]++
	}
	if seen[seoulV4] != 0 || seen[virginiaV4] != 7 || seen[frankfurtV4] != 5 {
		t.Fatalf("answers %v, want Virginia 7, Frankfurt 5, Seoul never", seen)
	}
}

// G-4 end to end: ECS from two continents picks the two nearest sites, and
// the scope is echoed.
func TestE2E_G4_ECSFromTwoContinents(t *testing.T) {
	h := start(t, opts{})
	if a := h.answer(t, "203.0.113.0/24"); a != seoulV4 {
		t.Fatalf("Tokyo: %s, want Seoul", a)
	}
	if a := h.answer(t, "198.51.100.0/24"); a != virginiaV4 {
		t.Fatalf("New York: %s, want Virginia", a)
	}
	if by := h.decidedBy(t, "198.51.100.0/24"); by != policy.GeoProximity {
		t.Fatalf("decided by %s", by)
	}
	r := h.ask(t, q{name: "www.example.com.", qtype: dns.TypeAAAA, ecs: "2001:db8:1::/48"})
	if got := addrs(r); !reflect.DeepEqual(got, []string{"2001:db8:10::10"}) || ecsOf(r).SourceScope != 48 {
		t.Fatalf("IPv6 Tokyo client: %v scope %d, want Seoul's 2001:db8:10::10, scope 48", got, ecsOf(r).SourceScope)
	}
	// Frankfurt has no IPv6 address: AAAA never picks it, even for Paris.
	if got := addrs(h.ask(t, q{name: "www.example.com.", qtype: dns.TypeAAAA, ecs: "192.0.2.0/24"})); len(got) != 1 || got[0] == "" {
		t.Fatalf("Paris AAAA: %v", got)
	}
	if a := h.answer(t, "192.0.2.0/24"); a != frankfurtV4 {
		t.Fatalf("Paris: %s, want Frankfurt", a)
	}
}

// G-3 end to end: RTTs measured by the sites at query time (a real TCP
// connect to the loopback resolver plus a per-site delay) decide.
func TestE2E_G3_NetworkProximityDecides(t *testing.T) {
	h := start(t, opts{tolerance: "50ms", delays: map[string]time.Duration{"virginia": 200 * time.Millisecond, "frankfurt": 200 * time.Millisecond}})
	// Even a client located in New York goes to the site nearest in RTT.
	if a := h.answer(t, "198.51.100.0/24"); a != seoulV4 {
		t.Fatalf("got %s, want Seoul (lowest RTT)", a)
	}
	if by := h.decidedBy(t, "198.51.100.0/24"); by != policy.NetworkProximity {
		t.Fatalf("decided by %s, want network-proximity", by)
	}
}

// G-7 end to end: with nothing else to tell sites apart, answers even out.
func TestE2E_G7_LeastSelectedEvensOut(t *testing.T) {
	h := start(t, opts{})
	seen := map[string]int{}
	for i := 0; i < 9; i++ {
		seen[addrs(h.ask(t, q{name: "www.example.com.", qtype: dns.TypeA}))[0]]++
	}
	if seen[seoulV4] != 3 || seen[virginiaV4] != 3 || seen[frankfurtV4] != 3 {
		t.Fatalf("answers %v, want 3 each", seen)
	}
}
