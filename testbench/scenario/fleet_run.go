package scenario

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
)

// FleetResult is what a fleet run observed.
type FleetResult struct {
	Scenario string              `json:"scenario"`
	Nodes    []string            `json:"nodes"`
	Took     time.Duration       `json:"took"`
	Conns    int                 `json:"connections"`
	Events   []*FleetEventResult `json:"events"`
	Samples  []FleetSample       `json:"samples"`
	Failures []Failure           `json:"failures"`
	Files    []string            `json:"files"`
	// Attempt is this run's number (1 unless an earlier run of the
	// scenario was not judged because the machine was too slow); Earlier
	// says why each earlier one was not.
	Attempt int      `json:"attempt"`
	Earlier []string `json:"earlier,omitempty"`
	// StallLimit is the longest stall of the machine the scenario's
	// timers tolerate (the health check's timeout, the BGP hold time less
	// a keepalive interval, whichever is shorter); StallWhy names it.
	StallLimit time.Duration `json:"stallLimit"`
	StallWhy   string        `json:"stallWhy"`
}

// FleetEventResult is one event's measurements and checks.
type FleetEventResult struct {
	Name   string        `json:"name"`
	Action string        `json:"action"`
	Start  time.Duration `json:"start"`
	At     time.Duration `json:"at"` // the action
	End    time.Duration `json:"end"`
	// Effect is the time from the action to the router's table (kill,
	// stop, start) or to every node's digest agreeing (fail, recover); -1:
	// never seen.
	Effect     time.Duration `json:"effect"`
	EffectWhat string        `json:"effectWhat,omitempty"`
	Digest     string        `json:"digest,omitempty"`
	Broken     int           `json:"broken"`
	// BrokenBy counts broken connections by their backend.
	BrokenBy map[string]int `json:"brokenBy,omitempty"`
	// AtRisk counts the held connections that a ring in force during the
	// event maps to another backend than theirs (-1: no ring model); they
	// may break when they move to a node without their conntrack entry.
	AtRisk    int            `json:"atRisk"`
	AtRiskBy  map[string]int `json:"atRiskBy,omitempty"`
	Rings     []string       `json:"rings,omitempty"`
	Moved     int            `json:"moved"`
	MaxStall  time.Duration  `json:"maxStall"`
	Carriers  map[string]int `json:"carriers"` // at the end
	NewOK     int            `json:"newOK"`
	NewFailed int            `json:"newFailed"`
	Checks    []Check        `json:"checks"`
	Plot      string         `json:"plot,omitempty"`
	// Sched is the scheduling delay the load probe measured over the
	// event; EffectSched over the span from the action to its effect,
	// by which the effect's bound is widened.
	Sched       SchedDelay `json:"sched"`
	EffectSched SchedDelay `json:"effectSched"`
	// Window is the sync window an event with killAfterChange measured;
	// SyncWindows, in another fail or recover, each node's from its
	// ring change to its exceptions installed on every peer.
	Window      *SyncWindow              `json:"window,omitempty"`
	SyncWindows map[string]time.Duration `json:"syncWindows,omitempty"`
	// TooSlow is set when the machine stalled longer than the scenario's
	// timers tolerate during the event: its failed checks then judge the
	// machine, not lbc, and the run is retried.
	TooSlow string `json:"tooSlow,omitempty"`
}

// FleetSample is the state at one moment: the router's next hops and the
// node that carried each connection in the last interval ("" stalled,
// "broken").
type FleetSample struct {
	T       time.Duration `json:"t"`
	Hops    []string      `json:"hops"`
	Carrier []string      `json:"carrier"`
	// Digests are the running nodes' ring digests (by node).
	Digests map[string]string `json:"digests,omitempty"`
}

type fleetRunner struct {
	sc    *Scenario
	fl    *Fleet
	opts  Options
	env   *fleetEnv
	out   string
	start time.Time

	backends map[string]*backend
	conns    []*fleetConn
	// lb is the nodes' lb.yaml (with a tunnel source): the ring model
	// compiles it. unhealthy is the backends failed by events.
	lb        []byte
	unhealthy map[string]bool

	mu       sync.Mutex
	samples  []FleetSample
	newFlows []Flow

	probe      *schedProbe
	stallLimit time.Duration
	stallWhy   string
	// startedAt and stoppedAt: when the testbench last started, and last
	// killed or stopped, each node; logChecked: the router's log is read
	// up to here.
	startedAt, stoppedAt map[string]time.Time
	logChecked           time.Time
}

func (r *fleetRunner) since() time.Duration { return time.Since(r.start) }

func (r *fleetRunner) progress(format string, a ...any) {
	if r.opts.Progress != nil {
		fmt.Fprintf(r.opts.Progress, "[%6.1fs] %s\n", r.since().Seconds(), fmt.Sprintf(format, a...))
	}
}

