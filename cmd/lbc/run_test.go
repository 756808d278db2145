package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/gslb/metrics"
	"github.com/lbc-dev/lbc/testbench/p4rt"
)

// loopbackBackends serves health checks on each IP at one common port;
// the returned flags switch each one's answer (200 or 503).
func loopbackBackends(t *testing.T, ips ...string) (int, map[string]*atomic.Bool) {
	t.Helper()
	for attempt := 0; attempt < 20; attempt++ {
		first, err := net.Listen("tcp", ips[0]+":0")
		if err != nil {
			t.Fatal(err)
		}
		port := first.Addr().(*net.TCPAddr).Port
		lns := []net.Listener{first}
		for _, ip := range ips[1:] {
			ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", ip, port))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		if len(lns) < len(ips) {
			for _, ln := range lns {
				ln.Close()
			}
			continue
		}
		up := map[string]*atomic.Bool{}
		for i, ip := range ips {
			ok := &atomic.Bool{}
			ok.Store(true)
			up[ip] = ok
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !ok.Load() {
					w.WriteHeader(503)
				}
			})}
			go srv.Serve(lns[i])
			t.Cleanup(func() { srv.Close() })
		}
		return port, up
	}
	t.Fatal("no common port")
	return 0, nil
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

const runTestConfig = `tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: web
    vip: 203.0.113.10
    protocol: TCP
    ports: [80]
    ringSize: 307
    failoverPolicy: {failoverRatio: 0.5}
    healthCheck: {type: HTTP, port: %d, checkIntervalSec: 1, timeoutSec: 1, healthyThreshold: 1, unhealthyThreshold: 1}
    backends:
      - name: ig-a
        endpoints:
          - {name: a1, ip: 127.0.0.151}
          - {name: a2, ip: 127.0.0.152}
      - name: ig-b
        failover: true
        endpoints:
          - {name: b1, ip: 127.0.0.153}
%s`

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// lbc run end to end: two sim targets, real probes on the schedule,
// metrics, status, the GSLB report, a reload through the file watcher,
// and a clean stop.
func TestRunEndToEnd(t *testing.T) {
	port, up := loopbackBackends(t, "127.0.0.151", "127.0.0.152", "127.0.0.153")
	cfg := filepath.Join(t.TempDir(), "lb.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(runTestConfig, port, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	app := newApp()
	var out, errw syncWriter
	app.Writer, app.ErrWriter = &out, &errw
	done := make(chan error, 1)
	go func() {
		done <- app.RunContext(ctx, []string{"lbc", "run", "-c", cfg, "--target", "sim=node-a", "--target", "sim=node-b",
			"--metrics", addr, "--site", "seoul", "--watch-interval", "50ms", "--debounce", "10ms"})
	}()
	base := "http://" + addr
	waitUntil(t, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, &errw)

	status := func() controller.Status {
		_, body := getBody(t, base+controller.StatusPath)
		var st controller.Status
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("status: %v\n%s", err, body)
		}
		return st
	}
	st := status()
	if len(st.Targets) != 2 || !st.DigestsAgree || st.Targets[0].Digest == "" {
		t.Fatalf("targets: %+v", st.Targets)
	}
	// a1 and a2 fail: 0 of 2 primaries healthy → failover to b1 (R-ELIG-3a).
	up["127.0.0.151"].Store(false)
	up["127.0.0.152"].Store(false)
	waitUntil(t, func() bool { s := status(); return len(s.Services) == 1 && s.Services[0].Decision == "failover" }, &errw)
	if st := status(); !st.DigestsAgree || strings.Join(st.Services[0].Eligible, ",") != "b1" {
		t.Fatalf("after failover: %+v", st)
	}
	_, m := getBody(t, base+"/metrics")
	for _, want := range []string{`lbc_failovers_total{service="web"} 1`, `lbc_backend_healthy{backend="a1",service="web"} 0`, `lbc_target_diverged{target="sim",target_instance="node-b"} 0`, `lbc_target_primary{target="sim",target_instance="node-a"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	_, body := getBody(t, base+metrics.Path)
	rep, err := metrics.Decode([]byte(body))
	if err != nil || rep.Site != "seoul" || len(rep.Services) != 1 || rep.Services[0].HealthyBackends != 1 || rep.Services[0].Backends != 3 {
		t.Fatalf("GSLB report %+v, %v", rep, err)
	}
	// lbc status --controller renders the live view.
	sout, _, err := runLBC(t, "status", "--controller", addr)
	if err != nil || !strings.Contains(sout, "service web: failover (R-ELIG-3a)") || !strings.Contains(sout, "sim node-b") || !strings.Contains(sout, "UNHEALTHY") {
		t.Fatalf("lbc status --controller: %v\n%s", err, sout)
	}
	// A bad file is rejected and shown; a good one applies.
	if err := os.WriteFile(cfg, []byte(strings.Replace(fmt.Sprintf(runTestConfig, port, ""), "ringSize: 307", "ringSize: -3", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return strings.Contains(status().ReloadError, "ringSize") }, &errw)
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(runTestConfig, port, "          - {name: b2, ip: 127.0.0.154}\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { s := status(); return s.ReloadError == "" && len(s.Services[0].Backends) == 4 }, &errw)

	cancel() // SIGTERM does the same
	if err := <-done; err != nil {
		t.Fatalf("lbc run: %v\n%s", err, errw.String())
	}
	if !strings.Contains(errw.String(), "the datapaths stay programmed") {
		t.Errorf("no clean-stop log:\n%s", errw.String())
	}
}

func waitUntil(t *testing.T, cond func() bool, logs *syncWriter) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met in 20 s; logs:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// lbcRun is an `lbc run` a test started in-process (startRun).
type lbcRun struct {
	base string // http://ADDR of its --metrics server
	done <-chan error
	logs *syncWriter
	stop func() error // cancels the run and returns its error
}

// startRun runs `lbc run ARGS --metrics ADDR` in-process on a free address;
// a test's cleanup stops it, failing the test on its error, unless the
// test stopped it itself.
func startRun(t *testing.T, args ...string) *lbcRun {
	t.Helper()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	app := newApp()
	var out, errw syncWriter
	app.Writer, app.ErrWriter = &out, &errw
	done := make(chan error, 1)
	go func() {
		done <- app.RunContext(ctx, append(append([]string{"lbc", "run"}, args...), "--metrics", addr))
	}()
	var once sync.Once
	var err error
	r := &lbcRun{base: "http://" + addr, done: done, logs: &errw}
	r.stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("lbc run: %v\n%s", err, errw.String())
		}
	})
	return r
}

// waitStatus polls /v1/status until ok holds and returns that status; lbc
// run returning meanwhile fails the test.
func (r *lbcRun) waitStatus(t *testing.T, ok func(controller.Status) bool) controller.Status {
	t.Helper()
	var st controller.Status
	waitUntil(t, func() bool {
		select {
		case err := <-r.done:
			t.Fatalf("lbc run returned %v\n%s", err, r.logs.String())
		default:
		}
		resp, err := http.Get(r.base + controller.StatusPath)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		st = controller.Status{}
		return json.NewDecoder(resp.Body).Decode(&st) == nil && ok(st)
	}, r.logs)
	return st
}

// The metrics server and the controller stop together: a server that
// fails stops the controller with the reason; a controller that returns
// closes the server.
func TestRunServing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close() // Serve fails at once
	stopped := make(chan struct{})
	err = runServing(context.Background(), func(ctx context.Context) error {
		<-ctx.Done()
		close(stopped)
		return nil
	}, &http.Server{}, ln)
	if err == nil || !strings.Contains(err.Error(), "the metrics server stopped, so lbc run stops") {
		t.Fatalf("error %v", err)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("the controller was not stopped")
	}

	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler()}
	err = runServing(context.Background(), func(context.Context) error { return errors.New("config gone") }, srv, ln)
	if err == nil || err.Error() != "config gone" {
		t.Fatalf("error %v, want the controller's", err)
	}
	if _, err := http.Get("http://" + ln.Addr().String()); err == nil {
		t.Error("the server still answers after the controller returned")
	}
}

// TestRunExampleRunsEmbeddedExample: lbc run --example runs the embedded
// example (issue 36: without -c or --example it refuses, so that a
// forgotten -c never programs the demo's VIPs; TestArgumentsAreNeverIgnored);
// the example is no file, so nothing is watched. --log-format json writes
// one JSON object a line.
func TestRunExampleRunsEmbeddedExample(t *testing.T) {
	r := startRun(t, "--example", "--log-format", "json", "--watch-interval", "50ms", "--debounce", "10ms")
	st := r.waitStatus(t, func(st controller.Status) bool { return len(st.Services) > 0 })
	if st.Config != "examples/failover.yaml" || st.Services[0].Name != "web" || st.ReloadError != "" {
		t.Errorf("status: config %q, services %+v, reload error %q", st.Config, st.Services, st.ReloadError)
	}
	// Several watch ticks: no "cannot read the configuration file".
	time.Sleep(200 * time.Millisecond)
	if err := r.stop(); err != nil {
		t.Fatalf("lbc run: %v\n%s", err, r.logs.String())
	}
	logs := r.logs.String()
	for _, want := range []string{`"msg":"--example: running the embedded example`, `"config":"examples/failover.yaml"`, `"msg":"pushed"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	for i, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil || v["level"] == nil || v["msg"] == nil {
			t.Errorf("log line %d is no JSON object with level and msg: %v\n%s", i+1, err, line)
		}
	}
	for _, bad := range []string{"cannot read the configuration file", "configuration rejected"} {
		if strings.Contains(logs, bad) {
			t.Errorf("logs have %q:\n%s", bad, logs)
		}
	}
}

