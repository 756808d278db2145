package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
)

// Options tune Run.
type Options struct {
	// Topology is "netns" (default: the XDP datapath alone) or "mininet"
	// (BMv2 switch with an XDP fallback host).
	Topology string
	// OutDir receives the report (report.md, report.json, PNG plots,
	// lb.yaml, controller.log); "" writes them to a temporary directory
	// that is removed.
	OutDir string
	// Progress receives progress lines as the run goes (nil: none).
	Progress io.Writer
	// Prefix names the namespaces (default lbcsc<pid>): it must not
	// collide with other tests running at the same time.
	Prefix string
	// Seed makes the traffic's choices repeatable (default 1).
	Seed uint64
	// LBC is the lbc binary fleet scenarios run as nodes, and scenarios
	// with controller: process as their controller (default: lbcBinary's
	// search).
	LBC string
}

// AssertionError is returned when assertions fail; the run itself worked.
type AssertionError struct{ Failures []Failure }

func (e *AssertionError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d assertion(s) failed:", len(e.Failures))
	for _, f := range e.Failures {
		b.WriteString("\n  ")
		b.WriteString(f.Msg)
	}
	return b.String()
}

// Failure is one broken assertion.
type Failure struct {
	Step    string `json:"step"`
	Check   string `json:"check"`
	Backend string `json:"backend,omitempty"`
	Msg     string `json:"msg"`
}

// Result is everything a run observed.
type Result struct {
	Scenario  string            `json:"scenario"`
	File      string            `json:"file"`
	Topology  string            `json:"topology"`
	Env       string            `json:"env"`
	Started   time.Time         `json:"started"`
	Took      time.Duration     `json:"took"`
	Backends  []string          `json:"backends"`
	Steps     []*StepResult     `json:"steps"`
	Faults    []FaultEvent      `json:"faults"`
	Rings     []RingState       `json:"rings"`
	Targets   []TargetsState    `json:"targets,omitempty"`
	Flows     []Flow            `json:"flows"`
	Failures  []Failure         `json:"failures"`
	Datapaths map[string]uint64 `json:"datapathPackets"`
	Files     []string          `json:"files"`
	// Controller is how the controller ran: in-process or process.
	Controller string `json:"controller,omitempty"`
	// NotJudged says why earlier runs of a fleet scenario were run again
	// (the machine was too slow for the scenario's timers).
	NotJudged []string `json:"notJudged,omitempty"`
}

// StepResult is one step's window, checks and table.
type StepResult struct {
	Index  int           `json:"index"`
	Name   string        `json:"name"`
	Start  time.Duration `json:"start"`
	End    time.Duration `json:"end"`
	Settle time.Duration `json:"settle"` // flows after this count for shares
	Checks []Check       `json:"checks"`
	Rows   []Row         `json:"rows"`
	Notes  []string      `json:"notes,omitempty"`
	// Datapath new connections per backend name during the step.
	DatapathNew map[string]uint64 `json:"datapathNew,omitempty"`
	// Datapath packets per datapath during the step.
	DatapathPackets map[string]uint64 `json:"datapathPackets,omitempty"`
	// Sched is the time the scheduling probe lost in the step: the
	// black-hole and convergence bounds are widened by it.
	Sched SchedDelay `json:"sched"`
	// Recoveries of the step's kill, block and detach faults.
	Recoveries []Recovery `json:"recoveries,omitempty"`
}

// Check is one assertion's outcome, printed whether it passed or not.
type Check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	Msg  string `json:"msg"`
}

// FaultEvent is a fault as it happened.
type FaultEvent struct {
	Step  int           `json:"step"`
	T     time.Duration `json:"t"`
	Fault string        `json:"fault"`
	Kind  string        `json:"kind"`
	// What a restart, kill, block or detach is of: switch, controller,
	// p4runtime, xdp, pins.
	What    string        `json:"what,omitempty"`
	Backend string        `json:"backend,omitempty"`
	Note    string        `json:"note,omitempty"`
	Err     string        `json:"err,omitempty"`
	Took    time.Duration `json:"took,omitempty"` // restarts: how long it took
	To      int           `json:"to,omitempty"`
	// End is when a kill, block or detach ended (since the start): the
	// switch accepted connections again, the block was lifted, the
	// controller was started again, the program was detached.
	End time.Duration `json:"end,omitempty"`
	// Killed is how a kill: controller fault ended the controller.
	Killed *ControllerKill `json:"killed,omitempty"`
}

