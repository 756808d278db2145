// Package soak runs `lbc run` for a long time under churn and checks that
// it does not grow: resident memory, goroutines and open files stay flat,
// and its log has no line the soak cannot explain (issue 25, item 7).
//
// The lbc run under test is the real binary, a process of its own, so its
// /proc entries measure it alone. Its datapath is the tests' P4Runtime
// server (testbench/p4rt), served by the soak on loopback: real gRPC, the
// client's stream, heartbeat, arbitration, writes and read-backs, with no
// switch or privilege needed. Its backends are HTTP servers of the soak on
// 127.0.0.x whose health answers flap; its configuration file is rewritten
// every reload period; /metrics, /v1/status and /healthz are scraped
// several times a second (every /metrics scrape reads the switch's
// counters over P4Runtime).
package soak

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lbc-dev/lbc/testbench/p4rt"
)

// Options of a soak.
type Options struct {
	Duration    time.Duration // of lbc run, from its start
	Out         string        // report directory
	LBC         string        // lbc binary; "" builds ./cmd/lbc into Out
	FlapEvery   time.Duration // a flapping backend switches its health answer
	ReloadEvery time.Duration // the configuration file is rewritten
	SampleEvery time.Duration // RSS, goroutines, open files
	ScrapeEvery time.Duration // /metrics, /v1/status, /healthz each
	Progress    io.Writer     // a line per minute and the summary; nil: none
}

// Defaults for the zero fields of Options.
const (
	DefaultDuration    = 30 * time.Minute
	DefaultFlapEvery   = 3 * time.Second
	DefaultReloadEvery = 30 * time.Second
	DefaultSampleEvery = time.Second
	DefaultScrapeEvery = 250 * time.Millisecond
)

// The soak's service: five backends on 127.0.0.11–15, all on one port (the
// health check's). vm-1 and vm-2 flap in turn; vm-5 is added and removed by
// the reloads (draining 5 s when removed); vm-3 and vm-4 stay healthy, so
// the service never fails over and never drops.
var (
	backendNames = []string{"vm-1", "vm-2", "vm-3", "vm-4", "vm-5"}
	flapping     = []string{"vm-1", "vm-2"}
	reloaded     = "vm-5"
)

const backendIPBase = 11 // 127.0.0.11 …

// Result of a soak.
type Result struct {
	Options
	Target   string // what lbc run ran against
	Samples  []Sample
	Took     time.Duration // of lbc run, start to stop
	Verdicts []Verdict
	// HeapGoal is the Go heap goal's series, summarised as a verdict but
	// not judged (Sample.HeapGoal).
	HeapGoal    Verdict
	Log         LogReport
	Flaps       int
	Reloads     int // files written
	ReloadsDue  int // of them, written early enough to be applied before the end
	Scrapes     map[string]int
	ScrapeFails map[string]int
	Metrics     map[string]float64 // lbc's counters at the end
	CPU         float64            // lbc run's user + system seconds, at the last sample
	ExitErr     string             // lbc run's exit, if not clean
	Failures    []string           // every check that failed
}

// OK reports whether every check held.
func (r *Result) OK() bool { return len(r.Failures) == 0 }

