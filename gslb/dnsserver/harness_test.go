package dnsserver

import (
	"context"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/gslb"
	"github.com/lbc-dev/lbc/gslb/geo"
	"github.com/lbc-dev/lbc/gslb/metrics"
	"github.com/lbc-dev/lbc/gslb/policy"
	"github.com/lbc-dev/lbc/gslb/proximity"
	"github.com/miekg/dns"
)

// Client locations of the test database (documentation prefixes only).
var (
	tokyo   = policy.Point{Lat: 35.68, Lon: 139.69}
	newYork = policy.Point{Lat: 40.71, Lon: -74.01}
	paris   = policy.Point{Lat: 48.85, Lon: 2.35}
)

func geoDB(t testing.TB) string {
	b, err := geo.Build(map[string]policy.Point{
		"203.0.113.0/24":  tokyo,
		"198.51.100.0/24": newYork,
		"192.0.2.0/24":    paris,
		"2001:db8:1::/48": tokyo,
	})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "geo.mmdb")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// testSite is a real HTTP server on 127.0.0.1 serving gslb.SiteHandler,
// like `lbc run` will: metrics from a Store the test changes, RTT probes
// that are real TCP connects to loopback plus a delay the test sets.
type testSite struct {
	name  string
	store *metrics.Store
	srv   *httptest.Server
	delay time.Duration
}

type delayProber struct{ delay time.Duration }

func (p delayProber) RTT(ctx context.Context, a netip.Addr, m proximity.Method, port int) (time.Duration, proximity.Method, error) {
	d, used, err := proximity.NetProber{}.RTT(ctx, a, proximity.TCP, port)
	if err != nil {
		return 0, used, err
	}
	select {
	case <-time.After(p.delay):
	case <-ctx.Done():
		return 0, used, ctx.Err()
	}
	return d + p.delay, used, nil
}

func newTestSite(t testing.TB, name string, delay time.Duration) *testSite {
	s := &testSite{name: name, store: metrics.NewStore(metrics.SiteReport{Site: name}), delay: delay}
	s.setWeb(2, 0)
	s.srv = httptest.NewServer(gslb.SiteHandler(s.store.Report, delayProber{delay}, func(a netip.Addr) bool { return a.IsLoopback() }))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *testSite) setWeb(healthy int, sessions uint64) {
	s.store.Update("web", func(r *metrics.ServiceReport) {
		r.HealthyBackends, r.Backends, r.Sessions = healthy, 2, sessions
	})
}

const e2eConfig = `
zones:
  - {name: example.com, nameservers: [ns1.example.com], hostmaster: dns.example.com, negativeTTL: 45}
sites:
  - {name: seoul, metrics: "@seoul@/v1/gslb/metrics", location: {lat: 37.57, lon: 126.98}}
  - {name: virginia, metrics: "@virginia@/v1/gslb/metrics", location: {lat: 38.91, lon: -77.04}}
  - {name: frankfurt, metrics: "@frankfurt@/v1/gslb/metrics", location: {lat: 50.11, lon: 8.68}}
names:
  - name: www.example.com
    service: web
    ttl: 1
    sites:
      - {site: seoul, addresses: [203.0.113.10, "2001:db8:10::10"], maxSessions: 1000}
      - {site: virginia, addresses: [198.51.100.20, "2001:db8:20::20"], maxSessions: 1000}
      - {site: frankfurt, addresses: [192.0.2.30], maxSessions: 1000}
  - name: a.deep.example.com
    service: web
    sites: [{site: seoul, addresses: [203.0.113.11]}]
  - name: big.example.com
    service: web
    answers: 60
    sites: [{site: seoul, addresses: [@many@]}]
policy:
  mode: gslb+slb
  final: least-selected
  networkProximity: {method: tcp, tcpPort: 9, budget: 1s, timeout: 2s, tolerance: @tolerance@}
  geoProximity: {database: "@db@", toleranceKm: 300}
metrics: {interval: 100ms, timeout: 100ms, unknownAfter: 3}
server:
  rateLimit: {perSecond: @rate@, burst: @burst@, slip: 2}
`

type harness struct {
	eng   *gslb.Engine
	addr  string
	sites map[string]*testSite
}

type opts struct {
	tolerance string
	delays    map[string]time.Duration
	rate      int
}

func start(t testing.TB, o opts) *harness {
	if o.tolerance == "" {
		o.tolerance = "1s" // loopback RTTs tie unless a test sets delays
	}
	h := &harness{sites: map[string]*testSite{}}
	var many []string
	for i := 0; i < 60; i++ {
		many = append(many, netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 0x99, 15: byte(i + 1)}).String())
	}
	rep := []string{"@tolerance@", o.tolerance, "@db@", geoDB(t), "@many@", `"` + strings.Join(many, `", "`) + `"`,
		"@rate@", strconv.Itoa(o.rate), "@burst@", strconv.Itoa(o.rate)}
	for _, n := range []string{"seoul", "virginia", "frankfurt"} {
		s := newTestSite(t, n, o.delays[n])
		h.sites[n] = s
		rep = append(rep, "@"+n+"@", s.srv.URL)
	}
	cfg, err := gslb.Load("gslb.yaml", []byte(strings.NewReplacer(rep...).Replace(e2eConfig)))
	if err != nil {
		t.Fatal(err)
	}
	h.eng, err = gslb.New(cfg, gslb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pc, ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = pc.LocalAddr().String()
	done := make(chan struct{}, 2)
	go func() { h.eng.Run(ctx); done <- struct{}{} }()
	go func() { _ = New(h.eng, nil).Serve(ctx, pc, ln); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done; h.eng.Close() })
	for _, s := range h.sites {
		h.waitPolls(t, s.name, 1)
	}
	return h
}

// waitPolls waits until site has been polled n more times (bounded: the
// test fails after 5 s). Two polls after a change guarantee that one whole
// poll started after it.
func (h *harness) waitPolls(t testing.TB, site string, n uint64) {
	t.Helper()
	polls := func() uint64 {
		for _, s := range h.eng.Poller().Status() {
			if s.Site == site {
				return s.Polls
			}
		}
		return 0
	}
	want := polls() + n
	for i := 0; i < 500 && polls() < want; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if polls() < want {
		t.Fatalf("site %s not polled", site)
	}
}

type q struct {
	net   string // udp or tcp
	name  string
	qtype uint16
	ecs   string // "203.0.113.0/24"
	edns  bool
}

func (h *harness) ask(t testing.TB, x q) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(x.name, x.qtype)
	if x.edns || x.ecs != "" {
		m.SetEdns0(1232, false)
	}
	if x.ecs != "" {
		p := netip.MustParsePrefix(x.ecs)
		fam := uint16(1)
		if p.Addr().Is6() {
			fam = 2
		}
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: fam, SourceNetmask: uint8(p.Bits()), Address: p.Addr().AsSlice()})
	}
	if x.net == "" {
		x.net = "udp"
	}
	c := &dns.Client{Net: x.net, Timeout: 3 * time.Second}
	r, _, err := c.Exchange(m, h.addr)
	if err != nil {
		t.Fatalf("%s %s %s: %v", x.net, x.name, dns.TypeToString[x.qtype], err)
	}
	return r
}

func addrs(r *dns.Msg) []string {
	var out []string
	for _, rr := range r.Answer {
		switch x := rr.(type) {
		case *dns.A:
			out = append(out, x.A.String())
		case *dns.AAAA:
			out = append(out, x.AAAA.String())
		}
	}
	return out
}