// TargetsState is the controller's view of its targets, sampled every
// 50 ms and kept when it changes.
type TargetsState struct {
	T time.Duration `json:"t"`
	// Gen counts controller starts (a restarted controller is a new one).
	Gen int `json:"gen"`
	// OK: every target is primary, holds the compiled digest (the digests
	// agree) and reports no error; Why says what is not.
	OK  bool   `json:"ok"`
	Why string `json:"why,omitempty"`
	// Writes is the entities the controller wrote, over its targets.
	Writes uint64 `json:"writes"`
}

// RingState is the controller's view when it changed.
type RingState struct {
	T        time.Duration          `json:"t"`
	Step     int                    `json:"step"`
	Eligible []string               `json:"eligible"`
	Decision string                 `json:"decision"`
	Rule     string                 `json:"rule"`
	Backends map[string]BackendView `json:"backends"`
}

// BackendView is one backend in a RingState.
type BackendView struct {
	ID       uint32  `json:"id"`
	Share    float64 `json:"share"`
	Healthy  bool    `json:"healthy"`
	Weight   int     `json:"weight"`
	Draining bool    `json:"draining"`
}

func (a RingState) sameAs(b RingState) bool {
	if strings.Join(a.Eligible, ",") != strings.Join(b.Eligible, ",") || len(a.Backends) != len(b.Backends) {
		return false
	}
	for n, v := range a.Backends {
		if b.Backends[n] != v {
			return false
		}
	}
	return true
}

type runner struct {
	sc   *Scenario
	opts Options
	env  Env
	out  string
	log  *slog.Logger
	logf *os.File

	backends map[string]*backend
	tr       *traffic
	cfgMu    sync.Mutex // guards removed and lb.yaml
	removed  map[string]bool
	cfgPath  string

	cmu sync.Mutex // guards ctl and gen
	ctl scenarioController
	gen int
	lbc string // controller: process: the lbc binary

	probe *schedProbe
	rwait *runWaitProbe // the switch's and the controller's run-queue wait

	rmu    sync.Mutex
	rings  []RingState
	tstate []TargetsState
	faults []FaultEvent
	notes  map[int][]string
	step   int
}

func (r *runner) progress(format string, a ...any) {
	if r.opts.Progress == nil {
		return
	}
	t := time.Duration(0)
	if r.tr != nil {
		t = r.tr.since()
	}
	fmt.Fprintf(r.opts.Progress, "[%6.1fs] %s\n", t.Seconds(), fmt.Sprintf(format, a...))
}

// recoveryPIDs are the processes on a fault's recovery path, whose
// run-queue wait widens its bounds: the switch (mininet) and the
// controller (lbc run, or the testbench itself in process).
func (r *runner) recoveryPIDs() []int {
	var pids []int
	if sw, ok := r.env.(interface{ SwitchPID() int }); ok {
		pids = append(pids, sw.SwitchPID())
	}
	r.cmu.Lock()
	c := r.ctl
	r.cmu.Unlock()
	if c != nil {
		pid := c.PID()
		if pid == 0 {
			pid = os.Getpid()
		}
		pids = append(pids, pid)
	}
	return pids
}

