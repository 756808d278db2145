package bgp

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	bgppkt "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lbc-dev/lbc/controller"
)

// The speaker dials from speakerAddr to a router (a second, independent
// GoBGP instance) listening on routerAddr: both on loopback.
const (
	speakerAddr = "127.0.0.1"
	routerAddr  = "127.0.0.2"
)

// syncBuffer collects log lines from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// router is a BGP router for the speaker to peer with: it listens, never
// dials, and keeps what it learns in its RIB.
type router struct {
	t    *testing.T
	srv  *server.BgpServer
	port int
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", routerAddr+":0")
	if err != nil {
		t.Skipf("loopback address %s not usable: %v", routerAddr, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRouter starts a router of AS asn on port that accepts the speaker
// as AS peerASN.
func startRouter(t *testing.T, port int, asn, peerASN uint32) *router {
	t.Helper()
	r := &router{t: t, srv: server.NewBgpServer(), port: port}
	go r.srv.Serve()
	ctx := context.Background()
	if err := r.srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: asn, RouterId: "10.255.0.1", ListenPort: int32(port), ListenAddresses: []string{routerAddr}}}); err != nil {
		t.Fatal(err)
	}
	err := r.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: speakerAddr, PeerAsn: peerASN},
		Transport: &api.Transport{PassiveMode: true},
		Timers:    &api.Timers{Config: &api.TimersConfig{HoldTime: 9, KeepaliveInterval: 3, ConnectRetry: 1, IdleHoldTimeAfterReset: 1}},
		AfiSafis: []*api.AfiSafi{
			{Config: &api.AfiSafiConfig{Family: &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}, Enabled: true}},
			{Config: &api.AfiSafiConfig{Family: &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}, Enabled: true}},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.srv.Stop)
	return r
}

// established reports whether the router's side of the session is up.
func (r *router) established() bool {
	up := false
	_ = r.srv.ListPeer(context.Background(), &api.ListPeerRequest{Address: speakerAddr}, func(p *api.Peer) {
		up = p.GetState().GetSessionState() == api.PeerState_SESSION_STATE_ESTABLISHED
	})
	return up
}

// routes returns the prefixes the router learned, with their attributes.
func (r *router) routes() map[string]string {
	out := map[string]string{}
	for _, fam := range []bgppkt.Family{bgppkt.RF_IPv4_UC, bgppkt.RF_IPv6_UC} {
		_ = r.srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: fam}, func(prefix bgppkt.NLRI, paths []*apiutil.Path) {
			var attrs []string
			for _, p := range paths {
				for _, a := range p.Attrs {
					attrs = append(attrs, a.String())
				}
			}
			out[prefix.String()] = strings.Join(attrs, " ")
		})
	}
	return out
}

// waitFor polls cond until it holds or the test's patience ends.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func speakerConfig(t *testing.T, text string) *Config {
	t.Helper()
	cfg, err := Load("bgp.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

type testSpeaker struct {
	*Speaker
	logs *syncBuffer
	reg  *prometheus.Registry
}

func startSpeaker(t *testing.T, cfg *Config) *testSpeaker {
	t.Helper()
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	s := New(cfg, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), NewMetrics(reg))
	s.warnAfter = 300 * time.Millisecond
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx, "test over")
		if t.Failed() {
			t.Logf("speaker log:\n%s", logs.String())
		}
	})
	return &testSpeaker{Speaker: s, logs: logs, reg: reg}
}

func (s *testSpeaker) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			if m.Gauge != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func baseConfig(port int, asn, peerASN uint32, extra string) string {
	return fmt.Sprintf(`localASN: %d
routerID: 10.255.0.2
nextHopIPv6: "2001:db8::2"
peers:
  - address: %s
    port: %d
    asn: %d
    sourceAddress: %s
    holdTime: 9s
    connectRetry: 1s
    families: [ipv4, ipv6]
%s`, asn, routerAddr, port, peerASN, speakerAddr, extra)
}

var (
	vip4 = netip.MustParseAddr("10.99.100.1")
	vip6 = netip.MustParseAddr("2001:db8:100::1")
)

