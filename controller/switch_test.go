package controller_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/controller/internal/backendtest"
	"github.com/lbc-dev/lbc/controller/internal/fakeclock"
	"github.com/lbc-dev/lbc/p4"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/testbench/p4rt"
)

// Issue 25, items 1–3: the switch restarts empty, dies, hangs or is cut
// off, and comes back. The controller runs on a fake clock that never
// moves, so its periodic retry and verify never fire: everything it does
// here is driven by the P4Runtime session's own signals.

// watchAnnouncer records what the controller announces and signals every
// announcement, so a test waits for a state instead of polling.
type watchAnnouncer struct {
	mu      sync.Mutex
	last    []controller.VIPState
	changed chan struct{} // closed and replaced at every Announce
}

func newWatchAnnouncer() *watchAnnouncer { return &watchAnnouncer{changed: make(chan struct{})} }

func (a *watchAnnouncer) Announce(vips []controller.VIPState) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.last = vips
	close(a.changed)
	a.changed = make(chan struct{})
}

func (a *watchAnnouncer) AnnounceStatus() controller.AnnounceStatus {
	return controller.AnnounceStatus{Protocol: "test", Healthy: true}
}

// serving reports whether every VIP is announced, and why not.
func (a *watchAnnouncer) serving() (bool, string, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.last) == 0 {
		return false, "nothing announced yet", a.changed
	}
	for _, v := range a.last {
		if !v.Serve {
			return false, v.Why, a.changed
		}
	}
	return true, "", a.changed
}

// waitServing waits (at most the test's budget) until the announcement
// says want, and returns why the VIPs are not served when want is false.
func (a *watchAnnouncer) waitServing(t testing.TB, want bool, logs *syncBuffer) string {
	t.Helper()
	deadline := time.After(budgetTB(t))
	for {
		ok, why, ch := a.serving()
		if ok == want {
			return why
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("VIPs served=%v, want %v (%s)\n%s", ok, want, why, logs)
		}
	}
}

// budgetTB is waitBudget for tests and benchmarks (which have no deadline).
func budgetTB(tb testing.TB) time.Duration {
	if t, ok := tb.(*testing.T); ok {
		return waitBudget(t)
	}
	return 10 * time.Minute
}

func healthz(c *controller.Controller) (int, string) {
	rec := httptest.NewRecorder()
	c.HealthzHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	return rec.Code, rec.Body.String()
}

// embeddedSwitchOptions opens a switch as lbc run --target bmv2 does
// without --p4info: the embedded p4/build pipeline, pushed when absent.
func embeddedSwitchOptions(addr string) bmv2.Options {
	return bmv2.Options{Options: runtime.Options{Addr: addr, DeviceID: 1, ElectionLow: 1,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		P4Info: p4.BMv2P4Info, DeviceConfig: p4.BMv2JSON, PipelineIfAbsent: true, Name: "switch"}
}

type switchRig struct {
	c    *controller.Controller
	m    *controller.Metrics
	tg   *bmv2.Target
	ann  *watchAnnouncer
	logs *syncBuffer
	ctx  context.Context
	cfg  string
	stop func() // ends the controller and closes its connection; idempotent
}

// startSwitchRig runs a controller over the switch at addr (opened with
// opts) on a fake clock that never moves; cfg is lb.yaml's content.
func startSwitchRig(t testing.TB, opts bmv2.Options, cfg string) *switchRig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	octx, ocancel := context.WithTimeout(ctx, budgetTB(t))
	defer ocancel()
	tg, err := bmv2.OpenShared(octx, opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "lb.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &switchRig{tg: tg, m: controller.NewMetrics(), ann: newWatchAnnouncer(), logs: &syncBuffer{}, ctx: ctx, cfg: path}
	c, err := controller.New(controller.Options{
		ConfigPath: path, Targets: []targets.Target{tg}, Announcer: r.ann, Metrics: r.m,
		Logger: slog.New(slog.NewTextHandler(r.logs, nil)),
		Clock:  fakeclock.New(time.Unix(1_800_000_000, 0)), Debounce: time.Hour, WatchInterval: -1, VerifyInterval: -1,
		RetryInterval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			<-done
			tg.Close()
		})
	}
	t.Cleanup(r.stop)
	select {
	case <-c.Ready():
	case err := <-done:
		done <- err // for r.stop, which the cleanup runs
		t.Fatalf("controller: %v\n%s", err, r.logs)
	case <-time.After(budgetTB(t)):
		t.Fatalf("controller not ready\n%s", r.logs)
	}
	return r
}