// Run runs a scenario end to end and writes its report. It returns the
// result with an *AssertionError when assertions failed, or another error
// when the run could not be done.
func Run(ctx context.Context, sc *Scenario, opts Options) (*Result, error) {
	if opts.Topology == "" {
		opts.Topology = "netns"
	}
	if opts.Prefix == "" {
		opts.Prefix = fmt.Sprintf("lbcsc%d", os.Getpid())
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	if sc.Fleet != nil {
		return runFleet(ctx, sc, opts)
	}
	r := &runner{sc: sc, opts: opts, backends: map[string]*backend{}, removed: map[string]bool{}, notes: map[int][]string{}}
	if sc.Controller == ControllerProcess {
		lbc, err := lbcBinary(opts.LBC)
		if err != nil {
			return nil, fmt.Errorf("scenario %s (controller: process): %w", sc.file, err)
		}
		r.lbc = lbc
	}
	if opts.OutDir == "" {
		d, err := os.MkdirTemp("", "lbc-scenario-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		r.out = d
	} else {
		if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
			return nil, err
		}
		r.out = opts.OutDir
	}
	var err error
	// Appended to: in process mode each lbc run appends its own output.
	if r.logf, err = os.OpenFile(filepath.Join(r.out, "controller.log"), os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return nil, err
	}
	defer r.logf.Close()
	r.log = slog.New(slog.NewTextHandler(r.logf, nil))

	names := sc.BackendNames()
	r.progress("scenario %q (%s): %d backends, %d steps, topology %s, controller %s", sc.Name, sc.file, len(names), len(sc.Steps), opts.Topology, sc.Controller)
	switch opts.Topology {
	case "netns":
		r.env, err = NewNetnsEnv(ctx, opts.Prefix, len(names), sc.Clients)
	case "mininet":
		r.env, err = NewMininetEnv(ctx, opts.Prefix, len(names), sc.Clients, r.out, r.progress)
	default:
		err = fmt.Errorf("topology %q: want netns or mininet", opts.Topology)
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := r.env.Close(); cerr != nil {
			r.progress("cleanup: %v", cerr)
		}
	}()
	r.progress("topology up: %s", r.env.Describe())
	res, err := r.run(ctx, names)
	if res == nil {
		return nil, err
	}
	if werr := r.writeReport(res); werr != nil && err == nil {
		err = werr
	}
	if err == nil && len(res.Failures) > 0 {
		err = &AssertionError{Failures: res.Failures}
	}
	return res, err
}

func (r *runner) run(ctx context.Context, names []string) (*Result, error) {
	sc := r.sc
	// Backends: servers in their hosts' namespaces.
	for i, n := range names {
		h := r.env.Hosts()[i]
		w := ""
		if v, ok := sc.Weights[n]; ok {
			w = fmt.Sprint(v)
		} else if sc.Weighted() {
			w = "100"
		}
		b := newBackend(n, h.NS, h.IP, r.env.VIP(), w)
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
	r.cfgPath = filepath.Join(r.out, "lb.yaml")
	if err := r.writeConfig(); err != nil {
		return nil, err
	}
	r.tr = &traffic{ns: r.env.ClientNS(), clients: r.env.ClientAddrs(), vip: r.env.VIP(), start: time.Now(), backends: r.backends,
		maxSilence: sc.maxSilence}
	r.probe = startSchedProbe(r.tr.start)
	defer r.probe.Stop()
	r.rwait = startRunWaitProbe(r.tr.start, r.recoveryPIDs)
	defer r.rwait.Stop()
	if err := r.startController(ctx); err != nil {
		return nil, err
	}
	defer r.stopController()
	r.progress("controller ready: %s", r.ringLine(r.currentRing(ctx)))

	pctx, stopPoll := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); r.pollRing(pctx) }()
	go func() { defer wg.Done(); r.tr.pinger(pctx, 500*time.Millisecond) }()
	defer func() { stopPoll(); wg.Wait(); r.tr.closeAll() }()

	res := &Result{Scenario: sc.Name, File: sc.file, Topology: r.env.Name(), Controller: sc.Controller, Env: r.env.Describe(), Started: r.tr.start, Backends: names}
	for i := range sc.Steps {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		st := &sc.Steps[i]
		r.rmu.Lock()
		r.step = i
		r.rmu.Unlock()
		r.tr.setStep(i)
		sr := &StepResult{Index: i, Name: st.Name, Start: r.tr.since()}
		r.progress("step %d/%d %q: %s for %s at %g/s (mix tcp %g udp %g frag %g, keep %g)", i+1, len(sc.Steps), st.Name,
			faultList(st.Faults), st.Traffic.Duration.D(), st.Traffic.Rate, st.Traffic.Mix.TCP, st.Traffic.Mix.UDP, st.Traffic.Mix.Frag, st.Traffic.Keep)
		before, okBefore := r.readCounters(ctx, i, "at its start")
		var fw sync.WaitGroup
		stepStart := time.Now()
		for _, f := range st.Faults {
			fw.Add(1)
			go func() {
				defer fw.Done()
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(stepStart.Add(f.At.D()))):
				}
				r.inject(ctx, i, f)
			}()
		}
		rng := rand.New(rand.NewPCG(r.opts.Seed, uint64(i)))
		r.tr.run(ctx, i, st.Traffic, rng, afterFaults(&fw, st.Traffic.AfterFaults.D()))
		fw.Wait()
		r.tr.ping()
		r.tr.settle(ctx)
		sr.End = r.tr.since()
		after, okAfter := r.readCounters(ctx, i, "at its end")
		if okBefore && okAfter {
			sr.DatapathPackets, sr.DatapathNew = r.counterDelta(before, after)
		}
		r.rmu.Lock()
		sr.Notes = r.notes[i]
		r.rmu.Unlock()
		sr.Sched = r.probe.Window(sr.Start, sr.End)
		res.Steps = append(res.Steps, sr)
		r.evaluate(ctx, res, sr)
		for _, c := range sr.Checks {
			mark := "PASS"
			if !c.OK {
				mark = "FAIL"
			}
			r.progress("  %s %-11s %s", mark, c.Name, c.Msg)
		}
		if r.opts.Progress != nil {
			writeStepTable(r.opts.Progress, sr, false)
		}
	}
	res.Datapaths = map[string]uint64{}
	for _, s := range res.Steps {
		for k, v := range s.DatapathPackets {
			res.Datapaths[k] += v
		}
	}
	res.Took = r.tr.since()
	r.rmu.Lock()
	res.Faults = append([]FaultEvent(nil), r.faults...)
	res.Rings = append([]RingState(nil), r.rings...)
	res.Targets = append([]TargetsState(nil), r.tstate...)
	r.rmu.Unlock()
	r.tr.mu.Lock()
	res.Flows = append([]Flow(nil), r.tr.flows...)
	r.tr.mu.Unlock()
	return res, nil
}

