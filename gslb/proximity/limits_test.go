package proximity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The limits of NewHandler keep a site from being made a prober of others
// by whoever reaches its endpoint (issue 36). No test sends a packet: the
// prober counts calls and answers a fixed RTT.

// countProber counts probes; when gate is set, each probe waits for it.
type countProber struct {
	calls   atomic.Int32
	gate    chan struct{}
	started chan netip.Addr
	panics  atomic.Bool
	sawDL   atomic.Int64 // the last probe's time left until its deadline
}

func (p *countProber) RTT(ctx context.Context, a netip.Addr, m Method, port int) (time.Duration, Method, error) {
	p.calls.Add(1)
	if dl, ok := ctx.Deadline(); ok {
		p.sawDL.Store(int64(time.Until(dl)))
	}
	if p.started != nil {
		p.started <- a
	}
	if p.panics.Load() {
		panic("prober bug")
	}
	if p.gate != nil {
		select {
		case <-p.gate:
		case <-ctx.Done():
			return 0, m, ctx.Err()
		}
	}
	if m == Auto {
		m = TCP
	}
	return 1234 * time.Microsecond, m, nil
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func get(t *testing.T, srv *httptest.Server, q string) (int, Result, http.Header) {
	t.Helper()
	code, res, h, err := tryGet(srv, q)
	if err != nil {
		t.Fatal(err)
	}
	return code, res, h
}

// tryGet is get for other goroutines than the test's.
func tryGet(srv *httptest.Server, q string) (int, Result, http.Header, error) {
	resp, err := srv.Client().Get(srv.URL + q)
	if err != nil {
		return 0, Result{}, nil, err
	}
	defer resp.Body.Close()
	var res Result
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, &res); err != nil {
		return 0, Result{}, nil, fmt.Errorf("%s: %s: not JSON: %q", q, resp.Status, body)
	}
	return resp.StatusCode, res, resp.Header, nil
}

func limited(p Prober, allow func(netip.Addr) bool, l Limits) *httptest.Server {
	srv := httptest.NewUnstartedServer(NewHandler(p, allow, l))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic test
	srv.Start()
	return srv
}

func TestLimitsRate(t *testing.T) {
	p := &countProber{}
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	srv := limited(p, loopbackOnly, Limits{Rate: 2, Burst: 2, Now: clk.Now})
	defer srv.Close()
	for i, want := range []int{200, 200, 429, 429} {
		code, res, h := get(t, srv, fmt.Sprintf("?target=127.0.0.%d&method=tcp&port=53", i+1))
		if code != want {
			t.Fatalf("request %d: %d %+v, want %d", i, code, res, want)
		}
		if code == 429 && (h.Get("Retry-After") == "" || !strings.Contains(res.Error, "over this site's probe rate (2/s)")) {
			t.Fatalf("429 without Retry-After or reason: %v %+v", h, res)
		}
	}
	if n := p.calls.Load(); n != 2 {
		t.Fatalf("%d probes sent, want 2: a refused request sends nothing", n)
	}
	clk.Add(time.Second) // two more tokens
	for i := 0; i < 2; i++ {
		if code, res, _ := get(t, srv, fmt.Sprintf("?target=127.0.1.%d&method=tcp", i)); code != 200 {
			t.Fatalf("after a second: %d %+v", code, res)
		}
	}
	if code, _, _ := get(t, srv, "?target=127.0.2.1&method=tcp"); code != 429 {
		t.Fatalf("burst not bounded after refill: %d", code)
	}
}

func TestLimitsInFlight(t *testing.T) {
	p := &countProber{gate: make(chan struct{}), started: make(chan netip.Addr, 8)}
	srv := limited(p, loopbackOnly, Limits{MaxInFlight: 2})
	defer srv.Close()
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			codes[i], _, _, _ = tryGet(srv, fmt.Sprintf("?target=127.0.0.%d&method=tcp", i+1))
		}(i)
	}
	<-p.started
	<-p.started // both probes run
	code, res, _ := get(t, srv, "?target=127.0.0.9&method=tcp")
	if code != 429 || !strings.Contains(res.Error, "already runs 2 probes") {
		t.Fatalf("third probe while two run: %d %+v", code, res)
	}
	close(p.gate)
	wg.Wait()
	if codes[0] != 200 || codes[1] != 200 || p.calls.Load() != 2 {
		t.Fatalf("codes %v, probes %d", codes, p.calls.Load())
	}
	if code, _, _ := get(t, srv, "?target=127.0.0.9&method=tcp"); code != 200 {
		t.Fatalf("after the two ended: %d", code)
	}
}

