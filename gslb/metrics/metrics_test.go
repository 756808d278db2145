package metrics

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/gslb/policy"
)

func u64(v uint64) *uint64 { return &v }

func TestHandlerServesSchema(t *testing.T) {
	st := NewStore(SiteReport{Site: "seoul"})
	st.Update("web", func(s *ServiceReport) {
		s.HealthyBackends, s.Backends, s.Sessions, s.BitsPerSec, s.NewConnectionsPerSec = 2, 3, 40, 1e6, 12.5
		s.NewConnectionsTotal = u64(1000)
	})
	srv := httptest.NewServer(Handler(st.Report))
	defer srv.Close()
	resp, err := http.Get(srv.URL + Path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content type %q", ct)
	}
	var raw map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	// The field names are the contract with `lbc run`: pin them.
	if raw["schema"] != Schema || raw["site"] != "seoul" || raw["at"] == nil {
		t.Fatalf("report %v", raw)
	}
	svc := raw["services"].([]any)[0].(map[string]any)
	for _, k := range []string{"name", "healthyBackends", "backends", "sessions", "bitsPerSec", "newConnectionsPerSec", "newConnectionsTotal"} {
		if _, ok := svc[k]; !ok {
			t.Errorf("service report lacks %q: %v", k, svc)
		}
	}
	post, _ := http.Post(srv.URL, "text/plain", strings.NewReader("x"))
	if post.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %s", post.Status)
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, in := range []string{
		`{`,
		`{"schema":"other/v9","site":"a","services":[]}`,
		`{"schema":"lbc.gslb.metrics/v1","services":[{"name":""}]}`,
		`{"schema":"lbc.gslb.metrics/v1","services":[{"name":"w","healthyBackends":3,"backends":2}]}`,
		`{"schema":"lbc.gslb.metrics/v1","services":[{"name":"w","bitsPerSec":-1}]}`,
	} {
		if _, err := Decode([]byte(in)); err == nil {
			t.Errorf("%s: accepted", in)
		}
	}
}

// site is a real HTTP metrics server on 127.0.0.1 with values the test
// controls, and a switch that makes it fail or hang.
type site struct {
	store *Store
	srv   *httptest.Server
	fail  atomic.Bool
	hang  chan struct{}
}