// lbcBinary finds the lbc executable that fleet nodes and a controller:
// process scenario run: Options.LBC, then $LBC_BINARY, this executable
// when it is lbc, an lbc beside it, lbc on PATH.
func lbcBinary(opt string) (string, error) {
	if opt == "" {
		opt = os.Getenv("LBC_BINARY")
	}
	if opt != "" {
		return opt, nil
	}
	if exe, err := os.Executable(); err == nil {
		if filepath.Base(exe) == "lbc" {
			return exe, nil
		}
		if st, err := os.Stat(filepath.Join(filepath.Dir(exe), "lbc")); err == nil && !st.IsDir() {
			return filepath.Join(filepath.Dir(exe), "lbc"), nil
		}
	}
	if p, err := exec.LookPath("lbc"); err == nil {
		return p, nil
	}
	return "", errors.New("no lbc binary to run (fleet nodes, controller: process): go build -o lbc ./cmd/lbc, then put it on PATH, set LBC_BINARY=path/to/lbc or give lbc-testbench run --lbc")
}

// fleetAttempts bounds the runs of a fleet scenario: a run is repeated
// only when every check that failed failed in an event during which the
// machine stalled longer than the scenario's timers tolerate.
const fleetAttempts = 3

// runFleet runs a fleet scenario (Run dispatches here). A run whose only
// failures fall in events where the machine itself was too slow (a stall
// of the load probe beyond what the health check's timeout or the BGP
// hold time tolerates) judged the machine, not lbc: it is run again, at
// most fleetAttempts times in all, and the report says why.
func runFleet(ctx context.Context, sc *Scenario, opts Options) (*Result, error) {
	lbc, err := lbcBinary(opts.LBC)
	if err != nil {
		return nil, err
	}
	out := opts.OutDir
	if out == "" {
		d, err := os.MkdirTemp("", "lbc-fleet-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		out = d
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	var earlier []string
	for attempt := 1; ; attempt++ {
		res, fr, err := runFleetOnce(ctx, sc, opts, lbc, out, attempt, earlier)
		why := tooSlowOnly(fr)
		var ae *AssertionError
		if !errors.As(err, &ae) || why == "" || attempt == fleetAttempts || ctx.Err() != nil {
			return res, err
		}
		dir := filepath.Join(out, fmt.Sprintf("attempt-%d", attempt))
		if merr := keepAttempt(out, dir); merr != nil {
			return res, errors.Join(err, merr)
		}
		msg := fmt.Sprintf("attempt %d (report in %s) was not judged: the machine was too slow: %s", attempt, dir, why)
		earlier = append(earlier, msg)
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "fleet scenario %q: %s; running it again\n", sc.Name, msg)
		}
	}
}

// tooSlowOnly says why a run's failures judge the machine rather than
// lbc: every event with a failed check had the machine stall longer than
// the scenario's timers tolerate, or came after such an event (which
// leaves the fleet in a state the scenario did not set up: sessions
// expired, routes withdrawn, a backend marked down). "" if the run
// passed, or if a check failed before the machine first stalled so.
func tooSlowOnly(fr *FleetResult) string {
	if fr == nil || len(fr.Failures) == 0 {
		return ""
	}
	var whys []string
	stalled := 0 // the first event in which the machine stalled, from 1
	for i, er := range fr.Events {
		if er.TooSlow != "" {
			if stalled == 0 {
				stalled = i + 1
			}
			whys = append(whys, fmt.Sprintf("in event %d %q %s", i+1, er.Name, er.TooSlow))
		}
		failed := 0
		for _, c := range er.Checks {
			if !c.OK {
				failed++
			}
		}
		switch {
		case failed == 0:
		case stalled == 0:
			return ""
		case er.TooSlow == "":
			whys = append(whys, fmt.Sprintf("event %d %q: %d check(s) failed after the stall of event %d", i+1, er.Name, failed, stalled))
		default:
			whys[len(whys)-1] += fmt.Sprintf(" (%d check(s) failed)", failed)
		}
	}
	return strings.Join(whys, "; ")
}

