package controller

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller/health"
	"github.com/lbc-dev/lbc/targets"
)

// Options configure a Controller. Zero values take the defaults.
type Options struct {
	// ConfigPath is the lb.yaml to load, reload on Reload and watch.
	ConfigPath string
	// ConfigData, if set, is the configuration itself (lbc run without
	// -c: the embedded example), named ConfigPath in logs and problems;
	// there is then no file to read, watch or reload.
	ConfigData []byte
	// Targets are the datapaths to keep programmed, all with the same IR
	// (scale-out behind ECMP). The first one is the reference: on start
	// its tables give IDs and epochs to the first compile.
	Targets []targets.Target
	Logger  *slog.Logger
	Clock   health.Clock
	// Prober runs health probes; nil probes the network.
	Prober health.Prober
	// MaxProbesInFlight and Jitter tune the health monitor.
	MaxProbesInFlight int
	Jitter            float64
	// Debounce gathers health changes into one recompile: the first change
	// starts the window, every change in it is in the same push (default
	// 100 ms; negative: none).
	Debounce time.Duration
	// WatchInterval is how often the configuration file is checked for
	// changes (default 2 s; negative: never; SIGHUP still reloads).
	WatchInterval time.Duration
	// RetryInterval is the wait before retrying a failed push (default 5 s).
	RetryInterval time.Duration
	// VerifyInterval is how often every target is read back and its digest
	// compared with what was pushed; a target that drifted is repaired
	// (default 60 s; negative: never).
	VerifyInterval time.Duration
	// CounterInterval is how often the datapaths' counters are read into
	// the snapshot that /metrics and /v1/status serve (default
	// DefaultCounterInterval; negative: never). A scrape never reads a
	// datapath: it would wait for the target behind a push, and a push
	// behind it.
	CounterInterval time.Duration
	// Metrics receives the controller's metrics; nil: none.
	Metrics *Metrics
	// Announcer, if set, is told after every update which VIPs this node
	// can serve (BGP: announce or withdraw them).
	Announcer Announcer
	// Fleet, if set, is told after every update which IR the targets
	// were pushed, and shares this node's conntrack exceptions with the
	// fleet's other nodes (R-FLEET).
	Fleet FleetSharer
}

// Controller keeps datapaths programmed as health, weights and the
// configuration change.
type Controller struct {
	opts  Options
	log   *slog.Logger
	clock health.Clock
	mon   *health.Monitor
	m     *Metrics

	reqs       chan request
	mastership chan struct{}
	ready      chan struct{}

	// Owned by the Run goroutine.
	cfg       *compiler.Config
	cfgSum    [32]byte // of the last file tried, good or bad
	watchErr  string   // why the file could not be read at the last watch tick
	rejected  error    // why the last file tried was rejected; nil: it runs
	ir        *compiler.IR
	tgts      []*target
	committed *compiler.IR

	mu   sync.Mutex // guards snap
	snap snapshot

	dmu     sync.Mutex // guards digests
	digests map[*compiler.IR]string

	cread sync.Mutex // one ReadCounters at a time
	cmu   sync.Mutex // guards csnap
	csnap []targetCounters
	clogs []counterLog // per target; ReadCounters's, under cread
}

// target is the controller's view of one datapath. Calls to the datapath
// go through mu: adapters need not be safe for concurrent use, and the
// counter reader reads while the loop pushes (a push goes first).
type target struct {
	mu   pushFirst
	t    targets.Target
	held *compiler.IR // what it holds; nil: unknown, read it back first
	// of is the compiled IR that held realises: held itself, or held with
	// its rings placed for this target (placeRings); nil when held was
	// read back.
	of   *compiler.IR
	arb  Arbitrated // nil unless shared with other controllers
	term uint64     // arb's mastership term that held belongs to
	lost bool       // arb's session is lost (logged and counted once)
	st   TargetStatus
}

