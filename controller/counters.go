package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// DefaultCounterInterval is Options.CounterInterval when 0.
const DefaultCounterInterval = 5 * time.Second

// counterLogEvery bounds how often a target whose counters keep failing
// is logged: its first failure, then one line a minute with the count.
const counterLogEvery = time.Minute

// targetCounters is one target's counter snapshot: the last counters read
// and when, and how the last attempt went. Scrapes and /v1/status serve
// it; they never read the datapath themselves (issue 31, item 2).
type targetCounters struct {
	Name     string
	Counters targets.Counters
	// At is when the last read that worked ended; zero: none yet.
	At time.Time
	// Age is how old Counters was when the snapshot was taken for a
	// reader (0 when At is zero).
	Age time.Duration
	// Err is why the last attempt failed; nil: it worked.
	Err error
}

// counterLog decides which failed reads of one target are logged: the
// first of a run of failures, then at most one per counterLogEvery (with
// how many were not logged), and the read that works again.
type counterLog struct {
	failing    bool
	lastLogged time.Time
	unlogged   int // failures since the last line
}

// failed reports whether the failure at now is logged, and how many
// failures before it were not.
func (l *counterLog) failed(now time.Time) (log bool, unlogged int) {
	if l.failing && now.Sub(l.lastLogged) < counterLogEvery {
		l.unlogged++
		return false, 0
	}
	n := l.unlogged
	l.failing, l.lastLogged, l.unlogged = true, now, 0
	return true, n
}

// worked reports whether a read that works at last is logged (it ends a
// run of failures), and how many failures were not logged.
func (l *counterLog) worked() (log bool, unlogged int) {
	log, unlogged = l.failing, l.unlogged
	*l = counterLog{}
	return log, unlogged
}

// counterTimeout bounds one read of a target's counters: a switch that
// answers too slowly is logged, not waited for past the next read.
func counterTimeout(interval time.Duration) time.Duration {
	return max(10*time.Second, 2*interval)
}

// readCounters runs until ctx ends: a read of every target's counters at
// once, then one every interval.
func (c *Controller) readCounters(ctx context.Context, interval time.Duration) {
	for {
		c.ReadCounters(ctx)
		t := c.clock.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// ReadCounters reads every target's counters now into the snapshot that
// /metrics and /v1/status serve (lbc run does every --counter-interval).
func (c *Controller) ReadCounters(ctx context.Context) {
	c.cread.Lock()
	defer c.cread.Unlock()
	c.mu.Lock()
	ir := c.snap.ir
	c.mu.Unlock()
	for i, ts := range c.tgts {
		if _, ok := ts.t.(targets.CounterTarget); !ok {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, counterTimeout(c.opts.CounterInterval))
		x, err := ts.counters(rctx, ir)
		cancel()
		if err != nil && ctx.Err() != nil {
			return // stopping: nothing failed
		}
		now := c.clock.Now()
		c.cmu.Lock()
		s := &c.csnap[i]
		s.Err = err
		if err == nil {
			s.Counters, s.At = x, now
		}
		c.cmu.Unlock()
		c.logCounterRead(ts, &c.clogs[i], now, err)
	}
}

func (c *Controller) logCounterRead(ts *target, l *counterLog, now time.Time, err error) {
	name := ts.t.Name()
	if err == nil {
		if log, n := l.worked(); log {
			c.log.Info("counters read again", "target", name, "failed_reads", n+1)
		}
		return
	}
	c.m.error("counters")
	if log, n := l.failed(now); log {
		// One line a minute at most: a switch that stays unreadable must
		// not flood the log at every read.
		c.log.Warn("cannot read the target's counters; /metrics and /v1/status serve the last ones read (lbc_datapath_counters_age_seconds)",
			"target", name, "err", err, "unlogged_failures", n, "log_every", counterLogEvery.String())
	}
}

// counterSnapshot returns every target's counter snapshot, with its age
// now. It never waits on a target.
func (c *Controller) counterSnapshot() []targetCounters {
	now := c.clock.Now()
	c.cmu.Lock()
	defer c.cmu.Unlock()
	var out []targetCounters
	for i, ts := range c.tgts {
		if _, ok := ts.t.(targets.CounterTarget); !ok {
			continue
		}
		s := c.csnap[i]
		s.Name = ts.t.Name()
		if !s.At.IsZero() {
			s.Age = max(now.Sub(s.At), 0)
		}
		out = append(out, s)
	}
	return out
}

// errNoSession: the target's session is lost; its counters are not tried.
var errNoSession = errors.New("no session with the switch")

// counters reads the datapath's counters for ir's services and backends,
// a piece at a time when it can (targets.CounterStepper), taking the
// lock for each piece after any push that waits for it.
func (ts *target) counters(ctx context.Context, ir *compiler.IR) (targets.Counters, error) {
	ct := ts.t.(targets.CounterTarget)
	if ts.arb != nil {
		// A switch that is gone would hold the read until its timeout.
		if _, _, lost := ts.arb.Mastership(); lost != nil {
			return targets.Counters{}, fmt.Errorf("%w: %w", errNoSession, lost)
		}
		// And one that falls silent during the read: the session's end
		// cuts it short, so a piece in flight does not hold the lock.
		var end func() bool
		ctx, end = ts.whileSessionOf(ctx, false)
		defer end()
	}
	step := func(f func() error) error {
		if err := ts.mu.LockAfterPushes(ctx); err != nil {
			return fmt.Errorf("waiting for the target: %w", err)
		}
		defer ts.mu.Unlock()
		return f()
	}
	cs, ok := ts.t.(targets.CounterStepper)
	if !ok {
		var x targets.Counters
		err := step(func() (err error) { x, err = ct.Counters(ctx); return err })
		return x, err
	}
	r := cs.CounterRead(ir)
	for pieces := 1; ; pieces++ {
		var done bool
		if err := step(func() (err error) { done, err = r.Step(ctx); return err }); err != nil {
			return targets.Counters{}, fmt.Errorf("piece %d of the read: %w", pieces, err)
		}
		if done {
			return r.Counters(), nil
		}
	}
}