// held reads the switch back through the controller's own connection.
func (r *switchRig) held(t *testing.T) *compiler.IR {
	t.Helper()
	ir, err := r.tg.Read(r.ctx)
	if err != nil {
		t.Fatalf("read the switch back: %v\n%s", err, r.logs)
	}
	return ir
}

// wants checks that the switch holds what the controller compiled: the
// digest of the tables in force, web's ring whole in the half its row
// points at, and no slot in the other (one half at rest, issue 35).
func (r *switchRig) wants(t *testing.T, ir *compiler.IR) {
	t.Helper()
	st := r.c.Status(r.ctx)
	if len(st.Targets) != 1 || st.Targets[0].Digest != controller.Digest(ir) || st.Targets[0].LastError != "" {
		t.Fatalf("switch holds digest %s; controller: %+v\n%s", controller.Digest(ir), st.Targets, r.logs)
	}
	svc := ir.ServiceByName("web")
	if svc == nil {
		t.Fatalf("switch holds no service web\n%s", r.logs)
	}
	slots := 0
	for _, be := range ir.ActiveRing(svc) {
		if be != 0 {
			slots++
		}
	}
	if slots != int(svc.RingSize) {
		t.Fatalf("switch holds %d ring slots of web in the half its row points at (%d), want all %d\n%s", slots, svc.ActiveHalf, svc.RingSize, r.logs)
	}
	oneHalfAtRest(t, ir, r.logs)
}

func healthyRig(t testing.TB, opts bmv2.Options) (*switchRig, *backendtest.Fleet) {
	return healthyRigRing(t, opts, 1021)
}

// healthyRigRing is healthyRig with web's ring of ring slots.
func healthyRigRing(t testing.TB, opts bmv2.Options, ring int) (*switchRig, *backendtest.Fleet) {
	f := backendtest.Start(t, allSeedIPs()...)
	cfg := strings.Replace(patientProbes(seedConfig(f.Port, true, 0, 1, 1)), "ringSize: 1021", fmt.Sprintf("ringSize: %d", ring), 1)
	r := startSwitchRig(t, opts, cfg)
	r.ann.waitServing(t, true, r.logs)
	if code, body := healthz(r.c); code != http.StatusOK {
		t.Fatalf("healthz after the first push: %d %s\n%s", code, body, r.logs)
	}
	return r, f
}

// TestSwitchRestartPushesEverythingAgain (issue 25, item 1): the switch
// dies and comes back empty on the same address, as BMv2 after kill -9 and
// a restart. The controller sees the loss at once (healthz 503, VIPs
// withdrawn), and when the switch is back pushes the (embedded) pipeline
// and every table again by itself: healthz 200, VIPs served, and the
// switch holds what the compiler wants. Before, it read back "no
// forwarding pipeline config" forever, and claimed to serve meanwhile.
func TestSwitchRestartPushesEverythingAgain(t *testing.T) {
	srv := p4rt.StartEmpty(t, "127.0.0.1:0")
	addr := srv.Addr()
	r, _ := healthyRig(t, embeddedSwitchOptions(addr))
	before := r.held(t)
	r.wants(t, before)

	start := time.Now()
	srv.Stop() // the switch dies: its connections close
	why := r.ann.waitServing(t, false, r.logs)
	t.Logf("switch gone → VIPs withdrawn in %v (%s)", time.Since(start), why)
	if code, body := healthz(r.c); code != http.StatusServiceUnavailable || !strings.Contains(body, "not programmed: switch: no session with the switch") {
		t.Fatalf("healthz with the switch gone: %d %q", code, body)
	}

	srv2 := p4rt.StartEmpty(t, addr) // back, with no pipeline and no tables
	start = time.Now()
	r.ann.waitServing(t, true, r.logs)
	t.Logf("switch accepting connections → VIPs served again in %v", time.Since(start))
	if code, body := healthz(r.c); code != http.StatusOK {
		t.Fatalf("healthz after the switch came back: %d %q\n%s", code, body, r.logs)
	}
	if srv2.WriteRPCs() == 0 {
		t.Fatal("nothing was written to the restarted switch")
	}
	after := r.held(t)
	r.wants(t, after)
	if d := compiler.DiffIR(before, after); !d.Empty() {
		t.Fatalf("the restarted switch differs from before: %s", d.Summary())
	}
	if !strings.Contains(r.logs.String(), "had lost lbc's program") {
		t.Errorf("no log of the pipeline pushed again:\n%s", r.logs)
	}
}