// keepAttempt moves the files of a run not judged into dir.
func keepAttempt(out, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(out)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		if err := os.Rename(filepath.Join(out, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// runFleetOnce runs a fleet scenario once, into out.
func runFleetOnce(ctx context.Context, sc *Scenario, opts Options, lbc, out string, attempt int, earlier []string) (*Result, *FleetResult, error) {
	r := &fleetRunner{sc: sc, fl: sc.Fleet, opts: opts, backends: map[string]*backend{}, unhealthy: map[string]bool{}, start: time.Now(), out: out,
		startedAt: map[string]time.Time{}, stoppedAt: map[string]time.Time{}}
	r.probe = startSchedProbe(r.start)
	defer r.probe.Stop()
	names := sc.BackendNames()
	r.progress("fleet scenario %q (%s): %d nodes, %d backends, %d connections, %d events%s", sc.Name, sc.file, r.fl.Nodes, len(names), r.fl.Connections, len(r.fl.Events),
		map[bool]string{true: fmt.Sprintf(", attempt %d", attempt), false: ""}[attempt > 1])
	var err error
	if r.env, err = newFleetEnv(ctx, opts.Prefix, r.out, lbc, r.fl, len(names), sc.Clients); err != nil {
		return nil, nil, err
	}
	defer func() {
		if cerr := r.env.Close(); cerr != nil {
			r.progress("cleanup: %v", cerr)
		}
	}()
	fr, err := r.run(ctx, names)
	res := &Result{Scenario: sc.Name, File: sc.file, Topology: "netns-fleet", Backends: names, Started: r.start}
	res.NotJudged = earlier
	if fr != nil {
		fr.Attempt, fr.Earlier = attempt, earlier
		res.Took = fr.Took
		res.Failures = fr.Failures
		if werr := r.writeFleetReport(fr); werr != nil && err == nil {
			err = werr
		}
		res.Files = fr.Files
	}
	if err == nil && len(res.Failures) > 0 {
		err = &AssertionError{Failures: res.Failures}
	}
	return res, fr, err
}

// fleetConfig is lb.yaml for the nodes; the tunnel source is filled in
// per node.
func (r *fleetRunner) fleetConfig() ([]byte, error) {
	raw, err := yaml.Marshal(r.sc.Service)
	if err != nil {
		return nil, err
	}
	var svc map[string]any
	if err := yaml.Unmarshal(raw, &svc); err != nil {
		return nil, err
	}
	svc["vip"] = fleetVIP.String()
	if hc, ok := svc["healthCheck"].(map[string]any); ok {
		if _, ok := hc["port"]; !ok {
			hc["port"] = HealthPort
		}
	}
	idx := map[string]int{}
	for i, n := range r.sc.BackendNames() {
		idx[n] = i
	}
	groups, _ := svc["backends"].([]any)
	for _, g := range groups {
		gm, _ := g.(map[string]any)
		eps, _ := gm["endpoints"].([]any)
		for _, e := range eps {
			em, _ := e.(map[string]any)
			n, _ := em["name"].(string)
			h := r.env.hosts[idx[n]]
			em["ip"], em["mac"] = h.IP.String(), h.MAC
		}
	}
	doc := map[string]any{"tunnel": map[string]any{"sourceIPv4": "__TUNNEL_SOURCE__"}, "services": []any{svc}}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	check := strings.Replace(string(out), "__TUNNEL_SOURCE__", "10.99.0.2", 1)
	if _, err := compiler.Load("lb.yaml", []byte(check)); err != nil {
		return nil, fmt.Errorf("scenario %s: the service does not compile: %w", r.sc.file, err)
	}
	r.lb = []byte(check)
	return append([]byte("# Generated by the fleet testbench from "+r.sc.file+".\n"), out...), nil
}

// status reads a node's /v1/status.
func (r *fleetRunner) status(ctx context.Context, n *fleetNode) (*controller.Status, error) {
	return readStatus(ctx, n.ns, fleetMetrics)
}

// setStallLimit sets the longest stall of the machine the scenario's
// timers tolerate: a stall as long as the health check's timeout makes a
// check of a healthy backend fail, and one as long as the hold time less
// a keepalive interval lets a BGP session expire (keepalives every
// holdTime/3, at least 1 s, on both sides).
func (r *fleetRunner) setStallLimit() {
	hold := r.fl.HoldTime.D()
	keep := max(time.Second, hold/3)
	r.stallLimit, r.stallWhy = hold-keep, fmt.Sprintf("the BGP hold time %s less a keepalive interval %s", hold, keep)
	if d, err := compiler.Load("lb.yaml", r.lb); err == nil && len(d.Config.Services) > 0 {
		if hc := d.Config.Services[0].HealthCheck; hc != nil && hc.TimeoutSec > 0 {
			if t := time.Duration(hc.TimeoutSec) * time.Second; t < r.stallLimit {
				r.stallLimit, r.stallWhy = t, fmt.Sprintf("the health check's timeout %s", t)
			}
		}
	}
}

// routerSessionDowns lists the sessions the router (BIRD) saw go down
// after since, from its log: a hold timer that expired on either side, a
// NOTIFICATION received, a connection lost.
func (r *fleetRunner) routerSessionDowns(since time.Time) []sessionDown {
	data, err := os.ReadFile(filepath.Join(r.out, "bird.log"))
	if err != nil {
		return nil
	}
	return parseBirdDowns(string(data), since)
}

// sessionDown is one line of BIRD's log that ends a session.
type sessionDown struct {
	At   time.Time
	Node string
	Why  string
}

// parseBirdDowns reads BIRD's log lines of the form
// "2026-12-01 14:59:58.828 <RMT> n1: Error: Hold timer expired" (and
// "Received: ..." for a NOTIFICATION from the node) later than since.
func parseBirdDowns(log string, since time.Time) []sessionDown {
	var out []sessionDown
	for _, line := range strings.Split(log, "\n") {
		i := strings.Index(line, " <RMT> ")
		if i < 0 {
			continue
		}
		at, err := time.ParseInLocation("2006-01-02 15:04:05.000", line[:i], time.Local)
		if err != nil || !at.After(since) {
			continue
		}
		node, msg, ok := strings.Cut(line[i+len(" <RMT> "):], ": ")
		if !ok || !(strings.HasPrefix(msg, "Error: ") || strings.HasPrefix(msg, "Received: ")) {
			continue
		}
		out = append(out, sessionDown{At: at, Node: node, Why: msg})
	}
	return out
}

// birdClockSlack: BIRD stamps its log lines with a time it reads once per
// turn of its event loop, to the millisecond, so a line caused by a kill
// or a stop may carry a time a little before the testbench's own.
const birdClockSlack = time.Second

// upAt reports whether the testbench had node running at t (a time of
// BIRD's log): started, and not killed or stopped since (or within
// birdClockSlack after).
func (r *fleetRunner) upAt(node string, t time.Time) bool {
	up, ok := r.startedAt[node]
	if !ok || up.After(t) {
		return false
	}
	down, ok := r.stoppedAt[node]
	return !ok || down.Before(up) || down.After(t.Add(birdClockSlack))
}

// waitFor polls cond every 50 ms until it holds or limit passes; it
// returns when it held (since the run started) or -1.
func (r *fleetRunner) waitFor(ctx context.Context, limit time.Duration, cond func() bool) time.Duration {
	end := time.Now().Add(limit)
	for ctx.Err() == nil {
		if cond() {
			return r.since()
		}
		if time.Now().After(end) {
			return -1
		}
		time.Sleep(50 * time.Millisecond)
	}
	return -1
}

func (r *fleetRunner) hasHop(n *fleetNode) bool {
	hops, _ := r.env.routeNextHops()
	return slices.Contains(hops, n.ip)
}

// nodeUp waits until the router forwards to the node.
func (r *fleetRunner) nodeUp(ctx context.Context, n *fleetNode, limit time.Duration) error {
	if r.waitFor(ctx, limit, func() bool { return r.hasHop(n) }) < 0 {
		data, _ := os.ReadFile(n.logPath)
		return fmt.Errorf("node %s: the router has no route through it %s after the start (node log %s):\n%s", n.name, limit, n.logPath, tail(string(data), 20))
	}
	return nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// digests reads every running node's target digest and whether its
// eligible set has backend.
func (r *fleetRunner) digests(ctx context.Context, backend string) (map[string]string, map[string]bool) {
	dg, has := map[string]string{}, map[string]bool{}
	for _, n := range r.env.nodes {
		if !n.isRunning() {
			continue
		}
		st, err := r.status(ctx, n)
		if err != nil || len(st.Targets) == 0 || len(st.Services) == 0 {
			continue
		}
		dg[n.name] = st.Targets[0].Digest
		has[n.name] = slices.Contains(st.Services[0].Eligible, backend)
	}
	return dg, has
}

func (r *fleetRunner) running() []*fleetNode {
	var out []*fleetNode
	for _, n := range r.env.nodes {
		if n.isRunning() {
			out = append(out, n)
		}
	}
	return out
}

// sample records the router's next hops and every connection's carrier.
func (r *fleetRunner) sampler(ctx context.Context, every time.Duration) {
	prev := map[string]map[int]uint64{}
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		s := FleetSample{T: r.since(), Carrier: make([]string, len(r.conns))}
		s.Digests, _ = r.digests(ctx, "")
		hops, _ := r.env.routeNextHops()
		for _, h := range hops {
			for _, n := range r.env.nodes {
				if n.ip == h {
					s.Hops = append(s.Hops, n.name)
				}
			}
		}
		seen := map[string]map[int]uint64{}
		for _, n := range r.env.nodes {
			ct, err := ctSeen(n.pinDir)
			if err != nil {
				continue
			}
			seen[n.name] = map[int]uint64{}
			for i, c := range r.conns {
				if v, ok := ct[c.local]; ok {
					seen[n.name][i] = v
				}
			}
		}
		for i, c := range r.conns {
			if b, _, _ := c.state(); b {
				s.Carrier[i] = "broken"
				continue
			}
			best, bestV := "", uint64(0)
			for _, n := range r.env.nodes {
				v, ok := seen[n.name][i]
				if ok && v > prev[n.name][i] && v > bestV {
					best, bestV = n.name, v
				}
			}
			s.Carrier[i] = best
		}
		prev = seen
		r.mu.Lock()
		r.samples = append(r.samples, s)
		r.mu.Unlock()
	}
}

// newConns opens a short connection every interval and records it.
func (r *fleetRunner) newConns(ctx context.Context, every time.Duration) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	i := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		i++
		client := r.env.clients[i%len(r.env.clients)]
		f := Flow{Start: r.since(), Kind: "tcp", Client: client}
		c, err := dialHeld(r.env.client, client)
		if err != nil {
			f.Err = shortErr(err)
		} else {
			f.Backend = c.backend
			c.c.Close()
		}
		r.mu.Lock()
		r.newFlows = append(r.newFlows, f)
		r.mu.Unlock()
	}
}

func (r *fleetRunner) run(ctx context.Context, names []string) (*FleetResult, error) {
	fr := &FleetResult{Scenario: r.sc.Name, Conns: r.fl.Connections}
	for i, n := range names {
		h := r.env.hosts[i]
		b := newBackend(n, h.NS, h.IP, fleetVIP, "")
		if err := b.start(); err != nil {
			return nil, err
		}
		r.backends[n] = b
	}
	defer func() {
		for _, b := range r.backends {
			b.stop()
		}
	}()
	lb, err := r.fleetConfig()
	if err != nil {
		return nil, err
	}
	r.setStallLimit()
	fr.StallLimit, fr.StallWhy = r.stallLimit, r.stallWhy
	for _, n := range r.env.nodes {
		fr.Nodes = append(fr.Nodes, n.name)
		if err := r.env.writeNodeConfig(n, lb); err != nil {
			return nil, err
		}
		r.startedAt[n.name] = time.Now()
		if err := r.env.startNode(n); err != nil {
			return nil, err
		}
	}
	for _, n := range r.env.nodes {
		if err := r.nodeUp(ctx, n, 60*time.Second); err != nil {
			return nil, err
		}
	}
	hops, _ := r.env.routeNextHops()
	r.progress("fleet up: the router's route to %s has %d next hops %v (BIRD, ECMP)", fleetVIP, len(hops), hops)

	for i := 0; i < r.fl.Connections; i++ {
		c, err := dialHeld(r.env.client, r.env.clients[i%len(r.env.clients)])
		if err != nil {
			return nil, fmt.Errorf("open held connection %d: %w", i+1, err)
		}
		c.id = i
		c.lastOK = r.since()
		r.conns = append(r.conns, c)
	}
	defer func() {
		for _, c := range r.conns {
			c.c.Close()
		}
	}()
	r.progress("%d connections open and pinged every %s", len(r.conns), r.fl.PingEvery.D())
	bctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, c := range r.conns {
		wg.Add(1)
		go func() { defer wg.Done(); c.keep(bctx, r.fl.PingEvery.D(), r.since) }()
	}
	wg.Add(2)
	go func() { defer wg.Done(); r.sampler(bctx, 2*r.fl.PingEvery.D()) }()
	go func() { defer wg.Done(); r.newConns(bctx, 200*time.Millisecond) }()
	defer func() { stop(); wg.Wait() }()
	time.Sleep(4 * r.fl.PingEvery.D()) // two samples before the first event

	for i := range r.fl.Events {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		er := r.event(ctx, i)
		fr.Events = append(fr.Events, er)
		for _, c := range er.Checks {
			mark := "PASS"
			if !c.OK {
				mark = "FAIL"
				fr.Failures = append(fr.Failures, Failure{Step: er.Name, Check: c.Name, Msg: c.Msg})
			}
			r.progress("  %s %-12s %s", mark, c.Name, c.Msg)
		}
		r.progress("  load probe: %s", er.Sched)
		if er.TooSlow != "" {
			r.progress("  machine too slow for this event's timers: %s", er.TooSlow)
		}
	}
	stop()
	wg.Wait()
	fr.Took = r.since()
	r.mu.Lock()
	fr.Samples = append([]FleetSample(nil), r.samples...)
	r.mu.Unlock()
	return fr, nil
}

// event runs one event and checks it.
func (r *fleetRunner) event(ctx context.Context, i int) *FleetEventResult {
	ev := &r.fl.Events[i]
	kind, target := ev.Action()
	er := &FleetEventResult{Name: ev.Name, Action: strings.TrimSpace(kind + " " + target), Start: r.since(), Effect: -1}
	r.progress("event %d/%d %q", i+1, len(r.fl.Events), ev.Name)
	fail := func(check, format string, a ...any) {
		er.Checks = append(er.Checks, Check{Name: check, Msg: fmt.Sprintf("event %d %q: %s: ", i+1, ev.Name, check) + fmt.Sprintf(format, a...)})
	}
	pass := func(check, format string, a ...any) {
		er.Checks = append(er.Checks, Check{Name: check, OK: true, Msg: fmt.Sprintf(format, a...)})
	}
	// The effect is waited for at most this long before observing.
	limit := 30 * time.Second
	if w := ev.Expect.RoutesWithin.D() + ev.Expect.ConvergeWithin.D(); w > 0 {
		limit = 3*w + 5*time.Second
	}
	n := r.env.node(target)
	var aerr, cerr error
	var cover map[string]map[netip.AddrPort]bool
	// The nodes' digests before the action: the ring in force until the
	// action, which the ring model must match.
	digestBefore, _ := r.digests(ctx, target)
	ringBefore, ringErr := r.ringModel(digestBefore)
	er.At = r.since()
	switch kind {
	case "kill":
		r.stoppedAt[n.name] = time.Now()
		aerr = r.env.killNode(n)
		if aerr == nil {
			if t := r.waitFor(ctx, limit, func() bool { return !r.hasHop(n) }); t >= 0 {
				er.Effect, er.EffectWhat = t-er.At, "route through "+n.name+" withdrawn"
			}
		}
	case "stop":
		r.stoppedAt[n.name] = time.Now()
		aerr = r.env.stopNode(n)
		if aerr == nil {
			if t := r.waitFor(ctx, limit, func() bool { return !r.hasHop(n) }); t >= 0 {
				er.Effect, er.EffectWhat = max(0, t-er.At), "route through "+n.name+" withdrawn"
			}
		}
	case "start":
		r.startedAt[n.name] = time.Now()
		aerr = r.env.startNode(n)
		if aerr == nil {
			if t := r.waitFor(ctx, limit, func() bool { return r.hasHop(n) }); t >= 0 {
				er.Effect, er.EffectWhat = t-er.At, "route through "+n.name+" back"
			}
		}
	case "intrude":
		rejected := func() uint64 {
			st, err := r.status(ctx, n)
			if err != nil || st.Fleet == nil {
				return 0
			}
			return st.Fleet.Rejected["tls"]
		}
		before := rejected()
		if aerr = r.env.intrude(ctx, n); aerr == nil {
			if t := r.waitFor(ctx, limit, func() bool { return rejected() > before }); t >= 0 {
				er.Effect, er.EffectWhat = t-er.At, "the wrong-key peer rejected and counted by "+n.name
				pass("refused", "%s rejected a peer with a certificate of another CA (lbc_fleet_peers_rejected_total{reason=\"tls\"} %d → %d)", n.name, before, rejected())
			} else {
				fail("refused", "%s did not count the wrong-key peer's rejection", n.name)
			}
		}
	case "fail", "recover":
		b := r.backends[target]
		act := func() {
			if kind == "fail" {
				b.setStatus(503)
			} else {
				b.setStatus(200)
			}
		}
		r.unhealthy[target] = kind == "fail"
		var watch *installWatch
		if ev.KillAfterChange != "" {
			er.Window, aerr = r.killAtChange(ctx, ev.KillAfterChange, digestBefore, act, limit)
		} else {
			if r.fl.sharing() {
				// Polled from the action on: a node's first install
				// after its ring change, before a refresh replaces it.
				watch = r.watchInstalls(ctx)
				defer watch.halt()
			}
			act()
		}
		want := kind == "recover"
		t := r.waitFor(ctx, limit, func() bool {
			dg, has := r.digests(ctx, target)
			if len(dg) != len(r.running()) || len(dg) == 0 {
				return false
			}
			first := ""
			for name, d := range dg {
				if has[name] != want || d == "" || d == digestBefore[name] {
					return false
				}
				if first == "" {
					first = d
				} else if d != first {
					return false
				}
			}
			er.Digest = first
			return true
		})
		if t >= 0 {
			er.Effect, er.EffectWhat = t-er.At, fmt.Sprintf("every running node holds ring digest %s", er.Digest)
		}
		if watch != nil && t >= 0 {
			// R-FLEET's sync window of a change no node dies in.
			win, spread, err := watch.wait(ctx, 5*time.Second)
			er.SyncWindows = win
			var parts []string
			for _, n := range slices.Sorted(maps.Keys(win)) {
				parts = append(parts, fmt.Sprintf("%s %.1f ms", n, float64(win[n].Microseconds())/1000))
			}
			if err != nil {
				fail("sync-window", "%v", err)
			} else {
				pass("sync-window", "from each node's ring change to its exceptions installed on every peer: %s; the rings changed over %d ms (each node's health check sees the change at its own moment)", strings.Join(parts, ", "), spread.Milliseconds())
			}
		}
		if w := er.Window; w != nil && aerr == nil {
			w.Converged = t
			k := r.env.node(w.Killed)
			w.Withdrawn = r.waitFor(ctx, limit, func() bool { return !r.hasHop(k) })
			// What the moving flows find: read at once.
			if cover, cerr = r.coverage(ctx); cerr == nil {
				r.survivorsChanged(ctx, w)
			}
		}
	}
	if aerr != nil {
		fail("action", "%s: %v", er.Action, aerr)
	}
	rings := []*fleetRing{ringBefore}
	if ringErr == nil && (kind == "fail" || kind == "recover") {
		// The ring after the action, which the nodes converged on.
		after := map[string]string{}
		if er.Digest != "" {
			after["every running node"] = er.Digest
		}
		var ra *fleetRing
		if ra, ringErr = r.ringModel(after); ringErr == nil {
			rings = append(rings, ra)
		}
	}
	time.Sleep(ev.Observe.D())
	er.End = r.since()
	er.Sched = r.probe.Window(er.Start, er.End)
	if er.Effect >= 0 {
		er.EffectSched = r.probe.Window(er.At, er.At+er.Effect)
	}

	// Connections in the window.
	var held []heldConn
	for _, c := range r.conns {
		b, at, why := c.state()
		if b && at < er.Start {
			continue // broke in an earlier event: not held any more
		}
		held = append(held, heldConn{Local: c.local, Backend: c.backend, Broken: b && at <= er.End, Why: why})
		if b && at >= er.Start && at <= er.End {
			er.Broken++
			if er.BrokenBy == nil {
				er.BrokenBy = map[string]int{}
			}
			er.BrokenBy[c.backend]++
			if er.Broken == 1 {
				er.Checks = append(er.Checks, Check{Name: "first-break", OK: true, Msg: fmt.Sprintf("connection %s → %s broke at %.2fs: %s", c.local, c.backend, at.Seconds(), why)})
			}
		}
		c.mu.Lock()
		er.MaxStall = max(er.MaxStall, c.stallFor)
		c.stallFor = 0
		c.mu.Unlock()
	}
	r.mu.Lock()
	var window []FleetSample
	for _, s := range r.samples {
		if s.T >= er.Start && s.T <= er.End {
			window = append(window, s)
		}
	}
	for _, f := range r.newFlows {
		if f.Start >= er.Start && f.Start <= er.End {
			if f.Err != "" {
				er.NewFailed++
			} else {
				er.NewOK++
			}
		}
	}
	var before []string
	for _, s := range r.samples {
		if s.T < er.At {
			before = s.Carrier
		}
	}
	r.mu.Unlock()
	// Moved: the connection's carrier changed during the event.
	for ci := range r.conns {
		last := ""
		if ci < len(before) {
			last = before[ci]
		}
		for _, s := range window {
			c := s.Carrier[ci]
			if c == "" || c == "broken" {
				continue
			}
			if last != "" && c != last {
				er.Moved++
				break
			}
			last = c
		}
	}
	// Carriers over the last two samples of the window.
	er.Carriers = map[string]int{}
	if k := len(window); k > 0 {
		for ci := range r.conns {
			c := window[k-1].Carrier[ci]
			if c == "" && k > 1 {
				c = window[k-2].Carrier[ci]
			}
			if c == "" {
				c = "stalled"
			}
			er.Carriers[c]++
		}
	}

	ex := ev.Expect
	// A bound (the scenario's, from its timers) is widened by the time
	// the machine was measured to take away between the action and the
	// effect: what a loaded machine delays is not what lbc does.
	bound := func(b time.Duration) (time.Duration, string) {
		if er.EffectSched.Lost <= 0 {
			return b, fmt.Sprintf("%d ms", b.Milliseconds())
		}
		return b + er.EffectSched.Lost, fmt.Sprintf("%d ms + %d ms lost to scheduling in that span (longest stall %d ms)",
			b.Milliseconds(), er.EffectSched.Lost.Milliseconds(), er.EffectSched.Worst.Milliseconds())
	}
	if ex.RoutesWithin > 0 {
		b, bs := bound(ex.RoutesWithin.D())
		switch {
		case er.Effect < 0:
			fail("routes", "the router's table never showed %s within %s", er.Action, limit)
		case er.Effect > b:
			fail("routes", "%s took %d ms, bound %s", er.EffectWhat, er.Effect.Milliseconds(), bs)
		default:
			pass("routes", "%s after %d ms (≤ %s)", er.EffectWhat, er.Effect.Milliseconds(), bs)
		}
	}
	if ex.ConvergeWithin > 0 {
		b, bs := bound(ex.ConvergeWithin.D())
		switch {
		case er.Effect < 0:
			fail("converge", "the running nodes never agreed on a ring %s %s within %s", map[bool]string{true: "with", false: "without"}[kind == "recover"], target, limit)
		case er.Effect > b:
			fail("converge", "%s after %d ms, bound %s", er.EffectWhat, er.Effect.Milliseconds(), bs)
		default:
			pass("converge", "%s after %d ms (≤ %s: health-check interval plus push)", er.EffectWhat, er.Effect.Milliseconds(), bs)
		}
	}
	// No BGP session of a node the testbench had running went down (the
	// router's log since the last event's check): the router would
	// withdraw a node that is up.
	var downs []string
	if r.logChecked.IsZero() {
		r.logChecked = r.start
	}
	for _, d := range r.routerSessionDowns(r.logChecked) {
		if r.upAt(d.Node, d.At) {
			downs = append(downs, fmt.Sprintf("%s at %.1f s (%s)", d.Node, d.At.Sub(r.start).Seconds(), d.Why))
		}
	}
	r.logChecked = time.Now()
	if len(downs) > 0 {
		fail("sessions", "the router saw the BGP session of a running node go down: %s", strings.Join(downs, ", "))
	} else {
		pass("sessions", "no BGP session of a running node went down (the router's log)")
	}
	maxBroken, derived := ex.MaxBroken, ""
	if w := er.Window; w != nil {
		switch {
		case aerr != nil:
		case cerr != nil || ringErr != nil || len(rings) < 2:
			fail("synced", "cannot derive what may break: coverage %v, ring model %v", cerr, ringErr)
		default:
			w.expect(held, netip.AddrPortFrom(fleetVIP, TCPPort), rings[0], rings[len(rings)-1], cover)
			w.check(held, pass, fail)
		}
		maxBroken, derived = w.ExpectMax, ", derived from the window"
	}
	if er.Broken > maxBroken {
		fail("established", "%d of %d held connections broke, at most %d may%s", er.Broken, len(r.conns), maxBroken, derived)
	} else {
		pass("established", "%d of %d held connections broke (≤ %d%s); %d moved between nodes; longest silence %d ms", er.Broken, len(r.conns), maxBroken, derived, er.Moved, er.MaxStall.Milliseconds())
	}
	if ringErr == nil {
		// The model holds only if no node held another ring meanwhile (a
		// node whose health check flapped, a node that restarted).
		if off := unmodelled(window, rings); off != "" {
			ringErr = fmt.Errorf("a node held a ring the test did not model: %s", off)
		}
	}
	er.AtRisk = -1
	if ringErr == nil {
		rr := assessRingRisk(held, netip.AddrPortFrom(fleetVIP, TCPPort), rings)
		er.AtRisk, er.AtRiskBy = rr.AtRisk, rr.AtRiskBy
		for _, ring := range rings {
			er.Rings = append(er.Rings, ring.String())
		}
		if ex.BrokenOnlyIfRingMoved {
			switch {
			case len(rr.Unexplained) > 0:
				fail("ring-moved", "%d of %d broken connections were not at risk (only %d held connections were: their slot maps to another backend): %s",
					len(rr.Unexplained), rr.Broken, rr.AtRisk, strings.Join(rr.Unexplained, "; "))
			default:
				by := carrierLine(rr.AtRiskBy)
				if by == "" {
					by = "none"
				}
				broke := ""
				if rr.Broken > 0 {
					broke = " (" + carrierLine(er.BrokenBy) + "), all of them at risk"
				}
				pass("ring-moved", "%d of %d held connections at risk (%s maps their slot to another backend than theirs; by backend: %s); %d broke%s",
					rr.AtRisk, len(held), strings.Join(er.Rings, " then "), by, rr.Broken, broke)
			}
		}
	} else if ex.BrokenOnlyIfRingMoved {
		fail("ring-moved", "cannot tell which connections the ring moved: %v", ringErr)
	}
	if ex.AtRisk {
		if er.AtRisk > 0 {
			pass("at-risk", "%d held connections at risk (on another backend than the ring in force gives them): kept by the exceptions the nodes share (R-FLEET)", er.AtRisk)
		} else {
			fail("at-risk", "no held connection at risk (%d): the event did not exercise the shared exceptions", er.AtRisk)
		}
	}
	if kind == "intrude" {
		r.checkPeersUp(ctx, er, pass, fail)
	}
	if ex.Moved && er.Moved == 0 {
		fail("moved", "no connection changed node: the event did not exercise a move")
	}
	if ex.AllNodesCarry {
		var idle []string
		for _, n := range r.running() {
			if er.Carriers[n.name] == 0 {
				idle = append(idle, n.name)
			}
		}
		if len(idle) > 0 {
			fail("all-carry", "running node(s) %s carried none of %d connections (carriers %v)", strings.Join(idle, ", "), len(r.conns), er.Carriers)
		} else {
			pass("all-carry", "every running node carries connections: %s", carrierLine(er.Carriers))
		}
	}
	if er.Sched.Worst >= r.stallLimit {
		er.TooSlow = fmt.Sprintf("the load probe stalled %d ms, at least %d ms (%s): %s",
			er.Sched.Worst.Milliseconds(), r.stallLimit.Milliseconds(), r.stallWhy, er.Sched)
	}
	return er
}

// unmodelled lists, once per node and digest, the rings the nodes held
// in the window that are none of rings ("" if none).
func unmodelled(window []FleetSample, rings []*fleetRing) string {
	known := map[string]bool{}
	for _, ring := range rings {
		known[ring.Digest] = true
	}
	seen := map[string]bool{}
	var off []string
	for _, s := range window {
		names := make([]string, 0, len(s.Digests))
		for n := range s.Digests {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			d := s.Digests[n]
			if d == "" || known[d] || seen[n+" "+d] {
				continue
			}
			seen[n+" "+d] = true
			off = append(off, fmt.Sprintf("%s held ring %s at %.1f s", n, d, s.T.Seconds()))
		}
	}
	return strings.Join(off, ", ")
}

func carrierLine(m map[string]int) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// checkPeersUp: after an intrusion, every running node's streams to its
// running peers are up (the fleet's own sync is unaffected).
func (r *fleetRunner) checkPeersUp(ctx context.Context, er *FleetEventResult, pass, fail func(check, format string, a ...any)) {
	var down []string
	for _, n := range r.running() {
		st, err := r.status(ctx, n)
		if err != nil || st.Fleet == nil {
			down = append(down, fmt.Sprintf("%s: no fleet status (%v)", n.name, err))
			continue
		}
		for _, p := range st.Fleet.Peers {
			if pn := r.env.node(p.Name); pn != nil && pn.isRunning() && !p.Connected {
				down = append(down, fmt.Sprintf("%s → %s: %s", n.name, p.Name, p.LastError))
			}
		}
	}
	if len(down) > 0 {
		fail("peers-up", "fleet streams down after the intrusion: %s", strings.Join(down, "; "))
	} else {
		pass("peers-up", "every running node's streams to its running peers are up")
	}
}
