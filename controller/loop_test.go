package controller_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/controller/internal/backendtest"
)

func weightedConfig(port int) string {
	return fmt.Sprintf(`tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: api
    vip: 203.0.113.20
    protocol: TCP
    ports: [443]
    localityLbPolicy: WEIGHTED_MAGLEV
    ringSize: 4099
    healthCheck: {type: HTTP, port: %d, requestPath: /weight, healthyThreshold: 1, unhealthyThreshold: 1}
    backends:
      - name: pool
        endpoints:
          - {name: api-1, ip: 127.0.0.41}
          - {name: api-2, ip: 127.0.0.42}
          - {name: api-3, ip: 127.0.0.43}
`, port)
}

func share(st controller.Status, svc, backend string) float64 {
	for _, s := range st.Services {
		if s.Name != svc {
			continue
		}
		for _, b := range s.Backends {
			if b.Name == backend {
				return b.RingShare
			}
		}
	}
	return -1
}

// R-HC-1, R-MAGLEV-2, R-WEIGHT-0: weights read from the probes' headers
// decide the ring; a bad header fails the probe and the backend leaves the
// eligible set, named in the log.
func TestRHC1_WeightsFromHeadersReachTheRing(t *testing.T) {
	f := backendtest.Start(t, "127.0.0.41", "127.0.0.42", "127.0.0.43")
	f.Get("127.0.0.41").SetWeight("0")
	f.Get("127.0.0.42").SetWeight("2")
	f.Get("127.0.0.43").SetWeight("6")
	r := startRig(t, rigOptions{fleet: f, config: weightedConfig})
	st := r.c.Status(r.ctx)
	for _, tc := range []struct {
		b    string
		want float64
	}{{"api-1", 0}, {"api-2", 0.25}, {"api-3", 0.75}} {
		if got := share(st, "api", tc.b); math.Abs(got-tc.want) > 0.01 {
			t.Errorf("%s ring share %.3f, want %.2f (weights 0:2:6)", tc.b, got, tc.want)
		}
	}
	if b := r.sims[0].IR().Backend(r.sims[0].IR().Backends[2].ID); b.Weight != 6 {
		t.Errorf("api-3 weight on the datapath %d, want 6", b.Weight)
	}
	for _, bad := range []string{"1001", "-1", "abc", ""} {
		f.Get("127.0.0.43").SetWeight(bad)
		r.probe(1)
		svc, ring := pushed(t, r.sims[0].IR(), "api")
		if join(ring) != "{api-2}" || join(svc.Eligible) != "{api-2}" {
			t.Errorf("header %q on api-3: ring %s eligible %s, want {api-2}", bad, join(ring), join(svc.Eligible))
		}
		f.Get("127.0.0.43").SetWeight("6")
		r.probe(1)
		if _, ring := pushed(t, r.sims[0].IR(), "api"); join(ring) != "{api-2,api-3}" {
			t.Errorf("after %q then 6: ring %s", bad, join(ring))
		}
	}
	// Reweight: 2:6 → 2:2 moves api-3's share to one half.
	f.Get("127.0.0.43").SetWeight("2")
	r.probe(1)
	if got := share(r.c.Status(r.ctx), "api", "api-3"); math.Abs(got-0.5) > 0.01 {
		t.Errorf("after reweight api-3 share %.3f, want 0.5", got)
	}
	logs := r.logs.String()
	for _, want := range []string{`\"1001\" out of range`, `\"-1\" is not a weight`, `\"abc\" is not a weight`, "no X-Load-Balancing-Endpoint-Weight header"} {
		ok := false
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, "backend=api-3") && strings.Contains(line, want) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("no log line names backend=api-3 with %s", want)
		}
	}
}

// A backend failing every other probe: with thresholds of 2 it never
// causes a push; with thresholds of 1 every probe is a push.
func TestFlappingBackendPushCount(t *testing.T) {
	for _, tc := range []struct {
		threshold int
		pushes    int
	}{{2, 0}, {1, 10}} {
		t.Run(fmt.Sprintf("threshold=%d", tc.threshold), func(t *testing.T) {
			r := startRig(t, rigOptions{config: func(port int) string { return seedConfig(port, false, 0, tc.threshold, tc.threshold) }})
			before, _ := r.sims[0].counts()
			for i := 0; i < 10; i++ {
				r.setHealthy("vm-d2", i%2 == 1)
				r.probe(1)
			}
			after, _ := r.sims[0].counts()
			if got := after - before; got != tc.pushes {
				t.Fatalf("flapping over 10 probes caused %d pushes, want %d", got, tc.pushes)
			}
			if got := r.c.Status(r.ctx).Targets[0].Pushes; int(got) != 1+tc.pushes {
				t.Fatalf("status counts %d pushes, want %d (first push + %d)", got, 1+tc.pushes, tc.pushes)
			}
		})
	}
}