func TestLimitsReuse(t *testing.T) {
	p := &countProber{gate: make(chan struct{}), started: make(chan netip.Addr, 8)}
	clk := &fakeClock{t: time.Unix(1e9, 0)}
	srv := limited(p, loopbackOnly, Limits{Reuse: time.Second, Rate: 100, Burst: 100, Now: clk.Now})
	defer srv.Close()
	// Two requests for one target while its probe runs: one probe.
	var wg sync.WaitGroup
	results := make([]Result, 2)
	wg.Add(1)
	go func() { defer wg.Done(); _, results[0], _, _ = tryGet(srv, "?target=127.0.0.1&method=tcp&port=53") }()
	<-p.started
	wg.Add(1)
	go func() { defer wg.Done(); _, results[1], _, _ = tryGet(srv, "?target=127.0.0.1&method=tcp&port=53") }()
	// The second request waits for the first one's probe.
	for deadline := time.Now().Add(10 * time.Second); waiting(srv) < 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the second request does not wait for the first probe (probes %d)", p.calls.Load())
		}
	}
	close(p.gate)
	wg.Wait()
	if p.calls.Load() != 1 || results[0].RTTNanos != results[1].RTTNanos || results[1].RTTNanos == 0 {
		t.Fatalf("probes %d, results %+v", p.calls.Load(), results)
	}
	// Within Reuse: the last result, no probe.
	clk.Add(900 * time.Millisecond)
	if code, res, _ := get(t, srv, "?target=127.0.0.1&method=tcp&port=53"); code != 200 || res.RTTNanos == 0 || p.calls.Load() != 1 {
		t.Fatalf("within reuse: %d %+v, probes %d", code, res, p.calls.Load())
	}
	// Another port or method is another probe; after Reuse, again.
	get(t, srv, "?target=127.0.0.1&method=tcp&port=54")
	<-p.started
	clk.Add(200 * time.Millisecond)
	get(t, srv, "?target=127.0.0.1&method=tcp&port=53")
	<-p.started
	if p.calls.Load() != 3 {
		t.Fatalf("probes %d, want 3", p.calls.Load())
	}
}

// waiting counts the requests waiting for another's probe.
func waiting(srv *httptest.Server) int {
	h := srv.Config.Handler.(*handler)
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waiting
}

func TestLimitsPortsMethodsTimeout(t *testing.T) {
	p := &countProber{}
	srv := limited(p, loopbackOnly, Limits{Ports: []int{53, 5353}, MaxTimeout: 100 * time.Millisecond})
	defer srv.Close()
	for _, tc := range []struct {
		q    string
		code int
		err  string
	}{
		{"?target=127.0.0.1&method=tcp&port=22", 403, "tcp port 22 not allowed by this site (it allows 53,5353)"},
		{"?target=127.0.0.1&port=22", 403, "tcp port 22 not allowed"}, // auto may fall back to TCP
		{"?target=127.0.0.1&method=udp", 400, `method "udp": use auto, icmp or tcp`},
		{"?target=127.0.0.1&method=tcp&port=0", 400, "port: want 1..65535"},
		{"?target=10.0.0.1&method=tcp", 403, "target 10.0.0.1 not allowed by this site"},
		{"?target=::ffff:10.0.0.1&method=tcp", 403, "target 10.0.0.1 not allowed"},
	} {
		code, res, _ := get(t, srv, tc.q)
		if code != tc.code || !strings.Contains(res.Error, tc.err) {
			t.Errorf("%s: %d %q, want %d %q", tc.q, code, res.Error, tc.code, tc.err)
		}
	}
	if p.calls.Load() != 0 {
		t.Fatalf("%d probes sent for refused requests", p.calls.Load())
	}
	// ICMP has no port to check; port 5353 is allowed; the timeout asked
	// for is cut to MaxTimeout.
	for _, q := range []string{"?target=127.0.0.1&method=icmp&port=22", "?target=127.0.0.1&method=tcp&port=5353&timeout=10s"} {
		if code, res, _ := get(t, srv, q); code != 200 {
			t.Errorf("%s: %d %+v", q, code, res)
		}
	}
	if left := time.Duration(p.sawDL.Load()); left <= 0 || left > 100*time.Millisecond {
		t.Fatalf("probe deadline %s away, want at most MaxTimeout 100ms", left)
	}
	resp, err := srv.Client().Post(srv.URL+"?target=127.0.0.1", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %s", resp.Status)
	}
}