func serve(on bool, why string, vips ...netip.Addr) []controller.VIPState {
	var out []controller.VIPState
	for _, v := range vips {
		out = append(out, controller.VIPState{VIP: v, Serve: on, Why: why, Services: []string{"web"}})
	}
	return out
}

// TestAnnounceWithdrawNoEligible: a served VIP (IPv4 and IPv6) reaches the
// router with its communities and local-pref (iBGP); when its service has
// no eligible backend it is withdrawn, with a log line and a metric.
func TestAnnounceWithdrawNoEligible(t *testing.T) {
	port := freePort(t)
	r := startRouter(t, port, 64512, 64512)
	s := startSpeaker(t, speakerConfig(t, baseConfig(port, 64512, 64512, `advertisements:
  - vips: [10.99.100.0/24, "2001:db8:100::/48"]
    communities: ["64512:100", no-export]
    localPref: 200
`)))
	waitFor(t, "session established", func() bool { return s.metric(t, "lbc_bgp_session_up", "peer", routerAddr) == 1 })
	s.Announce(serve(true, "", vip4, vip6))
	waitFor(t, "both VIPs at the router", func() bool { rt := r.routes(); return rt["10.99.100.1/32"] != "" && rt["2001:db8:100::1/128"] != "" })
	rt := r.routes()
	for _, want := range []string{"64512:100", "no-export", "LocalPref: 200"} {
		if !strings.Contains(rt["10.99.100.1/32"], want) {
			t.Errorf("IPv4 VIP attributes %q lack %q", rt["10.99.100.1/32"], want)
		}
	}
	if !strings.Contains(rt["2001:db8:100::1/128"], "2001:db8::2") {
		t.Errorf("IPv6 VIP attributes %q lack the next hop 2001:db8::2", rt["2001:db8:100::1/128"])
	}
	if got := s.metric(t, "lbc_bgp_vip_announced", "prefix", "10.99.100.1/32"); got != 1 {
		t.Errorf("lbc_bgp_vip_announced = %v, want 1", got)
	}

	why := "no eligible backend (service web drops new connections)"
	s.Announce(append(serve(false, why, vip4), serve(true, "", vip6)...))
	waitFor(t, "IPv4 VIP withdrawn at the router", func() bool { return r.routes()["10.99.100.1/32"] == "" })
	if r.routes()["2001:db8:100::1/128"] == "" {
		t.Error("the IPv6 VIP went too, yet it is still served")
	}
	if got := s.metric(t, "lbc_bgp_withdrawals_total", "prefix", "10.99.100.1/32", "reason", "no-eligible-backend"); got != 1 {
		t.Errorf("lbc_bgp_withdrawals_total{reason=no-eligible-backend} = %v, want 1", got)
	}
	if got := s.metric(t, "lbc_bgp_vip_announced", "prefix", "10.99.100.1/32"); got != 0 {
		t.Errorf("lbc_bgp_vip_announced = %v after the withdrawal, want 0", got)
	}
	if !strings.Contains(s.logs.String(), `msg="bgp withdraw" vip=10.99.100.1/32 why="`+why+`"`) {
		t.Errorf("no withdraw log line naming the VIP and the reason:\n%s", s.logs.String())
	}
	st := s.AnnounceStatus()
	if !st.Healthy || len(st.VIPs) != 2 || st.VIPs[0].Announced || st.VIPs[0].Why != why {
		t.Errorf("status %+v: want healthy, 10.99.100.1/32 withdrawn with the reason", st)
	}

	// Served again: announced again.
	s.Announce(serve(true, "", vip4, vip6))
	waitFor(t, "IPv4 VIP back at the router", func() bool { return r.routes()["10.99.100.1/32"] != "" })

	// A clean stop withdraws everything and closes the session at once.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "routes gone from the router after the shutdown", func() bool { return len(r.routes()) == 0 })
	if st := s.AnnounceStatus(); st.Healthy {
		t.Errorf("status after shutdown is healthy: %+v", st)
	}
}