// Run runs one soak and writes its report into opts.Out. The error is for
// a soak that could not run; a soak that ran and found growth returns a
// Result whose OK is false.
func Run(ctx context.Context, opts Options) (*Result, error) {
	if opts.Duration <= 0 {
		opts.Duration = DefaultDuration
	}
	if opts.FlapEvery <= 0 {
		opts.FlapEvery = DefaultFlapEvery
	}
	if opts.ReloadEvery <= 0 {
		opts.ReloadEvery = DefaultReloadEvery
	}
	if opts.SampleEvery <= 0 {
		opts.SampleEvery = DefaultSampleEvery
	}
	if opts.ScrapeEvery <= 0 {
		opts.ScrapeEvery = DefaultScrapeEvery
	}
	if opts.Out == "" {
		opts.Out = "soak-out"
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, fmt.Errorf("report directory: %w", err)
	}
	res := &Result{Options: opts, Scrapes: map[string]int{}, ScrapeFails: map[string]int{}, Metrics: map[string]float64{}}

	lbc := opts.LBC
	if lbc == "" {
		var err error
		if lbc, err = buildLBC(ctx, opts.Out, opts.Progress); err != nil {
			return nil, err
		}
	}

	// The switch: the P4Runtime server, empty, as a switch just started;
	// lbc run pushes its embedded pipeline.
	srv, err := p4rt.New(p4rt.Options{DeviceID: 1})
	if err != nil {
		return nil, fmt.Errorf("P4Runtime server: %w", err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("P4Runtime server: %w", err)
	}
	defer srv.Stop()
	res.Target = "bmv2 at " + srv.Addr() + " (the in-process P4Runtime server, testbench/p4rt)"

	bs, port, err := startBackends()
	if err != nil {
		return nil, err
	}
	defer bs.close()

	metricsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(opts.Out, "lb.yaml")
	withReloaded := false
	if err := writeConfig(cfg, port, withReloaded); err != nil {
		return nil, err
	}
	logPath := filepath.Join(opts.Out, "lbc-run.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("lbc run's log: %w", err)
	}
	defer logf.Close()
	args := []string{"run", "-c", cfg, "--target", "bmv2", "--addr", srv.Addr(), "--metrics", metricsAddr, "--log-level", "info"}
	fmt.Fprintf(opts.Progress, "soak: %s %s (log: %s)\n", lbc, strings.Join(args, " "), logPath)
	cmd := exec.Command(lbc, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// lbc run dies with the soak, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting lbc run (%s): %w", lbc, err)
	}
	start := time.Now()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	client := &http.Client{Timeout: 5 * time.Second}
	base := "http://" + metricsAddr
	if err := waitHealthy(ctx, client, base, exited, 2*time.Minute); err != nil {
		return nil, fmt.Errorf("%w (lbc run's log: %s)", err, logPath)
	}
	fmt.Fprintf(opts.Progress, "soak: lbc run (pid %d) serving after %.1f s; soaking for %s\n", cmd.Process.Pid, time.Since(start).Seconds(), opts.Duration)

	runCtx, cancel := context.WithDeadline(ctx, start.Add(opts.Duration))
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	every := func(d time.Duration, f func(now time.Time)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(d)
			defer t.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case now := <-t.C:
					f(now)
				}
			}
		}()
	}
	pid := cmd.Process.Pid
	var sampleErr atomic.Value
	sample := func(now time.Time) {
		s := Sample{T: now.Sub(start)}
		var err error
		if s.RSS, err = rss(pid); err == nil {
			if s.FDs, err = openFiles(pid); err == nil {
				var text string
				if text, err = get(client, base+"/metrics"); err == nil {
					s.Goroutines, err = metric(text, "go_goroutines", nil)
					if err == nil {
						s.HeapGoal, err = metric(text, "go_memstats_next_gc_bytes", nil)
					}
				}
			}
		}
		if err != nil {
			if runCtx.Err() == nil {
				sampleErr.Store(err.Error())
			}
			return
		}
		cpu, cerr := cpuSeconds(pid)
		mu.Lock()
		res.Samples = append(res.Samples, s)
		if cerr == nil {
			res.CPU = cpu
		}
		mu.Unlock()
	}
	sample(time.Now())
	every(opts.SampleEvery, sample)
	for _, path := range []string{"/metrics", "/v1/status", "/healthz"} {
		every(opts.ScrapeEvery, func(time.Time) {
			_, err := get(client, base+path)
			mu.Lock()
			defer mu.Unlock()
			res.Scrapes[path]++
			if err != nil && runCtx.Err() == nil {
				res.ScrapeFails[path]++
			}
		})
	}
	every(opts.FlapEvery, func(time.Time) {
		mu.Lock()
		n := res.Flaps
		res.Flaps++
		mu.Unlock()
		bs.toggle(flapping[n%len(flapping)])
	})
	every(opts.ReloadEvery, func(now time.Time) {
		withReloaded = !withReloaded
		if err := writeConfig(cfg, port, withReloaded); err != nil {
			sampleErr.Store(err.Error())
			return
		}
		mu.Lock()
		res.Reloads++
		// The watcher looks every 2 s: a file written later than 5 s
		// before the end may not be applied yet.
		if start.Add(opts.Duration).Sub(now) >= 5*time.Second {
			res.ReloadsDue++
		}
		mu.Unlock()
	})
	every(time.Minute, func(now time.Time) {
		mu.Lock()
		n := len(res.Samples)
		var last Sample
		if n > 0 {
			last = res.Samples[n-1]
		}
		mu.Unlock()
		fmt.Fprintf(opts.Progress, "soak: %4.0f s: RSS %s, %0.f goroutines, %0.f open files\n", now.Sub(start).Seconds(), Format(last.RSS, "MiB"), last.Goroutines, last.FDs)
	})
	var early error
	select {
	case <-runCtx.Done():
	case err := <-exited:
		stopped = true
		early = fmt.Errorf("lbc run exited during the soak (%v); its log: %s", err, logPath)
	}
	cancel()
	wg.Wait()
	res.Took = time.Since(start)
	if early == nil && ctx.Err() != nil {
		early = fmt.Errorf("soak interrupted after %.0f s", res.Took.Seconds())
	}

	if early == nil {
		if text, err := get(client, base+"/metrics"); err == nil {
			for key, q := range finalMetrics {
				res.Metrics[key], _ = metric(text, q.name, q.labels)
			}
		} else {
			res.Failures = append(res.Failures, fmt.Sprintf("the last /metrics scrape failed: %v", err))
		}
		// SIGTERM: lbc run stops; it must exit 0 within 10 s.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			stopped = true
			if err != nil {
				res.ExitErr = fmt.Sprintf("lbc run exited with %v after SIGTERM", err)
			}
		case <-time.After(10 * time.Second):
			res.ExitErr = "lbc run did not exit within 10 s of SIGTERM (killed)"
		}
	}
	logf.Close()
	if err := analyse(res, logPath, &sampleErr); err != nil {
		return res, err
	}
	if early != nil {
		res.Failures = append([]string{early.Error()}, res.Failures...)
	}
	if err := writeReport(res); err != nil {
		return res, err
	}
	return res, nil
}