// TestSwitchRestartWithoutPipelineToPush: a controller that adopted the
// switch's own pipeline (opened without pipeline files on a switch that
// ran one) cannot push it again after a restart; it stays unhealthy and
// says which files to give.
func TestSwitchRestartWithoutPipelineToPush(t *testing.T) {
	srv := startSwitch(t) // runs the pipeline already
	addr := srv.Addr()
	opts := embeddedSwitchOptions(addr)
	opts.P4Info, opts.DeviceConfig, opts.PipelineIfAbsent = nil, nil, false
	opts.PipelineHint = "--p4info FILE --device-config FILE"
	r, _ := healthyRig(t, opts)
	srv.Stop()
	r.ann.waitServing(t, false, r.logs)
	p4rt.StartEmpty(t, addr)
	deadline := time.After(waitBudget(t))
	for {
		_, why, ch := r.ann.serving()
		if strings.Contains(why, "no pipeline to push again") {
			if !strings.Contains(why, "restart lbc with --p4info FILE --device-config FILE") {
				t.Fatalf("the reason does not say what to give: %s", why)
			}
			break
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("never said it cannot push the pipeline: %s\n%s", why, r.logs)
		}
	}
	if code, body := healthz(r.c); code != http.StatusServiceUnavailable || !strings.Contains(body, "--p4info FILE --device-config FILE") {
		t.Fatalf("healthz: %d %q", code, body)
	}
	if n := strings.Count(r.logs.String(), "cannot be given it"); n != 1 {
		t.Errorf("logged the missing pipeline %d times, want once:\n%s", n, r.logs)
	}
}

// freezer is a TCP proxy that can stop passing bytes without closing
// anything, as a network partition or a hung switch does: no RST, no FIN,
// the peer's kernel still acknowledges nothing new.
type freezer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	frozen bool
	thawed chan struct{} // closed when frozen ends
	conns  []net.Conn
}

func startFreezer(t testing.TB, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: target, thawed: make(chan struct{})}
	close(f.thawed)
	go f.serve()
	t.Cleanup(f.close)
	return f
}

func (f *freezer) Addr() string { return f.ln.Addr().String() }

func (f *freezer) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		f.conns = append(f.conns, c, s)
		f.mu.Unlock()
		go f.pipe(c, s)
		go f.pipe(s, c)
	}
}

// pipe copies src to dst, holding each chunk while frozen.
func (f *freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			f.mu.Lock()
			thawed := f.thawed
			f.mu.Unlock()
			<-thawed
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.frozen {
		f.frozen, f.thawed = true, make(chan struct{})
	}
}

func (f *freezer) thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen {
		f.frozen = false
		close(f.thawed)
	}
}

func (f *freezer) close() {
	f.thaw()
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
}

