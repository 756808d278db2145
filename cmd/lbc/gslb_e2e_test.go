package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/gslb/metrics"
	"github.com/miekg/dns"
)

// Issue 7's end-to-end acceptance with real `lbc run --target sim` sites:
// each site is the real command with its own lb.yaml, probing real HTTP
// health endpoints on 127.0.0.x, serving its GSLB report on a free
// 127.0.0.1 port; `lbc gslb serve` polls them and answers real DNS over
// UDP and TCP. Only loopback is used (the VIPs in the answers are data).

const e2eSiteConfig = `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: web
    vip: %s
    protocol: TCP
    ports: [80]
    ringSize: 307
    healthCheck: {type: HTTP, port: %d, checkIntervalSec: 1, timeoutSec: 1, healthyThreshold: 1, unhealthyThreshold: 1}
    backends:
      - name: ig
        endpoints:
          - {name: %s-1, ip: %s}
          - {name: %s-2, ip: %s}
`

// Timings of the run: 1 s health checks, sub-second polls, TTL 1.
const (
	e2eHealthInterval = time.Second
	e2ePollInterval   = 250 * time.Millisecond
	e2ePollTimeout    = 200 * time.Millisecond
	e2eTTL            = time.Second
	// e2eGrace absorbs scheduling on a loaded 2-core machine; the bounds
	// asserted are the design's plus this.
	e2eGrace = 5 * time.Second
	// e2eDeadline bounds every wait (then the test fails with the logs).
	e2eDeadline = 30 * time.Second
)

const e2eGSLBConfig = `zones:
  - {name: example.com, nameservers: [ns1.example.com], hostmaster: dns.example.com}
sites:
  - {name: seoul, metrics: "http://%s/v1/gslb/metrics"}
  - {name: virginia, metrics: "http://%s/v1/gslb/metrics"}
names:
  - name: www.example.com
    service: web
    ttl: 1
    answers: 1
    sites:
      - {site: seoul, addresses: [203.0.113.10], preference: 100}
      - {site: virginia, addresses: [198.51.100.20], preference: 50}
policy:
  mode: gslb+slb
  steps: [health, capacity, preference, least-selected]
metrics: {interval: 250ms, timeout: 200ms, unknownAfter: 3}
server:
  rateLimit: {perSecond: 0}
`

// e2eSite is one running `lbc run --target sim`.
type e2eSite struct {
	name    string
	vip     string
	addr    string // --metrics
	up      map[string]*atomic.Bool
	logs    *syncWriter
	done    chan error
	cancel  context.CancelFunc
	stopped bool
}

// setBackends makes every backend of the site answer 200 (up) or 503.
func (s *e2eSite) setBackends(up bool) {
	for _, b := range s.up {
		b.Store(up)
	}
}

// healthy is what the site's GSLB report says of web, -1 if unreadable.
func (s *e2eSite) healthy() int {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + s.addr + metrics.Path)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	rep, err := metrics.Decode(body)
	if err != nil || len(rep.Services) != 1 || rep.Services[0].Name != "web" {
		return -1
	}
	return rep.Services[0].HealthyBackends
}

func (s *e2eSite) stop(t *testing.T) {
	t.Helper()
	if s.stopped {
		return
	}
	s.stopped = true
	s.cancel() // what SIGTERM does
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("lbc run (site %s): %v\n%s", s.name, err, s.logs.String())
		}
	case <-time.After(e2eDeadline):
		t.Errorf("lbc run (site %s) did not stop in %s", s.name, e2eDeadline)
		return
	}
	if !strings.Contains(s.logs.String(), "the datapaths stay programmed") {
		t.Errorf("site %s: no clean-stop log:\n%s", s.name, s.logs.String())
	}
}

// startSite runs `lbc run --target sim` in-process for a site whose two
// backends are on ips, and waits until it has pushed (/healthz 200).
// Commands are started one after the other: the CLI's command values are
// shared by the apps of this process.
func startSite(t *testing.T, name, vip string, ips ...string) *e2eSite {
	t.Helper()
	return startSiteWith(t, name, vip, nil, ips...)
}