// TestPeerDownAtStart: the router is not up when the speaker starts. The
// speaker says so (log line, session_up 0) and establishes the session
// and announces as soon as the router comes.
func TestPeerDownAtStart(t *testing.T) {
	port := freePort(t)
	s := startSpeaker(t, speakerConfig(t, baseConfig(port, 64512, 64513, "")))
	s.Announce(serve(true, "", vip4))
	waitFor(t, "a warning that the session is not established", func() bool {
		return strings.Contains(s.logs.String(), "bgp session not established")
	})
	line := s.logs.String()
	for _, want := range []string{"peer=" + routerAddr, fmt.Sprintf("port=%d", port), "is the router up, reachable, and configured with neighbor 127.0.0.1 as AS 64512?"} {
		if !strings.Contains(line, want) {
			t.Errorf("warning lacks %q:\n%s", want, line)
		}
	}
	if got := s.metric(t, "lbc_bgp_session_up", "peer", routerAddr); got != 0 {
		t.Errorf("lbc_bgp_session_up = %v while the router is down", got)
	}
	if st := s.AnnounceStatus(); st.Healthy || !strings.Contains(st.Problem, "no session established") {
		t.Errorf("status %+v: want unhealthy, no session established", st)
	}
	r := startRouter(t, port, 64513, 64512)
	waitFor(t, "the VIP at the router once it is up", func() bool { return r.routes()["10.99.100.1/32"] != "" })
	// The session event reaches the speaker on its own goroutine.
	waitFor(t, "lbc_bgp_session_up 1 once established", func() bool { return s.metric(t, "lbc_bgp_session_up", "peer", routerAddr) == 1 })
	if st := s.AnnounceStatus(); !st.Healthy {
		t.Errorf("status %+v: want healthy once established", st)
	}
}

// TestWrongASN: a router that expects another AS refuses the OPEN, and a
// router whose AS is not the one in bgp.yaml is refused by the speaker.
// Either way the session never comes up, the log says what to check and
// lbc_bgp_session_refusals_total counts it.
func TestWrongASN(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		routerASN, expectASN uint32 // the router's AS, and what it expects from us
		speakerPeerASN       uint32 // what bgp.yaml says the router is
		reason, direction    string
		hint                 string
	}{
		{"router expects another AS", 64513, 65000, 64513, "open-rejected", "received", "check the router's neighbor entry for this node: remote AS 64512 (localASN)"},
		{"bgp.yaml names another router AS", 64513, 64512, 65001, "bad-peer-as", "sent", "the router's AS (in its OPEN) is not the peer's asn in bgp.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := freePort(t)
			r := startRouter(t, port, tc.routerASN, tc.expectASN)
			s := startSpeaker(t, speakerConfig(t, baseConfig(port, 64512, tc.speakerPeerASN, "")))
			s.Announce(serve(true, "", vip4))
			waitFor(t, "a refusal", func() bool { return s.metric(t, "lbc_bgp_session_refusals_total", "peer", routerAddr) > 0 })
			if got := s.metric(t, "lbc_bgp_session_refusals_total", "peer", routerAddr, "reason", tc.reason, "direction", tc.direction); got == 0 {
				t.Errorf("no refusal %s %s; log:\n%s", tc.reason, tc.direction, s.logs.String())
			}
			logs := s.logs.String()
			if !strings.Contains(logs, `level=ERROR msg="bgp session refused" peer=`+routerAddr) || !strings.Contains(logs, "local_asn=64512") ||
				!strings.Contains(logs, tc.hint) {
				t.Errorf("no refusal log line naming the peer and both ASNs:\n%s", logs)
			}
			if s.metric(t, "lbc_bgp_session_up", "peer", routerAddr) != 0 || len(r.routes()) != 0 {
				t.Errorf("the session came up or a route arrived despite the wrong ASN: %v", r.routes())
			}
		})
	}
}