// afterFaults is traffic.run's hold for traffic.afterFaults: true while
// the step's faults (fw) run and for d after the last is over (nil when
// d is 0).
func afterFaults(fw *sync.WaitGroup, d time.Duration) func() bool {
	if d <= 0 {
		return nil
	}
	var done atomic.Int64 // when the faults were over (UnixNano); 0 while they run
	go func() {
		fw.Wait()
		done.Store(time.Now().UnixNano())
	}()
	return func() bool {
		at := done.Load()
		return at == 0 || time.Since(time.Unix(0, at)) < d
	}
}

func faultList(fs []Fault) string {
	if len(fs) == 0 {
		return "no faults"
	}
	var s []string
	for _, f := range fs {
		x := f.String()
		if f.At > 0 {
			x += " at +" + f.At.D().String()
		}
		s = append(s, x)
	}
	return strings.Join(s, ", ")
}

// readCounters reads the datapaths' counters at a step's start or end. A
// failed read becomes a note of the step, whose datapath columns then stay
// empty: a delta from zero would count the whole run.
func (r *runner) readCounters(ctx context.Context, step int, when string) (Counters, bool) {
	c, err := r.env.Counters(ctx)
	if err == nil {
		return c, true
	}
	note := fmt.Sprintf("datapath counters unreadable %s (%v): the step's datapath columns are empty", when, err)
	r.rmu.Lock()
	r.notes[step] = append(r.notes[step], note)
	r.rmu.Unlock()
	r.progress("  %s", note)
	return Counters{}, false
}

func (r *runner) counterDelta(a, b Counters) (map[string]uint64, map[string]uint64) {
	// A counter that went down was reset (the switch restarted): count
	// from zero.
	delta := func(x, y uint64) uint64 {
		if y < x {
			return y
		}
		return y - x
	}
	pk := map[string]uint64{}
	for k, v := range b.Packets {
		pk[k] = delta(a.Packets[k], v)
	}
	ids := map[uint32]string{}
	r.rmu.Lock()
	for _, rs := range r.rings {
		for n, v := range rs.Backends {
			ids[v.ID] = n
		}
	}
	r.rmu.Unlock()
	nc := map[string]uint64{}
	for id, v := range b.NewConns {
		if n, ok := ids[id]; ok {
			nc[n] += delta(a.NewConns[id], v)
		}
	}
	return pk, nc
}