// startSiteWith is startSite with more flags for lbc run.
func startSiteWith(t *testing.T, name, vip string, extra []string, ips ...string) *e2eSite {
	t.Helper()
	port, up := loopbackBackends(t, ips...)
	cfg := filepath.Join(t.TempDir(), name+".yaml")
	text := fmt.Sprintf(e2eSiteConfig, vip, port, name, ips[0], name, ips[1])
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &e2eSite{name: name, vip: vip, up: up}
	// The free port can be taken between finding it and the command's
	// listen: try again with another one.
	for attempt := 0; ; attempt++ {
		s.addr, s.logs, s.done = freeAddr(t), &syncWriter{}, make(chan error, 1)
		ctx, cancel := context.WithCancel(context.Background())
		s.cancel = cancel
		app := newApp()
		app.Writer, app.ErrWriter = s.logs, s.logs
		go func(done chan error) {
			done <- app.RunContext(ctx, append([]string{"lbc", "run", "-c", cfg, "--target", "sim", "--site", name,
				"--metrics", s.addr, "--debounce", "10ms", "--watch-interval", "0", "--verify-interval", "0"}, extra...))
		}(s.done)
		if err := waitHealthz(s); err == nil {
			break
		} else if attempt == 4 || !strings.Contains(err.Error(), "--metrics") {
			cancel()
			t.Fatalf("lbc run (site %s): %v\n%s", name, err, s.logs.String())
		}
		cancel()
	}
	t.Cleanup(func() { s.stop(t) })
	return s
}

// waitHealthz waits until the site answers /healthz 200, or returns the
// command's error if it ended.
func waitHealthz(s *e2eSite) error {
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(e2eDeadline)
	for time.Now().Before(deadline) {
		select {
		case err := <-s.done:
			return fmt.Errorf("ended: %v", err)
		default:
		}
		if resp, err := c.Get("http://" + s.addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("/healthz not 200 within %s", e2eDeadline)
}

// e2eGSLB is a running `lbc gslb serve`.
type e2eGSLB struct {
	addr string
	logs *syncWriter
	// first is the first answer it gave (to waitDNS's query), "" if none.
	first string
}

func startGSLB(t *testing.T, sites ...*e2eSite) *e2eGSLB {
	t.Helper()
	return startGSLBWith(t, e2eGSLBConfig, sites...)
}

// startGSLBWith runs `lbc gslb serve` on config, a gslb.yaml with a %s
// for each site's metrics address.
func startGSLBWith(t *testing.T, config string, sites ...*e2eSite) *e2eGSLB {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "gslb.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(config, sites[0].addr, sites[1].addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	g := &e2eGSLB{logs: &syncWriter{}}
	for attempt := 0; ; attempt++ {
		pc, ln, err := dnsListenFree()
		if err != nil {
			t.Fatal(err)
		}
		g.addr = pc.LocalAddr().String()
		pc.Close()
		ln.Close()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		app := newApp()
		app.Writer, app.ErrWriter = g.logs, g.logs
		go func() {
			done <- app.RunContext(ctx, []string{"lbc", "gslb", "serve", "-c", cfg, "--listen", g.addr, "--log-level", "debug"})
		}()
		var first *dns.Msg
		first, err = waitDNS(g.addr, done)
		if err == nil {
			if len(first.Answer) == 1 {
				if a, ok := first.Answer[0].(*dns.A); ok {
					g.first = a.A.String()
				}
			}
			t.Cleanup(func() {
				cancel()
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("lbc gslb serve: %v\n%s", err, g.logs.String())
					}
				case <-time.After(e2eDeadline):
					t.Errorf("lbc gslb serve did not stop in %s", e2eDeadline)
				}
			})
			return g
		}
		cancel()
		if attempt == 4 || !strings.Contains(err.Error(), "--listen") {
			t.Fatalf("lbc gslb serve: %v\n%s", err, g.logs.String())
		}
	}
}

// waitDNS waits until the server answers over UDP and returns that first
// answer, or returns the command's error if it ended.
func waitDNS(addr string, done chan error) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion("www.example.com.", dns.TypeA)
	deadline := time.Now().Add(e2eDeadline)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			return nil, fmt.Errorf("ended: %v", err)
		default:
		}
		if r, _, err := (&dns.Client{Net: "udp", Timeout: 200 * time.Millisecond}).Exchange(m, addr); err == nil {
			return r, nil
		}
	}
	return nil, fmt.Errorf("no DNS answer on %s within %s", addr, e2eDeadline)
}