// A prober that panics leaves no waiter behind and no probe counted.
func TestLimitsProberPanic(t *testing.T) {
	p := &countProber{}
	p.panics.Store(true)
	srv := limited(p, loopbackOnly, Limits{MaxInFlight: 1, Reuse: time.Minute})
	defer srv.Close()
	if _, err := srv.Client().Get(srv.URL + "?target=127.0.0.1&method=tcp"); err == nil {
		t.Fatal("a panicking probe answered")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"?target=127.0.0.1&method=tcp", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("the request reusing the panicked probe: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 500 {
		t.Fatalf("reused panicked probe: %s", resp.Status)
	}
	p.panics.Store(false)
	if code, res, _ := get(t, srv, "?target=127.0.0.2&method=tcp"); code != 200 {
		t.Fatalf("in-flight count leaked: %d %+v", code, res)
	}
}

func TestDefaultLimits(t *testing.T) {
	l := DefaultLimits()
	if l.Rate <= 0 || l.Burst <= 0 || l.MaxInFlight <= 0 || l.Reuse <= 0 || len(l.Ports) == 0 || l.maxTimeout() > MaxProbeTimeout {
		t.Fatalf("a default is unlimited: %+v", l)
	}
	if s := l.String(); !strings.Contains(s, "tcp ports 53") || !strings.Contains(s, "100 probes/s") {
		t.Fatalf("String: %s", s)
	}
}

func TestAllow(t *testing.T) {
	pub, err := ParseAllow([]string{"public"})
	if err != nil {
		t.Fatal(err)
	}
	for a, want := range map[string]bool{
		"8.8.8.8": true, "2606:4700:4700::1111": true, "::ffff:8.8.8.8": true,
		"127.0.0.1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"100.64.0.1": false, "169.254.1.1": false, "224.0.0.1": false, "255.255.255.255": false,
		"0.0.0.0": false, "0.1.2.3": false, "198.18.0.1": false, "240.0.0.1": false,
		"::1": false, "::": false, "fe80::1": false, "fd00::1": false, "ff02::1": false,
	} {
		if got := pub.Contains(netip.MustParseAddr(a)); got != want {
			t.Errorf("public contains %s: %v, want %v", a, got, want)
		}
	}
	lo, err := ParseAllow([]string{"127.0.0.0/8, ::1", "::ffff:10.0.0.0/104"})
	if err != nil {
		t.Fatal(err)
	}
	for a, want := range map[string]bool{"127.0.0.2": true, "::1": true, "10.9.9.9": true, "8.8.8.8": false, "::2": false} {
		if got := lo.Contains(netip.MustParseAddr(a)); got != want {
			t.Errorf("%s contains %s: %v, want %v", lo, a, got, want)
		}
	}
	none, err := ParseAllow([]string{"none"})
	if err != nil || !none.Empty() || none.String() != "none" || none.Contains(netip.MustParseAddr("8.8.8.8")) {
		t.Fatalf("none: %v %v", none, err)
	}
	for _, bad := range [][]string{{"none", "public"}, {"localhost"}, {"10.0.0.0/33"}, {"fe80::1%eth0"}} {
		if _, err := ParseAllow(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The GSLB side names a site that does not serve the endpoint, instead of
// failing to decode its 404 page (issue 36).
func TestAskNotServed(t *testing.T) {
	srv := httptest.NewServer(http.NewServeMux()) // 404 page not found, as an older lbc run
	defer srv.Close()
	_, err := Ask(context.Background(), srv.Client(), srv.URL+Path, loop, TCP, 53, time.Second)
	var ns *NotServedError
	if !errors.As(err, &ns) || strings.Contains(err.Error(), "unmarshal") ||
		err.Error() != "does not serve "+Path+": "+srv.URL+Path+" answered 404 Not Found: 404 page not found" {
		t.Fatalf("%v", err)
	}
	if f := failure("seoul", err); !strings.HasPrefix(f, "site seoul does not serve /v1/gslb/rtt: ") {
		t.Fatalf("note: %s", f)
	}
	// JSON that is not a Result, with 200, is not the endpoint either.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"status": "ok"}`) }))
	defer other.Close()
	if _, err := Ask(context.Background(), other.Client(), other.URL, loop, TCP, 53, time.Second); !errors.As(err, &ns) {
		t.Fatalf("other JSON: %v", err)
	}
	// The site's own refusal is its words.
	ref := httptest.NewServer(NewHandler(&countProber{}, loopbackOnly, Limits{}))
	defer ref.Close()
	_, err = Ask(context.Background(), ref.Client(), ref.URL, netip.MustParseAddr("192.0.2.1"), TCP, 53, time.Second)
	var ae *AnswerError
	if !errors.As(err, &ae) || ae.Code != 403 || failure("virginia", err) != "site virginia answered 403 Forbidden: target 192.0.2.1 not allowed by this site" {
		t.Fatalf("%v / %s", err, failure("virginia", err))
	}
}
