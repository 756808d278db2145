package controller_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/controller/internal/backendtest"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/bmv2"
)

// Issue 31, item 2, measured against a live simple_switch_grpc:
//
//	go test -run - -bench ScrapesDuringReloads -benchtime 1x ./controller/
//
// BenchmarkScrapesDuringReloads: lbc run's controller (real clock,
// counters read every DefaultCounterInterval, web's ring at the default
// 65,537 slots) reloads its configuration every reloadEvery, web's ring
// size changed each time (a new ring half, the flip, the old half's
// deletes), first with nobody scraping, then with 4 scrape loops (two on
// /metrics, two on /v1/status, over HTTP, each every scrapeEvery).
// reload-ratio is the mean SIGHUP-to-on-switch time (Reload returns once
// the switch answered the push's last write) with the scrapes over the
// mean without; scrape-p50-ms, scrape-p99-ms and scrape-max-ms are the
// scrapes' latencies. Wanted: reload-ratio ≤ 1.2, scrape-p99-ms < 100.
func BenchmarkScrapesDuringReloads(b *testing.B) {
	const (
		reloadEvery = 5 * time.Second
		reloads     = 6 // per phase
		scrapeEvery = 250 * time.Millisecond
		loops       = 4
	)
	sw := startBMv2Process(b)
	f := backendtest.Start(b, allSeedIPs()...)
	base := patientProbes(seedConfig(f.Port, true, 0, 1, 1))
	base = strings.Replace(base, "    ringSize: 1021\n", "", 1) // the default ring, 65,537 slots
	// The other configuration's ring has another size: each reload writes
	// a whole new ring half, flips, and deletes the old one (≈ 131k
	// writes), as a change of every slot would.
	with := strings.Replace(base, "    healthCheck:", "    ringSize: 65521\n    healthCheck:", 1)
	if with == base {
		b.Fatal("seedConfig changed: no place for ringSize")
	}
	path := filepath.Join(b.TempDir(), "lb.yaml")
	if err := os.WriteFile(path, []byte(base), 0o644); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := defaultBackoff(embeddedSwitchOptions(sw.addr))
	octx, ocancel := context.WithTimeout(ctx, budgetTB(b))
	tg, err := bmv2.OpenShared(octx, opts)
	ocancel()
	if err != nil {
		b.Fatal(err)
	}
	defer tg.Close()
	m := controller.NewMetrics()
	logs := &syncBuffer{}
	c, err := controller.New(controller.Options{ConfigPath: path, Targets: []targets.Target{tg}, Metrics: m,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), WatchInterval: -1, VerifyInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-c.Ready():
	case err := <-done:
		b.Fatalf("controller: %v\n%s", err, logs)
	case <-time.After(budgetTB(b)):
		b.Fatalf("controller not ready\n%s", logs)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.Handle(controller.StatusPath, c.StatusHandler())
	srv := httptest.NewServer(mux)
	defer srv.Close()

	n := 0
	reload := func() time.Duration {
		n++
		cfg := base
		if n%2 == 1 {
			cfg = with
		}
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := c.Reload(ctx); err != nil {
			b.Fatalf("reload %d: %v\n%s", n, err, logs)
		}
		return time.Since(start)
	}
	// phase reloads every reloadEvery and returns each reload's time.
	phase := func() []time.Duration {
		var took []time.Duration
		for i := 0; i < reloads; i++ {
			start := time.Now()
			took = append(took, reload())
			time.Sleep(reloadEvery - time.Since(start))
		}
		return took
	}
	reload() // warm up: the first ring rewrite, both configurations seen
	reload()
	for i := 0; i < b.N; i++ {
		quiet := phase()

		var mu sync.Mutex
		var lat []time.Duration
		var failed error
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for l := 0; l < loops; l++ {
			url := srv.URL + "/metrics"
			if l%2 == 1 {
				url = srv.URL + controller.StatusPath
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				t := time.NewTicker(scrapeEvery)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
					}
					start := time.Now()
					resp, err := http.Get(url)
					if err == nil {
						_, err = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if err == nil && resp.StatusCode != http.StatusOK {
							err = fmt.Errorf("%s: %s", url, resp.Status)
						}
					}
					mu.Lock()
					lat = append(lat, time.Since(start))
					if err != nil && failed == nil {
						failed = err
					}
					mu.Unlock()
				}
			}()
		}
		scraped := phase()
		close(stop)
		wg.Wait()
		if failed != nil {
			b.Fatalf("a scrape failed: %v", failed)
		}
		slices.Sort(lat)
		pct := func(p float64) float64 {
			return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1e3
		}
		mean := func(d []time.Duration) float64 {
			var s time.Duration
			for _, x := range d {
				s += x
			}
			return s.Seconds() / float64(len(d))
		}
		b.Logf("reloads without scrapes: %v", quiet)
		b.Logf("reloads with %d scrape loops: %v", loops, scraped)
		b.Logf("%d scrapes: p50 %.1f ms, p99 %.1f ms, max %.1f ms", len(lat), pct(0.5), pct(0.99), pct(1))
		b.ReportMetric(mean(scraped)/mean(quiet), "reload-ratio")
		b.ReportMetric(mean(quiet), "s/reload-quiet")
		b.ReportMetric(mean(scraped), "s/reload-scraped")
		b.ReportMetric(pct(0.5), "scrape-p50-ms")
		b.ReportMetric(pct(0.99), "scrape-p99-ms")
		b.ReportMetric(pct(1), "scrape-max-ms")
		b.ReportMetric(0, "ns/op")
	}
	if strings.Contains(logs.String(), "cannot read the target's counters") {
		b.Errorf("a counter read failed:\n%s", logs)
	}
}