// ask queries www.example.com A over net and returns the one address
// answered; it checks the answer's shape (authoritative, TTL 1).
func (g *e2eGSLB) ask(net string) (string, error) {
	m := new(dns.Msg)
	m.SetQuestion("www.example.com.", dns.TypeA)
	r, _, err := (&dns.Client{Net: net, Timeout: 3 * time.Second}).Exchange(m, g.addr)
	if err != nil {
		return "", fmt.Errorf("%s: %w", net, err)
	}
	if r.Rcode != dns.RcodeSuccess || !r.Authoritative || len(r.Answer) != 1 {
		return "", fmt.Errorf("%s: want one authoritative answer, got:\n%v", net, r)
	}
	a, ok := r.Answer[0].(*dns.A)
	if !ok {
		return "", fmt.Errorf("%s: answer %v is not an A record", net, r.Answer[0])
	}
	if ttl := time.Duration(a.Hdr.Ttl) * time.Second; ttl != e2eTTL {
		return "", fmt.Errorf("%s: TTL %s, want %s: a resolver keeps an old answer at most that long", net, ttl, e2eTTL)
	}
	return a.A.String(), nil
}

// answer asks over UDP and TCP and checks that both agree.
func (g *e2eGSLB) answer(t *testing.T) string {
	t.Helper()
	u, err := g.ask("udp")
	if err != nil {
		t.Fatal(err)
	}
	tc, err := g.ask("tcp")
	if err != nil {
		t.Fatal(err)
	}
	if u != tc {
		t.Fatalf("UDP answers %s, TCP %s\n%s", u, tc, g.logs.String())
	}
	return u
}