// TestSwitchSilentLossDetectedAndStateKept (issue 25, items 2 and 3): the
// switch stops answering without closing the connection (a partition, a
// hung process). The heartbeat notices (healthz 503, VIPs withdrawn)
// although no periodic tick runs; when it answers again with its tables
// intact, the controller reads it back and writes nothing. A change made
// during the partition is written when it is back, and only that.
func TestSwitchSilentLossDetectedAndStateKept(t *testing.T) {
	srv := p4rt.StartEmpty(t, "127.0.0.1:0")
	fz := startFreezer(t, srv.Addr())
	r, f := healthyRig(t, embeddedSwitchOptions(fz.Addr()))
	before := r.held(t)
	rpcs, updates := srv.WriteRPCs(), len(srv.Log())

	// A partition with nothing changed: 0 writes after it.
	start := time.Now()
	fz.freeze()
	why := r.ann.waitServing(t, false, r.logs)
	t.Logf("switch silent → VIPs withdrawn in %v (bound %v): %s", time.Since(start), runtime.DefaultHeartbeat+runtime.DefaultHeartbeatTimeout, why)
	if code, body := healthz(r.c); code != http.StatusServiceUnavailable || !strings.Contains(body, "does not answer") {
		t.Fatalf("healthz while the switch is silent: %d %q", code, body)
	}
	r.c.ReadCounters(r.ctx) // the snapshot scrapes serve: the lost switch's counters are not tried
	metricsSay(t, r.m, `lbc_target_primary{target="switch",target_instance=""} 0`, `lbc_datapath_counters_up{target="switch",target_instance=""} 0`)
	fz.thaw()
	r.ann.waitServing(t, true, r.logs)
	if code, body := healthz(r.c); code != http.StatusOK {
		t.Fatalf("healthz after the partition: %d %q\n%s", code, body, r.logs)
	}
	if got, u := srv.WriteRPCs(), len(srv.Log()); got != rpcs || u != updates {
		t.Fatalf("after a partition with nothing changed: %d updates in %d Write RPCs, want 0\n%s", u-updates, got-rpcs, r.logs)
	}
	r.wants(t, r.held(t))
	// One loss, counted once, however many sessions the heartbeat dropped
	// during it.
	metricsSay(t, r.m, `lbc_errors_total{kind="connection"} 1`, `lbc_target_primary{target="switch",target_instance=""} 1`)

	// A backend fails during a partition: the push fails (the switch is
	// silent), and the difference is written when it is back.
	fz.freeze()
	r.ann.waitServing(t, false, r.logs)
	f.Get(seedIPs["vm-a1"]).SetStatus(503)
	r.c.Monitor().ProbeAll(r.ctx)
	if err := r.c.Sync(r.ctx); err == nil {
		t.Fatalf("a push to a silent switch worked\n%s", r.logs)
	}
	fz.thaw()
	r.ann.waitServing(t, true, r.logs)
	after := r.held(t)
	r.wants(t, after)
	if svc := after.ServiceByName("web"); svc == nil || strings.Contains(join(svc.Eligible), "vm-a1") {
		t.Fatalf("after the partition the switch holds %+v, want vm-a1 out of the eligible set", svc)
	}
	want := len(compiler.DiffIR(before, after).Changes)
	if got := len(srv.Log()) - updates; got != want {
		t.Fatalf("after the partition %d updates were written; the difference is %d\n%s", got, want, r.logs)
	}
	metricsSay(t, r.m, `lbc_errors_total{kind="connection"} 2`)
	if n := strings.Count(r.logs.String(), "lost the switch"); n != 2 {
		t.Errorf("logged the loss %d times over two partitions, want 2:\n%s", n, r.logs)
	}
}