// TestFlappingSession: the router resets the session several times. Every
// reset is a flap (log line, lbc_bgp_session_flaps_total), the speaker
// re-establishes and the router has the VIP again each time.
func TestFlappingSession(t *testing.T) {
	port := freePort(t)
	r := startRouter(t, port, 64513, 64512)
	s := startSpeaker(t, speakerConfig(t, baseConfig(port, 64512, 64513, "")))
	s.Announce(serve(true, "", vip4))
	const flaps = 2 // GoBGP waits 5 s before it redials after a reset
	for i := 1; i <= flaps; i++ {
		// Both sides up (the router's RIB may still hold the previous
		// session's route for a moment), then the VIP.
		waitFor(t, fmt.Sprintf("session up and VIP at the router before reset %d", i), func() bool {
			return s.metric(t, "lbc_bgp_session_up", "peer", routerAddr) == 1 && r.established() && r.routes()["10.99.100.1/32"] != ""
		})
		if err := r.srv.ResetPeer(context.Background(), &api.ResetPeerRequest{Address: speakerAddr, Communication: "flap test"}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("flap %d counted", i), func() bool { return s.metric(t, "lbc_bgp_session_flaps_total", "peer", routerAddr) == float64(i) })
	}
	waitFor(t, "session up and VIP at the router after the last flap", func() bool {
		return s.metric(t, "lbc_bgp_session_up", "peer", routerAddr) == 1 && r.established() && r.routes()["10.99.100.1/32"] != ""
	})
	if n := strings.Count(s.logs.String(), `msg="bgp session down; the router withdraws this node's VIPs" peer=`+routerAddr); n != flaps {
		t.Errorf("%d session-down log lines, want %d:\n%s", n, flaps, s.logs.String())
	}
	st := s.AnnounceStatus()
	if len(st.Peers) != 1 || st.Peers[0].Flaps != flaps || !st.Peers[0].Established {
		t.Errorf("status %+v: want one established peer with %d flaps", st.Peers, flaps)
	}
	if got := testutil.CollectAndCount(s.reg, "lbc_bgp_session_state"); got != 6 {
		t.Errorf("lbc_bgp_session_state has %d series, want one per FSM state (6)", got)
	}
}

// TestLoadProblems: every problem of a bad bgp.yaml at once, each with its
// line and field path.
func TestLoadProblems(t *testing.T) {
	_, err := Load("bgp.yaml", []byte(`localASN: 0
routerID: fe80::1
peers:
  - address: 10.0.0.1
    asn: 64500
    holdTime: 2s
  - address: 10.0.0.1
    asn: 0
    keepaliveTime: 100s
    families: [ipv6, ipx]
advertisements:
  - vips: [10.0.0.0/33]
    communities: ["70000:1"]
`))
	if err == nil {
		t.Fatal("a bad bgp.yaml loaded")
	}
	for _, want := range []string{
		"bgp.yaml:1: localASN: localASN is missing or 0",
		"bgp.yaml:2: routerID: routerID \"fe80::1\": want an IPv4 address",
		"bgp.yaml:6: peers[0].holdTime: holdTime 2s: BGP allows 0s (no keepalives) or at least 3s",
		"bgp.yaml:7: peers[1].address: address 10.0.0.1 is also peers[0]",
		"bgp.yaml:8: peers[1].asn: asn is missing or 0",
		"bgp.yaml:9: peers[1].keepaliveTime: keepaliveTime 1m40s is longer than holdTime 1m30s",
		"bgp.yaml:10: peers[1].families[1]: family \"ipx\": want ipv4 or ipv6",
		"peers[1].families: ipv6 over the IPv4 session to 10.0.0.1 needs nextHopIPv6",
		"bgp.yaml:12: advertisements[0].vips[0]: vips entry \"10.0.0.0/33\"",
		"bgp.yaml:13: advertisements[0].communities[0]: community \"70000:1\": both halves",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("problems lack %q:\n%v", want, err)
		}
	}
	_, err = Load("bgp.yaml", []byte("localASN: 1\nrouterID: 1.2.3.4\npeer: []\n"))
	if err == nil || !strings.Contains(err.Error(), `bgp.yaml:3: peer: unknown field (did you mean "peers"?); known fields of the top level: advertisements, localASN, nextHopIPv4, nextHopIPv6, peers, routerID`) {
		t.Errorf("unknown field: %v", err)
	}
}