// transition changes a site's backends and measures, by polling both
// every 20 ms, when the site's own report showed the change (healthy ==
// wantHealthy) and when the DNS answer became want over both UDP and
// TCP. It fails the test if either does not happen by the deadline.
func transition(t *testing.T, g *e2eGSLB, site *e2eSite, up bool, wantHealthy int, want string, others ...*e2eSite) (detect, move time.Duration) {
	t.Helper()
	start := time.Now()
	site.setBackends(up)
	var reported, moved time.Time
	for reported.IsZero() || moved.IsZero() {
		if time.Since(start) > e2eDeadline {
			var logs strings.Builder
			for _, s := range append([]*e2eSite{site}, others...) {
				fmt.Fprintf(&logs, "--- lbc run (site %s):\n%s", s.name, s.logs.String())
			}
			t.Fatalf("after setting site %s's backends up=%v: reported %v, answer moved %v, within %s\n%s--- lbc gslb serve:\n%s",
				site.name, up, !reported.IsZero(), !moved.IsZero(), e2eDeadline, logs.String(), g.logs.String())
		}
		if reported.IsZero() && site.healthy() == wantHealthy {
			reported = time.Now()
		}
		if moved.IsZero() {
			if u, err := g.ask("udp"); err == nil && u == want {
				if tc, err := g.ask("tcp"); err == nil && tc == want {
					moved = time.Now()
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	detect = reported.Sub(start)
	// The GSLB can poll the site a moment before this test's own look at
	// the report: an answer that moved first counts as 0.
	move = max(0, moved.Sub(reported))
	return detect, move
}

// TestE2E_G1_LbcRunSitesFailoverOverDNS: answers go to the preferred site
// (G-6); its backends fail their health checks, and the answer moves to
// the other site (G-1) within one poll interval plus the TTL of the site
// reporting it; the backends recover, and the answer moves back.
func TestE2E_G1_LbcRunSitesFailoverOverDNS(t *testing.T) {
	seoul := startSite(t, "seoul", "203.0.113.10", "127.0.0.161", "127.0.0.162")
	virginia := startSite(t, "virginia", "198.51.100.20", "127.0.0.171", "127.0.0.172")
	for _, s := range []*e2eSite{seoul, virginia} {
		if h := s.healthy(); h != 2 {
			t.Fatalf("site %s reports %d healthy backends after its first push, want 2\n%s", s.name, h, s.logs.String())
		}
	}
	g := startGSLB(t, seoul, virginia)

	// Both sites healthy: the preferred one (G-6), every time, on both
	// transports. The server answers only once its first polls have ended
	// (TestE2E_G1_FirstAnswerFollowsTheFirstReports), so this is at once,
	// unless a first poll missed on a loaded machine: wait for it.
	deadline := time.Now().Add(e2eDeadline)
	for {
		u, uerr := g.ask("udp")
		tc, terr := g.ask("tcp")
		if uerr == nil && terr == nil && u == seoul.vip && tc == seoul.vip {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never answered the preferred site seoul (%s): last UDP %s %v, TCP %s %v\n%s", seoul.vip, u, uerr, tc, terr, g.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := 0; i < 5; i++ {
		if a := g.answer(t); a != seoul.vip {
			t.Fatalf("query %d: %s, want seoul (%s)", i, a, seoul.vip)
		}
	}

	// Designed bounds: the site sees the failure within one health
	// interval (+10 % jitter) plus the probe timeout and the debounce; the
	// GSLB's answer follows within one poll interval plus the poll
	// timeout, and a resolver that cached the old answer holds it at most
	// the TTL longer.
	detectBound := e2eHealthInterval*11/10 + e2eHealthInterval + 10*time.Millisecond + e2eGrace
	moveBound := e2ePollInterval + e2ePollTimeout + e2eTTL + e2eGrace

	detect, move := transition(t, g, seoul, false, 0, virginia.vip, virginia)
	t.Logf("seoul's backends fail: the site reports it after %s, the answer moves to virginia %s later (bound %s)",
		detect.Round(time.Millisecond), move.Round(time.Millisecond), moveBound)
	if detect > detectBound || move > moveBound {
		t.Errorf("failover too slow: site detection %s (bound %s), answer move %s (bound %s)", detect, detectBound, move, moveBound)
	}
	// It stays there while seoul is down.
	for i := 0; i < 5; i++ {
		if a := g.answer(t); a != virginia.vip {
			t.Fatalf("seoul down, query %d: %s, want virginia (%s)", i, a, virginia.vip)
		}
		time.Sleep(e2ePollInterval / 5)
	}

	detect, move = transition(t, g, seoul, true, 2, seoul.vip, virginia)
	t.Logf("seoul's backends recover: the site reports it after %s, the answer moves back %s later (bound %s)",
		detect.Round(time.Millisecond), move.Round(time.Millisecond), moveBound)
	if detect > detectBound || move > moveBound {
		t.Errorf("failback too slow: site detection %s (bound %s), answer move %s (bound %s)", detect, detectBound, move, moveBound)
	}

	// The other direction: virginia failing changes nothing for answers
	// already at seoul.
	virginia.setBackends(false)
	waitUntil(t, func() bool { return virginia.healthy() == 0 }, virginia.logs)
	time.Sleep(2 * e2ePollInterval)
	if a := g.answer(t); a != seoul.vip {
		t.Fatalf("virginia down: %s, want seoul (%s)", a, seoul.vip)
	}

	// Clean shutdown of the sites (the GSLB stops in its cleanup).
	seoul.stop(t)
	virginia.stop(t)
}

// TestE2E_G1_FirstAnswerFollowsTheFirstReports: a GSLB that answered
// before its first polls ended would give the preferred site seoul (no
// site known, all kept: G-1 passes them on) although seoul reports no
// healthy backend. Both sites' reports take 100 ms to come (the poll
// timeout is 4 s, so a loaded machine does not turn them into misses),
// so such an answer would be there to see; lbc gslb serve answers only
// after its first polls, and its first answer is virginia.
func TestE2E_G1_FirstAnswerFollowsTheFirstReports(t *testing.T) {
	report := func(site string, healthy int) *e2eSite {
		body := fmt.Sprintf(`{"schema": %q, "site": %q, "at": "2026-01-01T00:00:00Z", "services": [{"name": "web", "healthyBackends": %d, "backends": 2}]}`, metrics.Schema, site, healthy)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(100 * time.Millisecond)
			io.WriteString(w, body)
		}))
		t.Cleanup(srv.Close)
		return &e2eSite{name: site, addr: srv.Listener.Addr().String()}
	}
	seoul, virginia := report("seoul", 0), report("virginia", 2)
	config := strings.Replace(e2eGSLBConfig, "{interval: 250ms, timeout: 200ms,", "{interval: 5s, timeout: 4s,", 1)
	if config == e2eGSLBConfig {
		t.Fatal("e2eGSLBConfig's metrics line changed: update the replacement")
	}
	g := startGSLBWith(t, config, seoul, virginia)
	if g.first != "198.51.100.20" {
		t.Fatalf("first answer %q, want virginia (198.51.100.20): seoul reports no healthy backend\n%s", g.first, g.logs.String())
	}
	for i := 0; i < 3; i++ {
		if a := g.answer(t); a != "198.51.100.20" {
			t.Fatalf("query %d: %s, want virginia (198.51.100.20)", i, a)
		}
	}
}