// metricsSay checks that /metrics has each line.
func metricsSay(t *testing.T, m *controller.Metrics, lines ...string) {
	t.Helper()
	body := scrape(t, m)
	for _, l := range lines {
		if !strings.Contains(body, l+"\n") {
			t.Errorf("/metrics lacks %s:\n%s", l, grep(body, strings.SplitN(l, "{", 2)[0]))
		}
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// serveAgain starts srv again on addr after Stop, with the state it had:
// a switch whose P4Runtime service (or the way to it) was down while its
// tables kept forwarding.
func serveAgain(t *testing.T, srv *p4rt.Server, addr string) {
	t.Helper()
	if err := srv.StartAgain(addr); err != nil {
		t.Fatal(err)
	}
}

// TestSwitchBackWithItsTablesWritesOnlyTheDifference (issue 25, item 3):
// the switch's P4Runtime service stops (connections closed) and comes back
// with its state. The controller reads it back and writes nothing; a
// change made while it was away is written when it is back, and only that.
func TestSwitchBackWithItsTablesWritesOnlyTheDifference(t *testing.T) {
	srv := p4rt.StartEmpty(t, "127.0.0.1:0")
	addr := srv.Addr()
	r, f := healthyRig(t, embeddedSwitchOptions(addr))
	before := r.held(t)
	rpcs, updates := srv.WriteRPCs(), len(srv.Log())

	srv.Stop()
	r.ann.waitServing(t, false, r.logs)
	serveAgain(t, srv, addr)
	r.ann.waitServing(t, true, r.logs)
	if got, u := srv.WriteRPCs(), len(srv.Log()); got != rpcs || u != updates {
		t.Fatalf("back with its tables and nothing changed: %d updates in %d Write RPCs, want 0\n%s", u-updates, got-rpcs, r.logs)
	}
	r.wants(t, r.held(t))

	srv.Stop()
	r.ann.waitServing(t, false, r.logs)
	f.Get(seedIPs["vm-d1"]).SetStatus(503)
	r.c.Monitor().ProbeAll(r.ctx)
	if err := r.c.Sync(r.ctx); err == nil {
		t.Fatalf("a push to a stopped switch worked\n%s", r.logs)
	}
	serveAgain(t, srv, addr)
	r.ann.waitServing(t, true, r.logs)
	after := r.held(t)
	r.wants(t, after)
	if svc := after.ServiceByName("web"); svc == nil || strings.Contains(join(svc.Eligible), "vm-d1") {
		t.Fatalf("back: the switch holds %+v, want vm-d1 out of the eligible set", svc)
	}
	want := len(compiler.DiffIR(before, after).Changes)
	if got := len(srv.Log()) - updates; got != want || want == 0 {
		t.Fatalf("back: %d updates written; the difference is %d\n%s", got, want, r.logs)
	}
}

// TestSwitchRestartAfterControllerRestart: a controller that started on a
// switch already programmed (it wrote nothing, so it never set the
// defaults itself) gives a restarted switch its tunnel source too, not
// only the pipeline and the tables.
func TestSwitchRestartAfterControllerRestart(t *testing.T) {
	srv := p4rt.StartEmpty(t, "127.0.0.1:0")
	addr := srv.Addr()
	a, _ := healthyRig(t, embeddedSwitchOptions(addr))
	a.stop()
	rpcs := srv.WriteRPCs()
	b, _ := healthyRig(t, embeddedSwitchOptions(addr))
	if srv.WriteRPCs() != rpcs {
		t.Fatalf("the restarted controller wrote %d RPCs, want 0\n%s", srv.WriteRPCs()-rpcs, b.logs)
	}
	srv.Stop()
	b.ann.waitServing(t, false, b.logs)
	p4rt.StartEmpty(t, addr)
	b.ann.waitServing(t, true, b.logs)
	ir := b.held(t)
	b.wants(t, ir)
	if want := netip.MustParseAddr("192.0.2.1"); ir.TunnelSource4 != want {
		t.Fatalf("the restarted switch has tunnel source %v, want %v (the configuration's)\n%s", ir.TunnelSource4, want, b.logs)
	}
}

// TestSilentLossDuringVerify: the switch falls silent while the periodic
// verify is reading it back. The read hangs (the connection holds its
// bytes), but the heartbeat's verdict still reaches the loop within its
// bound: the session's end cuts the read short, and the VIPs are
// withdrawn. Before, the loop waited in the read until the connection
// closed (10 s in the testbench's block, when the path came back), with
// /healthz 200 and the VIPs announced meanwhile.
func TestSilentLossDuringVerify(t *testing.T) {
	srv := p4rt.StartEmpty(t, "127.0.0.1:0")
	fz := startFreezer(t, srv.Addr())
	r, _ := healthyRig(t, embeddedSwitchOptions(fz.Addr()))
	rpcs := srv.WriteRPCs()

	fz.freeze()
	verified := make(chan error, 1)
	go func() { verified <- r.c.Verify(r.ctx) }() // its read waits on the silent switch
	start := time.Now()
	r.ann.waitServing(t, false, r.logs)
	t.Logf("switch silent during a verify → VIPs withdrawn in %v (heartbeat bound %v)", time.Since(start), runtime.DefaultHeartbeat+runtime.DefaultHeartbeatTimeout)
	if code, body := healthz(r.c); code != http.StatusServiceUnavailable {
		t.Fatalf("healthz while the switch is silent: %d %q", code, body)
	}
	fz.thaw()
	r.ann.waitServing(t, true, r.logs)
	select {
	case <-verified:
	case <-time.After(budgetTB(t)):
		t.Fatalf("the verify never returned\n%s", r.logs)
	}
	if srv.WriteRPCs() != rpcs {
		t.Fatalf("the switch came back with its tables: %d Write RPCs, want 0\n%s", srv.WriteRPCs()-rpcs, r.logs)
	}
	if strings.Contains(r.logs.String(), "verify: cannot read target back") {
		t.Errorf("the cut read was logged as a failed read-back:\n%s", r.logs)
	}
}