// Changes within the debounce window make one push.
func TestDebounceOnePushPerBurst(t *testing.T) {
	r := startRig(t, rigOptions{debounce: 200 * time.Millisecond, config: func(port int) string { return seedConfig(port, false, 0, 1, 1) }})
	before, _ := r.sims[0].counts()
	for _, n := range []string{"vm-a1", "vm-d1", "vm-b1"} {
		r.setHealthy(n, false)
		r.c.Monitor().ProbeAll(r.ctx) // each round changes one more backend
	}
	if !r.clk.WaitPending(1, 5*time.Second) {
		t.Fatal("no debounce timer armed")
	}
	if a, _ := r.sims[0].counts(); a != before {
		t.Fatalf("pushed %d times before the window closed", a-before)
	}
	r.clk.Advance(200 * time.Millisecond)
	waitFor(t, func() bool { a, _ := r.sims[0].counts(); return a == before+1 })
	if err := r.c.Sync(r.ctx); err != nil { // nothing left to push
		t.Fatal(err)
	}
	if a, _ := r.sims[0].counts(); a != before+1 {
		t.Fatalf("%d pushes for one burst, want 1", a-before)
	}
	svc, _ := pushed(t, r.sims[0].IR(), "web")
	if join(svc.Eligible) != "{vm-a2,vm-d2}" {
		t.Fatalf("eligible %s after the burst", join(svc.Eligible))
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	budget := waitBudget(t)
	deadline := time.Now().Add(budget)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not reached in %v", budget)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func twoServiceConfig(port int, extra string) string {
	return seedConfig(port, false, 0, 1, 1) + fmt.Sprintf(`  - name: dns
    vip: 203.0.113.53
    protocol: UDP
    ports: [53]
    ringSize: 257
    healthCheck: {type: HTTP, port: %d, healthyThreshold: 1, unhealthyThreshold: 1}
    backends:
      - name: ns
        endpoints:
          - {name: ns1, ip: 127.0.0.101}
          - {name: ns2, ip: 127.0.0.102}
%s`, port, extra)
}

// A configuration that fails validation is rejected with its problems and
// the running one keeps serving; a good one applies with the minimal diff
// (only the rows of what changed).
func TestReloadBadKeepsOldGoodAppliesMinimalDiff(t *testing.T) {
	f := backendtest.Start(t, allSeedIPs()...)
	r := startRig(t, rigOptions{fleet: f, config: func(port int) string { return twoServiceConfig(port, "") }})
	s := r.sims[0]
	held := s.IR()
	applies, _ := s.counts()

	bad := strings.Replace(twoServiceConfig(f.Port, ""), "failoverRatio: 0.5", "failoverRatio: 1.5", 1)
	bad = strings.Replace(bad, "ip: 127.0.0.102}\n      - name: ig-d", "ip: not-an-ip}\n      - name: ig-d", 1)
	if err := os.WriteFile(r.cfg, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	err := r.c.Reload(r.ctx)
	if err == nil || !strings.Contains(err.Error(), "failoverRatio") || !strings.Contains(err.Error(), "not-an-ip") {
		t.Fatalf("bad reload: %v; want every problem listed", err)
	}
	if a, _ := s.counts(); a != applies || controller.Digest(s.IR()) != controller.Digest(held) {
		t.Fatal("a rejected configuration changed the datapath")
	}
	if st := r.c.Status(r.ctx); !strings.Contains(st.ReloadError, "failoverRatio") {
		t.Fatalf("status reload error %q", st.ReloadError)
	}
	// The old configuration still serves: health changes still apply.
	r.setHealthy("vm-a1", false)
	r.probe(1)
	if svc, _ := pushed(t, s.IR(), "web"); join(svc.Eligible) != "{vm-a2,vm-d1,vm-d2}" {
		t.Fatalf("after a rejected reload, eligible %s", join(svc.Eligible))
	}
	r.setHealthy("vm-a1", true)
	r.probe(1)

	// Good: one backend added to dns. web must not be touched.
	before := s.IR()
	good := twoServiceConfig(f.Port, "          - {name: ns3, ip: 127.0.0.111}\n")
	if err := os.WriteFile(r.cfg, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.c.Reload(r.ctx); err != nil {
		t.Fatalf("good reload: %v", err)
	}
	s.mu.Lock()
	d := s.lastDiff
	s.mu.Unlock()
	web := before.ServiceByName("web").ID
	for _, c := range d.Changes {
		if (c.Ring != nil && c.Ring.ServiceID == web) || (c.Service != nil && c.Service.ID == web) || (c.Backend != nil && c.Backend.ServiceID == web) || c.VIP != nil {
			t.Errorf("reload wrote %s, which belongs to the unchanged service", c)
		}
	}
	dns := s.IR().ServiceByName("dns")
	if dns == nil || len(dns.Eligible) != 3 {
		t.Fatalf("dns after reload: %+v", dns)
	}
	// Minimal: one backend insert, one ring half (at most 257 slots), one
	// service flip.
	cnt := d.Counts()
	if cnt[compiler.TableBackend] != [3]int{1, 0, 0} || cnt[compiler.TableService] != [3]int{0, 1, 0} || cnt[compiler.TableRing][0]+cnt[compiler.TableRing][1] > 257 {
		t.Errorf("reload diff %v; want 1 backend insert, 1 service modify, ≤257 ring writes", cnt)
	}
	if st := r.c.Status(r.ctx); st.ReloadError != "" {
		t.Errorf("reload error still shown: %q", st.ReloadError)
	}
}

// The file watcher applies a changed file without SIGHUP, and does not
// retry a bad file on every tick.
func TestReloadOnFileChange(t *testing.T) {
	f := backendtest.Start(t, allSeedIPs()...)
	cfg := t.TempDir() + "/lb.yaml"
	if err := os.WriteFile(cfg, []byte(twoServiceConfig(f.Port, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startRigWatch(t, f, cfg)
	if err := os.WriteFile(cfg, []byte(twoServiceConfig(f.Port, "          - {name: ns3, ip: 127.0.0.111}\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		if !r.clk.WaitPending(1, time.Second) {
			return false
		}
		r.clk.Advance(time.Second)
		dns := r.sims[0].IR().ServiceByName("dns")
		return dns != nil && len(dns.Eligible) == 3
	})
}

func startRigWatch(t *testing.T, f *backendtest.Fleet, cfg string) *rig {
	r := &rig{}
	_ = r
	return startRigOpts(t, rigOptions{fleet: f, cfgPath: cfg}, func(o *controller.Options) { o.WatchInterval = time.Second })
}

// Restart: a new controller on a datapath that holds the same
// configuration reads it back and writes nothing.
func TestRestartWritesNothingSim(t *testing.T) {
	f := backendtest.Start(t, allSeedIPs()...)
	s := newLockedSim("sim")
	cfg := t.TempDir() + "/lb.yaml"
	if err := os.WriteFile(cfg, []byte(twoServiceConfig(f.Port, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	r1 := startRig(t, rigOptions{fleet: f, sims: []*lockedSim{s}, cfgPath: cfg})
	r1.setHealthy("vm-a1", false)
	r1.probe(1) // state that differs from all-healthy
	r1.stop()
	applies, writes := s.counts()
	digest := controller.Digest(s.IR())

	r2 := startRig(t, rigOptions{fleet: f, sims: []*lockedSim{s}, cfgPath: cfg})
	if a, w := s.counts(); a != applies || w != writes {
		t.Fatalf("restart wrote %d entities in %d pushes, want 0", w-writes, a-applies)
	}
	if controller.Digest(s.IR()) != digest {
		t.Fatal("restart changed the datapath")
	}
	if st := r2.c.Status(r2.ctx); st.Targets[0].Pushes != 0 {
		t.Fatalf("status counts %d pushes after restart", st.Targets[0].Pushes)
	}
}

// R-DRAIN: a backend removed from the configuration keeps its row, marked
// draining, until drainingTimeoutSec has passed on the controller's clock;
// then the row goes.
func TestRDRAIN_TimerDeletesDrainedBackend(t *testing.T) {
	f := backendtest.Start(t, allSeedIPs()...)
	r := startRig(t, rigOptions{fleet: f, config: func(port int) string { return seedConfig(port, false, 30, 1, 1) }})
	cfg := strings.Replace(seedConfig(f.Port, false, 30, 1, 1), "          - {name: vm-d2, ip: 127.0.0.112}\n", "", 1)
	if err := os.WriteFile(r.cfg, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.c.Reload(r.ctx); err != nil {
		t.Fatal(err)
	}
	var row *compiler.BackendRow
	for _, b := range r.sims[0].IR().Backends {
		if b.Name == "vm-d2" {
			row = &b
		}
	}
	if row == nil || !row.Draining {
		t.Fatalf("vm-d2 after removal: %+v; want a draining row", row)
	}
	if _, ring := pushed(t, r.sims[0].IR(), "web"); strings.Contains(join(ring), "vm-d2") {
		t.Fatal("a draining backend is still on the ring (takes new connections)")
	}
	// The log and the status date the deadline (RFC 3339), not a float
	// of seconds since the epoch. The rig's clock starts at 1.8e9 s.
	until := r.clk.Now().Add(30 * time.Second).UTC()
	want := `detail="keeps its entries for 30s (R-DRAIN)" until=` + until.Format(time.RFC3339Nano)
	if logs := r.logs.String(); !strings.Contains(logs, want) || strings.Contains(logs, "e+09") {
		t.Errorf("draining-start log lacks %s (or has a float time):\n%s", want, logs)
	}
	st := r.c.Status(r.ctx)
	if ev := st.Events[len(st.Events)-1]; ev.Kind != controller.EventDrainStart || !ev.Until.Equal(until) {
		t.Errorf("status event %+v, want draining-start until %s", ev, until)
	}
	r.clk.Advance(29 * time.Second)
	if err := r.c.Sync(r.ctx); err != nil {
		t.Fatal(err)
	}
	if findBackend(r.sims[0].IR(), "vm-d2") == nil {
		t.Fatal("vm-d2 deleted before its draining timeout")
	}
	r.clk.Advance(2 * time.Second) // the draining timer fires on its own
	waitFor(t, func() bool { return findBackend(r.sims[0].IR(), "vm-d2") == nil })
	if !strings.Contains(r.logs.String(), "msg=draining-end service=web event=draining-end backend=vm-d2") {
		t.Errorf("no draining-end event logged:\n%s", r.logs)
	}
}

func findBackend(ir *compiler.IR, name string) *compiler.BackendRow {
	for i := range ir.Backends {
		if ir.Backends[i].Name == name {
			return &ir.Backends[i]
		}
	}
	return nil
}

// A failed push is reported (status, /healthz 503, metrics) and retried.
func TestPushFailureRetried(t *testing.T) {
	m := controller.NewMetrics()
	r := startRig(t, rigOptions{metrics: m, debounce: time.Hour, config: func(port int) string { return seedConfig(port, false, 0, 1, 1) }})
	s := r.sims[0]
	// The first push's ring entries are counted: one half of web's ring
	// (the other is empty at rest).
	s.mu.Lock()
	firstRing := s.lastDiff.Counts()[compiler.TableRing][compiler.Insert]
	s.mu.Unlock()
	if svc := s.IR().ServiceByName("web"); firstRing != int(svc.RingSize) {
		t.Fatalf("the first push inserted %d ring entries, want one half of web's %d", firstRing, svc.RingSize)
	}
	if want := fmt.Sprintf(`lbc_push_entities_total{op="insert",table="ring",target="sim",target_instance=""} %d`+"\n", firstRing); !strings.Contains(scrape(t, m), want) {
		t.Fatalf("metrics after the first push lack %s%s", want, grep(scrape(t, m), "lbc_push_entities_total"))
	}
	s.mu.Lock()
	s.failNext = errors.New("table full")
	s.mu.Unlock()
	r.setHealthy("vm-a1", false)
	r.c.Monitor().ProbeAll(r.ctx)
	if err := r.c.Sync(r.ctx); err == nil || !strings.Contains(err.Error(), "table full") {
		t.Fatalf("sync: %v", err)
	}
	if st := r.c.Status(r.ctx); !strings.Contains(st.Targets[0].LastError, "table full") {
		t.Fatalf("status: %+v", st.Targets[0])
	}
	rec := httptest.NewRecorder()
	r.c.HealthzHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "table full") {
		t.Fatalf("/healthz %d %q", rec.Code, rec.Body)
	}
	r.clk.Advance(5 * time.Second) // RetryInterval
	waitFor(t, func() bool { return r.c.Status(r.ctx).Targets[0].LastError == "" })
	if svc, _ := pushed(t, s.IR(), "web"); join(svc.Eligible) != "{vm-a2,vm-d1,vm-d2}" {
		t.Fatalf("after retry eligible %s", join(svc.Eligible))
	}
	oneHalfAtRest(t, s.IR(), r.logs)
	rec = httptest.NewRecorder()
	r.c.HealthzHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != 200 {
		t.Fatalf("/healthz after recovery: %d %q", rec.Code, rec.Body)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`lbc_backend_healthy{backend="vm-a1",service="web"} 0`,
		`lbc_backend_healthy{backend="vm-a2",service="web"} 1`,
		`lbc_service_eligible_backends{service="web"} 3`,
		`lbc_service_decision{decision="primary",rule="R-ELIG-3d",service="web"} 1`,
		`lbc_pushes_total{result="error",target="sim",target_instance=""} 1`,
		`lbc_errors_total{kind="push"} 1`,
		`lbc_push_duration_seconds_count{target="sim",target_instance=""}`,
		`lbc_health_probes_total{result="failed",service="web"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s\n%s", want, body)
		}
	}
}

var _ = context.Background