// Arbitrated is a target that several controllers share, such as a switch
// reached over P4Runtime with election IDs: only the primary writes. The
// backup keeps computing (its state stays warm) and, when it becomes
// primary, reads the target back and writes only the difference.
//
// A switch reached over P4Runtime is Arbitrated even when one controller
// writes it: its session tells when the switch goes away (lost) and when
// it comes back (a new term), so that the controller stops claiming the
// datapath is programmed at once, and reads it back (and pushes the
// pipeline again: ProgramKeeper) when it returns.
type Arbitrated interface {
	// Mastership reports whether this controller may write now; term,
	// which changes each time it becomes primary anew (what the target
	// holds may then differ from what this controller wrote: another
	// controller wrote, or the switch restarted empty); and lost, why no
	// session with the target is up (nil while one is, as primary or
	// backup).
	Mastership() (primary bool, term uint64, lost error)
	// MastershipChanges is signalled when Mastership may have changed.
	MastershipChanges() <-chan struct{}
}

// ProgramKeeper is a target that can lose its program, such as a switch
// that restarts without its P4 pipeline. Before a target whose contents
// are unknown is read back, the controller asks it to load its program
// again if it is gone; its tables are then empty, and the controller
// writes them all.
type ProgramKeeper interface {
	// EnsureProgram loads the program when the target runs none (or
	// another), and reports whether it did.
	EnsureProgram(ctx context.Context) (loaded bool, err error)
}

// Committer is a target that stores what a diff does not carry (names,
// informational fields, ID allocators) after an Apply, so that a restarted
// controller reads back a complete IR. The XDP target is one.
type Committer interface {
	Commit(ir *compiler.IR) error
}

type request struct {
	kind  string // "reload", "sync"
	force bool   // reload even when the file is unchanged
	reply chan error
}

// New returns a controller; Run starts it.
func New(opts Options) (*Controller, error) {
	if opts.ConfigPath == "" {
		return nil, errors.New("controller: no configuration file")
	}
	if len(opts.Targets) == 0 {
		return nil, errors.New("controller: no target to program")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Clock == nil {
		opts.Clock = health.RealClock{}
	}
	if opts.Debounce == 0 {
		opts.Debounce = 100 * time.Millisecond
	}
	if opts.WatchInterval == 0 {
		opts.WatchInterval = 2 * time.Second
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = 5 * time.Second
	}
	if opts.VerifyInterval == 0 {
		opts.VerifyInterval = 60 * time.Second
	}
	if opts.CounterInterval == 0 {
		opts.CounterInterval = DefaultCounterInterval
	}
	c := &Controller{
		opts:       opts,
		log:        opts.Logger,
		clock:      opts.Clock,
		m:          opts.Metrics,
		reqs:       make(chan request),
		mastership: make(chan struct{}, 1),
		ready:      make(chan struct{}),
	}
	c.mon = health.New(health.Options{
		Clock:       opts.Clock,
		Prober:      opts.Prober,
		MaxInFlight: opts.MaxProbesInFlight,
		Jitter:      opts.Jitter,
		Logger:      opts.Logger,
		OnProbe:     c.m.observeProbe,
	})
	for _, t := range opts.Targets {
		ts := &target{t: t, st: TargetStatus{Name: t.Name(), Primary: true}}
		if a, ok := t.(Arbitrated); ok {
			ts.arb = a
			ts.st.Primary, ts.term, _ = a.Mastership()
		}
		c.tgts = append(c.tgts, ts)
		c.m.addTarget(ts.st.Name, ts.st.Primary)
	}
	c.csnap = make([]targetCounters, len(c.tgts))
	c.clogs = make([]counterLog, len(c.tgts))
	c.m.watch(func() []TargetStatus { ts, _ := c.targetStatuses(); return ts }, c.counterSnapshot)
	return c, nil
}

// Ready is closed once the first reconcile has pushed to every target.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// Monitor is the health monitor (tests probe through it).
func (c *Controller) Monitor() *health.Monitor { return c.mon }

// Run loads the configuration, reads every target back, probes every
// backend once, pushes the difference, and then keeps the targets right
// until ctx ends. It leaves the datapaths programmed when it returns; the
// caller closes the targets.
func (c *Controller) Run(ctx context.Context) error {
	cfg, sum, err := c.load()
	if err != nil {
		return err
	}
	c.cfg, c.cfgSum = cfg, sum
	for i, ts := range c.tgts {
		held, err := ts.read(ctx)
		if err != nil {
			return fmt.Errorf("target %s: read back: %w", ts.t.Name(), err)
		}
		ts.held = held
		if i == 0 && hasNames(held) {
			// The reference target's IDs, epochs and draining deadlines
			// carry over, so a restart with nothing changed writes nothing.
			c.ir = held
			c.committed = held
			ts.of = held
		}
		c.log.Info("target read back", "target", ts.t.Name(), "services", len(held.Services), "backends", len(held.Backends), "digest", c.digest(held))
	}
	c.m.setConfig(c.cfg)
	c.mon.SetTargets(ctx, health.TargetsOf(c.cfg)) // probes each backend once
	if err := c.fits(c.cfg); err != nil {
		return fmt.Errorf("%s: %w", c.opts.ConfigPath, err)
	}
	// Take each target's change signal before the first update reads
	// Primary, so that a change in between is not lost.
	changes := make([]<-chan struct{}, len(c.tgts))
	for i, ts := range c.tgts {
		if ts.arb != nil {
			changes[i] = ts.arb.MastershipChanges()
		}
	}
	if err := c.update(ctx, "start"); err != nil {
		return err
	}
	close(c.ready)

	monCtx, stopMon := context.WithCancel(ctx)
	monDone := make(chan struct{})
	go func() { c.mon.Run(monCtx); close(monDone) }()
	defer func() { stopMon(); <-monDone }()
	for i, ts := range c.tgts {
		if ts.arb != nil {
			go c.forwardMastership(ctx, ts.arb, changes[i])
		}
	}
	if c.opts.CounterInterval > 0 {
		cctx, stopCounters := context.WithCancel(ctx)
		countersDone := make(chan struct{})
		go func() { c.readCounters(cctx, c.opts.CounterInterval); close(countersDone) }()
		defer func() { stopCounters(); <-countersDone }()
	}
	return c.loop(ctx)
}

// forwardMastership signals c.mastership at each change of a's mastership.
// It takes the next signal before passing this one on, so no change falls
// between two signals.
func (c *Controller) forwardMastership(ctx context.Context, a Arbitrated, ch <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			ch = a.MastershipChanges()
			select {
			case c.mastership <- struct{}{}:
			default:
			}
		}
	}
}