func newSite(t *testing.T, name string) *site {
	s := &site{store: NewStore(SiteReport{Site: name}), hang: make(chan struct{})}
	h := Handler(s.store.Report)
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.fail.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// waitFor polls cond (a bounded loop: the test fails after 5 s).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestPollerTracksHealthAndUnknown(t *testing.T) {
	a := newSite(t, "a")
	a.store.Update("web", func(s *ServiceReport) { s.HealthyBackends, s.Backends = 2, 2 })
	p := NewPoller(PollerConfig{Interval: 20 * time.Millisecond, UnknownAfter: 3}, []Target{{"a", a.srv.URL + Path}, {"never", "http://127.0.0.1:1" + Path}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)

	waitFor(t, "first report", func() bool { return p.Metrics("a", "web").Known })
	if m := p.Metrics("a", "web"); m.HealthyBackends != 2 {
		t.Fatalf("metrics %+v", m)
	}
	if m := p.Metrics("never", "web"); m.Known {
		t.Fatal("a site that never answered is known")
	}
	if m := p.Metrics("a", "other"); !m.Known || m.HealthyBackends != 0 {
		t.Fatalf("service absent from the report: %+v, want known with no backend", m)
	}
	a.store.Update("web", func(s *ServiceReport) { s.HealthyBackends = 0 })
	waitFor(t, "health change", func() bool { return p.Metrics("a", "web").HealthyBackends == 0 })
	a.fail.Store(true)
	waitFor(t, "unknown after missed polls", func() bool { return !p.Metrics("a", "web").Known })
	for _, s := range p.Status() {
		if s.Site == "a" && (s.Misses < 3 || s.LastErr == nil) {
			t.Fatalf("status %+v", s)
		}
	}
	a.fail.Store(false)
	waitFor(t, "known again", func() bool { return p.Metrics("a", "web").Known })
}

func TestPollerSlowSiteNeverBlocks(t *testing.T) {
	slow := make(chan struct{})
	defer close(slow)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-slow:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	fast := newSite(t, "fast")
	fast.store.Update("web", func(s *ServiceReport) { s.HealthyBackends, s.Backends = 1, 1 })
	p := NewPoller(PollerConfig{Interval: 50 * time.Millisecond, Timeout: 40 * time.Millisecond, UnknownAfter: 2}, []Target{{"slow", srv.URL}, {"fast", fast.srv.URL}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	// While the slow site's polls hang, reads return at once and the fast
	// site is polled on its own schedule.
	waitFor(t, "fast site known", func() bool { return p.Metrics("fast", "web").Known })
	for i := 0; i < 10; i++ {
		if p.Metrics("slow", "web").Known {
			t.Fatal("slow site known")
		}
	}
	waitFor(t, "slow site's polls time out", func() bool {
		for _, s := range p.Status() {
			if s.Site == "slow" && s.Misses >= 2 {
				return true
			}
		}
		return false
	})
}

func TestPollerConnectionSamplesFromTotal(t *testing.T) {
	a := newSite(t, "a")
	total := uint64(0)
	a.store.Update("web", func(s *ServiceReport) { s.NewConnectionsTotal = u64(total); s.NewConnectionsPerSec = 9999 })
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	p := NewPoller(PollerConfig{Interval: time.Second, Now: func() time.Time { return now }}, []Target{{"a", a.srv.URL}})
	ctx := context.Background()
	p.PollOnce(ctx) // baseline counter
	// The seed's seconds: 100, 110, 120, 130, 140 new connections.
	for _, n := range []uint64{100, 110, 120, 130, 140} {
		total += n
		a.store.Update("web", func(s *ServiceReport) { s.NewConnectionsTotal = u64(total) })
		now = now.Add(time.Second)
		p.PollOnce(ctx)
	}
	m := p.Metrics("a", "web")
	load, ok := policy.ConnLoad(m.Conn, now, 5*time.Second)
	if !ok || load != 120 {
		t.Fatalf("connection load %v (%v), want 120/s from the counter differences", load, ok)
	}
}

func TestPollerConnectionSamplesFromRate(t *testing.T) {
	a := newSite(t, "a")
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	p := NewPoller(PollerConfig{Interval: time.Second, Now: func() time.Time { return now }}, []Target{{"a", a.srv.URL}})
	for _, r := range []float64{100, 110, 120, 130, 140} {
		a.store.Update("web", func(s *ServiceReport) { s.NewConnectionsPerSec = r })
		now = now.Add(time.Second)
		p.PollOnce(context.Background())
	}
	if load, _ := policy.ConnLoad(p.Metrics("a", "web").Conn, now, 5*time.Second); load != 120 {
		t.Fatalf("connection load %v, want 120/s", load)
	}
}

// TestPollerPolledAfterEveryFirstPoll: Polled closes once every site's
// first poll has ended, a report or a miss, and not while one is still
// waiting for its site; a server waits for it before it answers (G-1: a
// GSLB that has polled nothing keeps every site).
func TestPollerPolledAfterEveryFirstPoll(t *testing.T) {
	gate := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		Handler(NewStore(SiteReport{Site: "gated"}).Report).ServeHTTP(w, r)
	}))
	defer srv.Close()
	fast := newSite(t, "fast")
	p := NewPoller(PollerConfig{Interval: time.Minute, Timeout: 50 * time.Second}, []Target{{"gated", srv.URL + Path}, {"fast", fast.srv.URL + Path}, {"never", "http://127.0.0.1:1" + Path}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	waitFor(t, "the fast site's and the unreachable site's first polls", func() bool {
		n := 0
		for _, s := range p.Status() {
			if s.Site != "gated" && s.Polls == 1 {
				n++
			}
		}
		return n == 2
	})
	select {
	case <-p.Polled():
		t.Fatal("Polled closed while the gated site's first poll waits for its answer")
	default:
	}
	close(gate)
	select {
	case <-p.Polled():
	case <-time.After(5 * time.Second):
		t.Fatal("Polled not closed 5 s after the last first poll could end")
	}
	if !p.Metrics("gated", "web").Known || p.Metrics("never", "web").Known {
		t.Fatalf("after Polled: gated %+v, never %+v; want gated known, never unknown", p.Metrics("gated", "web"), p.Metrics("never", "web"))
	}
}