// writeConfig writes lb.yaml: the scenario's service with the topology's
// addresses, without removed backends.
func (r *runner) writeConfig() error {
	data, err := r.config()
	if err != nil {
		return err
	}
	if _, err := compiler.Load(r.cfgPath, data); err != nil {
		return fmt.Errorf("scenario %s: the service does not compile: %w", r.sc.file, err)
	}
	tmp := r.cfgPath + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, r.cfgPath)
}

func (r *runner) config() ([]byte, error) {
	raw, err := yaml.Marshal(r.sc.Service)
	if err != nil {
		return nil, err
	}
	var svc map[string]any
	if err := yaml.Unmarshal(raw, &svc); err != nil {
		return nil, err
	}
	svc["vip"] = r.env.VIP().String()
	if hc, ok := svc["healthCheck"].(map[string]any); ok {
		if _, ok := hc["port"]; !ok {
			hc["port"] = HealthPort
		}
	}
	hosts := r.env.Hosts()
	idx := map[string]int{}
	for i, n := range r.sc.BackendNames() {
		idx[n] = i
	}
	groups, _ := svc["backends"].([]any)
	var keptGroups []any
	for _, g := range groups {
		gm, _ := g.(map[string]any)
		eps, _ := gm["endpoints"].([]any)
		var keptEps []any
		for _, e := range eps {
			em, _ := e.(map[string]any)
			n, _ := em["name"].(string)
			if r.removed[n] {
				continue
			}
			h := hosts[idx[n]]
			em["ip"] = h.IP.String()
			if h.MAC != "" {
				em["mac"] = h.MAC
			}
			keptEps = append(keptEps, em)
		}
		if len(keptEps) == 0 {
			continue
		}
		gm["endpoints"] = keptEps
		keptGroups = append(keptGroups, gm)
	}
	svc["backends"] = keptGroups
	doc := map[string]any{
		"tunnel":   map[string]any{"sourceIPv4": r.env.TunnelSource().String()},
		"services": []any{svc},
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	head := fmt.Sprintf("# Generated by the scenario testbench from %s for the %s topology.\n", r.sc.file, r.env.Name())
	return append([]byte(head), out...), nil
}

// currentRing reads the controller's status.
func (r *runner) currentRing(ctx context.Context) (RingState, bool) {
	st, _, ok := r.status(ctx)
	if !ok {
		return RingState{}, false
	}
	return r.ringOf(st)
}

// ringOf is the scenario's service's ring in a status.
func (r *runner) ringOf(st controller.Status) (RingState, bool) {
	for _, s := range st.Services {
		if s.Name != r.sc.ServiceName() {
			continue
		}
		rs := RingState{T: r.tr.since(), Eligible: append([]string(nil), s.Eligible...), Decision: s.Decision, Rule: s.Rule, Backends: map[string]BackendView{}}
		sort.Strings(rs.Eligible)
		for _, b := range s.Backends {
			bv := BackendView{ID: b.ID, Share: b.RingShare, Healthy: b.Healthy, Draining: b.Draining}
			if b.Weight != nil { // weighted services only
				bv.Weight = *b.Weight
			}
			rs.Backends[b.Name] = bv
		}
		return rs, true
	}
	return RingState{}, false
}

// targetsOf is the state of the targets in a status of controller gen.
func (r *runner) targetsOf(st controller.Status, gen int) TargetsState {
	ts := TargetsState{T: r.tr.since(), Gen: gen, OK: true}
	var why []string
	if !st.Ready {
		why = append(why, "not ready")
	}
	if !st.DigestsAgree {
		why = append(why, "digests disagree")
	}
	for _, t := range st.Targets {
		ts.Writes += t.TotalWrites
		switch {
		case t.LastError != "":
			why = append(why, t.Name+": "+t.LastError)
		case !t.Primary:
			why = append(why, t.Name+": not primary")
		case t.Digest == "":
			why = append(why, t.Name+": no digest")
		}
	}
	if len(why) > 0 {
		ts.OK, ts.Why = false, strings.Join(why, "; ")
	}
	return ts
}

func (r *runner) pollRing(ctx context.Context) {
	tk := time.NewTicker(50 * time.Millisecond)
	defer tk.Stop()
	for {
		st, gen, ok := r.status(ctx)
		if ok {
			ts := r.targetsOf(st, gen)
			r.rmu.Lock()
			n := len(r.tstate)
			if n == 0 || r.tstate[n-1].OK != ts.OK || r.tstate[n-1].Gen != ts.Gen || r.tstate[n-1].Writes != ts.Writes {
				r.tstate = append(r.tstate, ts)
				r.rmu.Unlock()
				if n > 0 && r.tstate[n-1].OK != ts.OK {
					if ts.OK {
						r.progress("  targets programmed again (%d writes so far)", ts.Writes)
					} else {
						r.progress("  targets not programmed: %s", ts.Why)
					}
				}
			} else {
				r.rmu.Unlock()
			}
		}
		if rs, found := r.ringOf(st); ok && found {
			r.rmu.Lock()
			rs.Step = r.step
			if n := len(r.rings); n == 0 || !r.rings[n-1].sameAs(rs) {
				r.rings = append(r.rings, rs)
				r.rmu.Unlock()
				if len(r.rings) > 1 {
					r.progress("  ring changed: %s", r.ringLine(rs, true))
				}
			} else {
				r.rmu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

func (r *runner) ringLine(rs RingState, ok bool) string {
	if !ok {
		return "no status"
	}
	var parts []string
	for _, n := range r.sc.BackendNames() {
		v, ok := rs.Backends[n]
		if !ok {
			continue
		}
		h := ""
		if !v.Healthy {
			h = " unhealthy"
		}
		if v.Draining {
			h += " draining"
		}
		w := ""
		if r.sc.Weighted() {
			w = fmt.Sprintf(" w%d", v.Weight)
		}
		parts = append(parts, fmt.Sprintf("%s %.1f%%%s%s", n, 100*v.Share, w, h))
	}
	return fmt.Sprintf("%s (%s %s)", strings.Join(parts, ", "), rs.Decision, rs.Rule)
}

// inject applies one fault.
func (r *runner) inject(ctx context.Context, step int, f Fault) {
	ev := FaultEvent{Step: step, T: r.tr.since(), Fault: f.String(), Kind: f.Kind(), What: f.Restart + f.Kill + f.Block + f.Detach, Backend: f.Backend()}
	start := time.Now()
	var err error
	b := r.backends[f.Backend()]
	switch f.Kind() {
	case "fail":
		b.setStatus(503)
	case "down":
		b.stop()
	case "recover":
		b.setStatus(200)
		if b.isDown() {
			err = b.start()
		}
	case "weight":
		ev.To = f.Weight.To
		b.setWeight(f.Weight.To)
	case "remove":
		r.cfgMu.Lock()
		r.removed[f.Remove] = true
		err = r.writeConfig()
		r.cfgMu.Unlock()
		if err == nil {
			err = r.reload(ctx, f.Remove)
		}
	case "restart":
		switch f.Restart {
		case "controller":
			old := r.controllerPID()
			r.stopController()
			err = r.startController(ctx)
			ev.Took = time.Since(start)
			ev.Note = fmt.Sprintf("controller stopped and started again in %s (read back, then pushed the difference)", ev.Took.Round(time.Millisecond))
			if old != 0 {
				ev.Note = fmt.Sprintf("lbc run (pid %d) stopped with SIGTERM, started again (pid %d) in %s (read back, then pushed the difference)", old, r.controllerPID(), ev.Took.Round(time.Millisecond))
			}
		case "switch":
			if !r.env.HasSwitch() {
				ev.Note = fmt.Sprintf("skipped: %v (the %s topology runs the XDP datapath alone)", ErrNoSwitch, r.env.Name())
				break
			}
			r.stopController()
			err = r.env.RestartSwitch(ctx)
			if err == nil {
				err = r.startController(ctx)
			}
			ev.Took = time.Since(start)
			if err == nil {
				ev.Note = fmt.Sprintf("switch restarted empty; the controller reconnected and pushed every table; %s in all", ev.Took.Round(time.Millisecond))
			}
		}
	case "kill", "block", "detach":
		err = r.disturb(ctx, f, &ev, start)
	}
	if err != nil {
		ev.Err = err.Error()
	}
	r.rmu.Lock()
	r.faults = append(r.faults, ev)
	if ev.Note != "" {
		r.notes[step] = append(r.notes[step], ev.Fault+": "+ev.Note)
	}
	r.rmu.Unlock()
	switch {
	case ev.Err != "":
		r.progress("  fault %s: ERROR %s", ev.Fault, ev.Err)
	case ev.Note != "":
		r.progress("  fault %s: %s", ev.Fault, ev.Note)
	default:
		r.progress("  fault %s", ev.Fault)
	}
}

// disturb applies a kill, block or detach fault and sets ev.End when it
// is over; the controller is left running (or started again) to recover
// by itself.
func (r *runner) disturb(ctx context.Context, f Fault, ev *FaultEvent, start time.Time) error {
	wait := func(d time.Duration) error {
		t := time.NewTimer(d) // the fault's stated duration, not a synchronisation
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
	skip := func() {
		ev.Note = fmt.Sprintf("skipped: %v (the %s topology runs the XDP datapath alone)", ErrNoSwitch, r.env.Name())
	}
	var err error
	switch {
	case f.Kill == "switch":
		if !r.env.HasSwitch() {
			skip()
			return nil
		}
		err = r.env.KillSwitch(ctx)
		ev.End = r.tr.since()
		ev.Took = time.Since(start)
		ev.Note = fmt.Sprintf("simple_switch_grpc killed (SIGKILL) and started again empty; it accepted P4Runtime connections %s later; the controller was left running", ev.Took.Round(time.Millisecond))
	case f.Kill == "controller":
		c := r.takeController()
		if c == nil {
			return errors.New("no controller running to kill")
		}
		k, kerr := c.Kill()
		ev.Killed = &k
		if kerr != nil {
			return kerr
		}
		if err = wait(f.For.D()); err != nil {
			return err
		}
		ev.End = r.tr.since()
		err = r.startController(ctx)
		ev.Took = time.Since(start)
		k.NewPID = r.controllerPID()
		ev.Killed = &k
		ev.Note = killNote(k, f.For.D(), ev.Took)
	case f.Block != "":
		if !r.env.HasSwitch() {
			skip()
			return nil
		}
		if err = r.env.BlockP4Runtime(true); err != nil {
			return err
		}
		werr := wait(f.For.D())
		err = r.env.BlockP4Runtime(false)
		ev.End = r.tr.since()
		ev.Took = time.Since(start)
		ev.Note = fmt.Sprintf("the controller's P4Runtime connection was cut off (dropped, through the testbench's proxy) for %s", ev.Took.Round(time.Millisecond))
		if werr != nil {
			return werr
		}
	case f.Detach == "xdp":
		err = r.env.DetachXDP(ctx)
		ev.End = r.tr.since()
		ev.Note = "XDP program detached by another tool (ip link set dev IF xdp off)"
		if err != nil && strings.Contains(err.Error(), "Can't replace active BPF XDP link") {
			ev.Note = fmt.Sprintf("refused by the kernel, nothing detached: lbc attaches through a BPF link, which netlink cannot replace or remove (%v)", err)
			err = nil
		}
	case f.Detach == "link":
		err = r.env.DetachLink()
		ev.End = r.tr.since()
		ev.Note = "the BPF link that keeps the XDP program attached detached by another tool (bpftool link detach): the program is off the interface; the controller's verify attaches it again"
	case f.Detach == "pins":
		err = r.env.RemovePins()
		ev.End = r.tr.since()
		ev.Note = "the XDP datapath's pins (maps, link) removed from bpffs by another tool: the program is detached; the running controller holds the maps open, and its verify attaches the program again"
	}
	return err
}