// timer is an optional Clock timer.
type timer struct{ t health.Timer }

func (t *timer) c() <-chan time.Time {
	if t.t == nil {
		return nil
	}
	return t.t.C()
}

func (t *timer) set(clk health.Clock, d time.Duration) {
	t.stop()
	t.t = clk.NewTimer(d)
}

func (t *timer) stop() {
	if t.t != nil {
		t.t.Stop()
		t.t = nil
	}
}

func (c *Controller) loop(ctx context.Context) error {
	var debounce, drain, retry, watch, verify timer
	defer func() {
		for _, t := range []*timer{&debounce, &drain, &retry, &watch, &verify} {
			t.stop()
		}
	}()
	armDrain := func() {
		drain.stop()
		if dl, ok := NextDeadline(c.ir); ok {
			d := dl - c.now() + time.Millisecond
			drain.set(c.clock, max(d, 0))
		}
	}
	armRetry := func() {
		retry.stop()
		if c.anyFailed() {
			retry.set(c.clock, c.opts.RetryInterval)
		}
	}
	// after re-arms the timers once an update or reload ran. Its error
	// was logged and counted where it happened (update: compile, push and
	// read-back; reload: a rejected file), and shows in Status and
	// /healthz; a failed push is retried by armRetry.
	after := func(error) {
		armDrain()
		armRetry()
	}
	armDrain()
	armRetry()
	if c.opts.WatchInterval > 0 {
		watch.set(c.clock, c.opts.WatchInterval)
	}
	if c.opts.VerifyInterval > 0 {
		verify.set(c.clock, c.opts.VerifyInterval)
	}
	for {
		select {
		case <-ctx.Done():
			c.log.Info("controller stopping; the datapaths stay programmed")
			return nil
		case <-c.mon.Changes():
			if c.opts.Debounce < 0 {
				after(c.update(ctx, "health"))
			} else if debounce.t == nil {
				debounce.set(c.clock, c.opts.Debounce)
			}
		case <-debounce.c():
			debounce.t = nil
			after(c.update(ctx, "health"))
		case <-drain.c():
			drain.t = nil
			after(c.update(ctx, "draining timer"))
		case <-retry.c():
			retry.t = nil
			after(c.update(ctx, "retry"))
		case <-c.mastership:
			after(c.update(ctx, "mastership"))
		case <-watch.c():
			watch.set(c.clock, c.opts.WatchInterval)
			if c.fileChanged() {
				after(c.reload(ctx, false))
			}
		case <-verify.c():
			verify.set(c.clock, c.opts.VerifyInterval)
			if c.verify(ctx) {
				after(c.update(ctx, "repair"))
			}
		case r := <-c.reqs:
			var err error
			switch r.kind {
			case "reload":
				err = c.reload(ctx, r.force)
			case "sync":
				err = c.update(ctx, "sync")
			case "verify":
				if c.verify(ctx) {
					err = c.update(ctx, "repair")
				}
			}
			after(err)
			r.reply <- err
		}
	}
}