// TestRunMetricsExportICMPErrorMisses (issue 24, item 10): lbc run exports
// each service's ICMPErrorMisses (the P4 programs' counter
// service_icmp_error_misses) as lbc_datapath_icmp_error_misses_total, like
// the other per-service counters, where /metrics had no such series.
func TestRunMetricsExportICMPErrorMisses(t *testing.T) {
	srv := startP4RT(t)
	r := startRun(t, "-c", td+"seed001.yaml", "--target", "bmv2", "--addr", srv.Addr(), "--watch-interval", "0", "--counter-interval", "20ms")
	r.waitStatus(t, func(st controller.Status) bool { return st.Ready && len(st.Services) == 1 })
	// The switch counted 7 ICMP errors for service 1 (web) and 3 new
	// connections; the two are apart.
	if err := srv.SetCounter("service_icmp_error_misses", 1, 7, 560); err != nil {
		t.Fatal(err)
	}
	if err := srv.SetCounter("service_new_conns", 1, 3, 0); err != nil {
		t.Fatal(err)
	}
	// Scrapes serve the counters of the last read (every 20 ms here).
	inst := srv.Addr()
	want7 := `lbc_datapath_icmp_error_misses_total{service="web",target="bmv2",target_instance="` + inst + `"} 7`
	want3 := `lbc_datapath_new_connections_total{service="web",target="bmv2",target_instance="` + inst + `"} 3`
	var m string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); { // a read may fall between the two SetCounters
		if _, m = getBody(t, r.base+"/metrics"); strings.Contains(m, want7) && strings.Contains(m, want3) {
			break
		}
	}
	for _, want := range []string{
		"# TYPE lbc_datapath_icmp_error_misses_total counter",
		want7,
		want3,
		`lbc_datapath_counters_up{target="bmv2",target_instance="` + inst + `"} 1`,
		`lbc_datapath_counters_age_seconds{target="bmv2",target_instance="` + inst + `"}`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(m, "lbc_datapath_"))
		}
	}
}

// startP4RT serves the in-process P4Runtime server (device 1, no
// pipeline) on a free loopback port until the test ends.
func startP4RT(t *testing.T) *p4rt.Server {
	t.Helper()
	srv, err := p4rt.New(p4rt.Options{DeviceID: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestRunRetryIntervalMustBePositive: a retry interval of 0 or less would
// retry a failed push in a busy loop (or never); lbc run refuses it at
// once, naming the flag.
func TestRunRetryIntervalMustBePositive(t *testing.T) {
	for _, v := range []string{"0", "-1s"} {
		_, _, err := runLBC(t, "run", "--retry-interval", v)
		if err == nil || !strings.Contains(err.Error(), "--retry-interval") || !strings.Contains(err.Error(), "positive") {
			t.Errorf("lbc run --retry-interval %s: %v, want an error naming the flag", v, err)
		}
	}
}