// finalMetrics are read from lbc run's last scrape.
var finalMetrics = map[string]struct {
	name   string
	labels map[string]string
}{
	"reloads applied":  {"lbc_config_reloads_total", map[string]string{"result": "applied"}},
	"reloads rejected": {"lbc_config_reloads_total", map[string]string{"result": "rejected"}},
	"pushes ok":        {"lbc_pushes_total", map[string]string{"result": "ok"}},
	"pushes failed":    {"lbc_pushes_total", map[string]string{"result": "error"}},
	"probes ok":        {"lbc_health_probes_total", map[string]string{"result": "ok"}},
	"probes failed":    {"lbc_health_probes_total", map[string]string{"result": "failed"}},
	"entities written": {"lbc_push_entities_total", nil},
	"errors":           {"lbc_errors_total", nil},
}

// analyse decides: flatness of the three series, the log, and the
// counters that show the churn happened.
func analyse(res *Result, logPath string, sampleErr *atomic.Value) error {
	var ts []time.Duration
	var rssV, gV, fdV, hgV []float64
	for _, s := range res.Samples {
		ts = append(ts, s.T)
		rssV, gV, fdV, hgV = append(rssV, s.RSS), append(gV, s.Goroutines), append(fdV, s.FDs), append(hgV, s.HeapGoal)
	}
	total := res.Took
	res.Verdicts = []Verdict{
		Flat("RSS", "MiB", ts, rssV, total, RSSTolerance),
		Flat("goroutines", "", ts, gV, total, GoroutinesTolerance),
		Flat("open files", "", ts, fdV, total, FDsTolerance),
	}
	res.HeapGoal = Flat("heap goal", "MiB", ts, hgV, total, RSSTolerance)
	for _, v := range res.Verdicts {
		if !v.OK {
			res.Failures = append(res.Failures, fmt.Sprintf("%s: %s", v.Name, v.Why))
		}
	}
	if e, ok := sampleErr.Load().(string); ok {
		res.Failures = append(res.Failures, "sampling or reloading failed (at least once): "+e)
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		return fmt.Errorf("reading lbc run's log: %w", err)
	}
	res.Log = ClassifyLog(strings.Split(string(data), "\n"), ExpectedLog(flapping))
	for _, l := range res.Log.Unexpected {
		res.Failures = append(res.Failures, fmt.Sprintf("unexpected log line %d: %s", l.N, l.Text))
	}
	if res.ExitErr != "" {
		res.Failures = append(res.Failures, res.ExitErr)
	}
	if len(res.Metrics) > 0 {
		m := res.Metrics
		if int(m["reloads applied"]) < res.ReloadsDue {
			res.Failures = append(res.Failures, fmt.Sprintf("lbc applied %.0f reloads, the soak wrote %d in time to be applied", m["reloads applied"], res.ReloadsDue))
		}
		for _, k := range []string{"reloads rejected", "pushes failed", "errors"} {
			if m[k] != 0 {
				res.Failures = append(res.Failures, fmt.Sprintf("%s: %.0f, want 0", k, m[k]))
			}
		}
		if res.Flaps >= 4 && m["probes failed"] == 0 {
			res.Failures = append(res.Failures, "no probe failed: the flapping backends were not probed (the soak's churn did not happen)")
		}
	}
	for path, n := range res.ScrapeFails {
		res.Failures = append(res.Failures, fmt.Sprintf("%d of %d scrapes of %s failed", n, res.Scrapes[path], path))
	}
	return nil
}

// buildLBC builds ./cmd/lbc of the module the working directory is in.
func buildLBC(ctx context.Context, out string, progress io.Writer) (string, error) {
	abs, err := filepath.Abs(filepath.Join(out, "lbc"))
	if err != nil {
		return "", err
	}
	fmt.Fprintf(progress, "soak: building %s (go build ./cmd/lbc)\n", abs)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", abs, "./cmd/lbc")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/lbc: %v: %s (run the soak from lbc's source tree, or pass --lbc PATH to a built lbc)", err, strings.TrimSpace(string(b)))
	}
	return abs, nil
}