func (c *Controller) ask(ctx context.Context, r request) error {
	r.reply = make(chan error, 1)
	select {
	case c.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Reload re-reads the configuration file (SIGHUP). A file that fails
// validation is rejected with its problems and the running configuration
// stays.
func (c *Controller) Reload(ctx context.Context) error {
	return c.ask(ctx, request{kind: "reload", force: true})
}

// Sync recompiles from the current health and pushes now.
func (c *Controller) Sync(ctx context.Context) error { return c.ask(ctx, request{kind: "sync"}) }

// Verify reads every target back now, compares it with what was pushed,
// and repairs a target that drifted.
func (c *Controller) Verify(ctx context.Context) error { return c.ask(ctx, request{kind: "verify"}) }

func (c *Controller) now() time.Duration {
	return time.Duration(c.clock.Now().UnixNano())
}

func (c *Controller) load() (*compiler.Config, [32]byte, error) {
	data := c.opts.ConfigData
	if data == nil {
		var err error
		if data, err = os.ReadFile(c.opts.ConfigPath); err != nil {
			return nil, [32]byte{}, err
		}
	}
	dec, err := decodeConfig(c.opts.ConfigPath, data)
	if err != nil {
		return nil, sha256.Sum256(data), err
	}
	for _, w := range dec.Warnings.Summary(20) {
		c.log.Warn("configuration warning", "problem", w)
	}
	return dec.Config, sha256.Sum256(data), nil
}

// decodeConfig loads and validates a configuration, every problem in
// the error.
func decodeConfig(path string, data []byte) (*compiler.Decoded, error) {
	dec, err := compiler.Load(path, data)
	if err != nil {
		var ps compiler.Problems
		if errors.As(err, &ps) {
			return nil, errors.New(ps.Report(path))
		}
		return nil, err
	}
	return dec, nil
}

// CheckConfig reports what Run would reject in the configuration at path
// (data, when not nil, is its content): `lbc run` checks it before it
// waits for a switch, so that a file that can never work fails at once.
func CheckConfig(path string, data []byte) error {
	if data == nil {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return err
		}
	}
	_, err := decodeConfig(path, data)
	return err
}

// fileChanged reports whether the configuration file differs from the
// last one tried. A file that cannot be read (deleted, moved, no
// permission) is not a change: the running configuration stays, and the
// error is logged and counted once, shown in Status until the file can be
// read again.
func (c *Controller) fileChanged() bool {
	if c.opts.ConfigData != nil {
		return false // no file
	}
	data, err := os.ReadFile(c.opts.ConfigPath)
	if err != nil {
		if msg := err.Error(); msg != c.watchErr {
			c.watchErr = msg
			c.log.Error("cannot read the configuration file; the running configuration stays", "file", c.opts.ConfigPath, "err", msg)
			c.m.error("config-read")
			c.setReloadError(fmt.Errorf("watch: %w", err))
		}
		return false
	}
	changed := sha256.Sum256(data) != c.cfgSum
	if c.watchErr != "" {
		c.watchErr = ""
		c.log.Info("configuration file readable again", "file", c.opts.ConfigPath, "changed", changed)
		if !changed {
			c.setReloadError(c.rejected) // back to what the file's own reload said
		}
	}
	return changed
}

func (c *Controller) reload(ctx context.Context, force bool) error {
	cfg, sum, err := c.load()
	if err != nil {
		if sum != ([32]byte{}) {
			c.cfgSum = sum // do not retry the same bad file every watch tick
		}
		c.log.Error("configuration rejected; the running configuration stays", "file", c.opts.ConfigPath, "err", err.Error())
		c.m.reload("rejected")
		c.rejected = err
		c.setReloadError(err)
		return err
	}
	if sum == c.cfgSum && !force {
		return nil
	}
	if err := c.fits(cfg); err != nil {
		// Rejected as a bad file is: the running configuration stays,
		// and the datapaths keep serving it (issue 31).
		c.cfgSum = sum
		c.log.Error("configuration rejected; the running configuration stays", "file", c.opts.ConfigPath, "err", err.Error())
		c.m.reload("rejected")
		c.rejected = err
		c.setReloadError(err)
		return err
	}
	c.cfg, c.cfgSum = cfg, sum
	c.log.Info("configuration loaded", "file", c.opts.ConfigPath, "services", len(cfg.Services))
	c.m.reload("applied")
	c.rejected = nil
	c.setReloadError(nil)
	c.m.setConfig(cfg)
	c.mon.SetTargets(ctx, health.TargetsOf(cfg))
	return c.update(ctx, "reload")
}

func (c *Controller) anyFailed() bool {
	for _, ts := range c.tgts {
		if ts.st.LastError != "" {
			return true
		}
	}
	return false
}

// hasNames reports whether a read-back IR carries the names a compile
// needs to keep IDs (a target without them is rewritten on the first push).
func hasNames(ir *compiler.IR) bool {
	if ir == nil || len(ir.Services) == 0 {
		return false
	}
	for _, s := range ir.Services {
		if s.Name == "" {
			return false
		}
	}
	return true
}

func (ts *target) read(ctx context.Context) (*compiler.IR, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.t.Read(ctx)
}

// whileSession returns a context for work on ts (a read-back, a push)
// that is cancelled when its session (Arbitrated) ends or changes hands
// meanwhile: a switch cut off silently holds an RPC in flight until the
// connection closes (gRPC keepalive: ≈ 12 s), and the loop, with the
// heartbeat's verdict (/healthz, the withdrawal), would wait for it. end
// releases the context and reports whether the session moved. A target
// without sessions gets ctx itself.
func (ts *target) whileSession(ctx context.Context) (wctx context.Context, end func() (moved bool)) {
	return ts.whileSessionOf(ctx, true)
}

// whileSessionOf is whileSession; a session as backup lasts too unless
// primary is needed (reads need no mastership).
func (ts *target) whileSessionOf(ctx context.Context, needPrimary bool) (wctx context.Context, end func() (moved bool)) {
	if ts.arb == nil {
		return ctx, func() bool { return false }
	}
	wctx, cancel := context.WithCancel(ctx)
	// The signal first, then the state it guards: no change falls between.
	changes := ts.arb.MastershipChanges()
	_, term, _ := ts.arb.Mastership()
	same := func() bool {
		primary, now, lost := ts.arb.Mastership()
		return (primary || !needPrimary) && lost == nil && now == term
	}
	var moved atomic.Bool
	if !same() {
		moved.Store(true)
		cancel()
		return wctx, func() bool { return true }
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-changes:
				// Not every signal is a loss (a server may repeat its
				// arbitration answer): look.
				changes = ts.arb.MastershipChanges()
				if !same() {
					moved.Store(true)
					cancel()
					return
				}
			case <-done:
				return
			}
		}
	}()
	return wctx, func() bool {
		close(done)
		<-stopped
		cancel()
		return moved.Load()
	}
}

func (ts *target) ensureProgram(ctx context.Context) (bool, error) {
	pk, ok := ts.t.(ProgramKeeper)
	if !ok {
		return false, nil
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return pk.EnsureProgram(ctx)
}

func (ts *target) apply(ctx context.Context, d compiler.Diff) (targets.ApplyStats, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.t.Apply(ctx, d)
}