func waitHealthy(ctx context.Context, client *http.Client, base string, exited <-chan error, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("lbc run exited at start: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if _, err := get(client, base+"/healthz"); err == nil {
			return nil
		}
	}
	return fmt.Errorf("lbc run's /healthz did not answer 200 within %s of its start", limit)
}

// get fetches url; a status other than 200 is an error.
func get(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// metric sums the samples of name whose labels include every pair of
// labels, in Prometheus' text format.
func metric(text, name string, labels map[string]string) (float64, error) {
	sum, found := 0.0, false
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name) || len(line) == len(name) || (line[len(name)] != ' ' && line[len(name)] != '{') {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		lbl := line[len(name):sp]
		ok := true
		for k, v := range labels {
			ok = ok && strings.Contains(lbl, k+"=\""+v+"\"")
		}
		if !ok {
			continue
		}
		x, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %q: %w", name, line, err)
		}
		sum, found = sum+x, true
	}
	if !found && labels == nil {
		return 0, fmt.Errorf("metric %s not in lbc run's /metrics", name)
	}
	return sum, nil
}

// rss reads VmRSS of pid, in bytes.
func rss(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: VmRSS %q: %w", pid, rest, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS line", pid)
}

// cpuSeconds reads utime + stime of pid (/proc/PID/stat, fields 14 and
// 15, in clock ticks of 1/100 s, USER_HZ on Linux).
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:])) // field 3 onwards
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return (u + st) / 100, nil
}

// openFiles counts the entries of /proc/PID/fd.
func openFiles(pid int) (float64, error) {
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	return float64(len(es)), nil
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port on 127.0.0.1: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// backends are the soak's HTTP health endpoints.
type backends struct {
	srvs    []*http.Server
	healthy map[string]*atomic.Bool
}

func (b *backends) toggle(name string) {
	h := b.healthy[name]
	h.Store(!h.Load())
}

func (b *backends) close() {
	for _, s := range b.srvs {
		_ = s.Close()
	}
}

// startBackends listens on 127.0.0.11–15 on one port (the first's, chosen
// by the kernel; tried again if another address has it taken).
func startBackends() (*backends, int, error) {
	var lastErr error
	for try := 0; try < 20; try++ {
		b := &backends{healthy: map[string]*atomic.Bool{}}
		var ls []net.Listener
		port := 0
		for i := range backendNames {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:%d", backendIPBase+i, port))
			if err != nil {
				lastErr = err
				break
			}
			port = l.Addr().(*net.TCPAddr).Port
			ls = append(ls, l)
		}
		if len(ls) < len(backendNames) {
			for _, l := range ls {
				l.Close()
			}
			continue
		}
		for i, name := range backendNames {
			h := &atomic.Bool{}
			h.Store(true)
			b.healthy[name] = h
			s := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !h.Load() {
					http.Error(w, name+" says unhealthy (soak flap)", http.StatusServiceUnavailable)
					return
				}
				fmt.Fprintln(w, name, "ok")
			})}
			b.srvs = append(b.srvs, s)
			go func() {
				if err := s.Serve(ls[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
					fmt.Fprintf(os.Stderr, "soak: backend %s: %v\n", name, err)
				}
			}()
		}
		return b, port, nil
	}
	return nil, 0, fmt.Errorf("listening on 127.0.0.%d–%d on one port: %v", backendIPBase, backendIPBase+len(backendNames)-1, lastErr)
}

// writeConfig writes the soak's configuration to path, atomically (a
// temporary file renamed), so lbc's watcher never reads half of it.
func writeConfig(path string, port int, withReloaded bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, `# lbc soak (testbench/soak): rewritten every reload period; %s comes and goes.
tunnel: {sourceIPv4: 192.0.2.1}
services:
  - name: web
    vip: 203.0.113.10
    protocol: TCP
    ports: [80, 443]
    ringSize: 1021
    connectionDraining: {drainingTimeoutSec: 5}
    healthCheck:
      type: HTTP
      port: %d
      requestPath: /healthz
      checkIntervalSec: 1
      timeoutSec: 1
      healthyThreshold: 1
      unhealthyThreshold: 1
    backends:
      - name: ig-a
        endpoints:
`, reloaded, port)
	for i, n := range backendNames {
		if n == reloaded && !withReloaded {
			continue
		}
		fmt.Fprintf(&b, "          - {name: %s, ip: 127.0.0.%d}\n", n, backendIPBase+i)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing the soak's configuration: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing the soak's configuration: %w", err)
	}
	return nil
}
