package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets"
)

// update recompiles from the configuration and the current health, logs
// what changed, and pushes the difference to every target. why says what
// triggered it, for the log.
func (c *Controller) update(ctx context.Context, why string) error {
	st := c.mon.State()
	now := c.now()
	prev := c.ir
	r, err := Reconcile(c.cfg, st, prev, now)
	if err != nil {
		c.log.Error("compile failed; the datapaths keep their tables", "trigger", why, "err", err)
		c.m.error("compile")
		c.publish(nil, err)
		return err
	}
	c.logEvents(r.Events)
	c.ir = r.IR
	var errs []error
	for _, ts := range c.tgts {
		if err := c.push(ctx, ts, prev, r, why); err != nil {
			errs = append(errs, err)
		}
	}
	c.commit(ctx, r)
	c.publish(r.Events, nil)
	c.announce()
	if f := c.opts.Fleet; f != nil && len(errs) == 0 {
		f.Pushed(c.ir)
	}
	if len(errs) > 0 {
		return fmt.Errorf("push: %v", errs)
	}
	return nil
}

// push brings one target to r.IR. A target that holds prev (the IR r was
// diffed against) takes r's diff; any other is diffed against what it holds.
func (c *Controller) push(ctx context.Context, ts *target, prev *compiler.IR, r *Reconciled, why string) error {
	ir := r.IR
	name := ts.t.Name()
	if ts.arb != nil {
		primary, term, lost := ts.arb.Mastership()
		if lost != nil {
			// The switch is gone (dead, hung, cut off) or has not
			// answered yet: not programmed until it is back, and then
			// read back first.
			ts.held = nil
			ts.st.Primary = false
			c.m.setPrimary(name, false)
			if !ts.lost {
				ts.lost = true
				c.m.error("connection")
				c.log.Error("lost the switch: its VIPs are not served from here until it is back; reconnecting", "target", name, "trigger", why, "err", lost)
			} else {
				c.log.Debug("still no session with the switch", "target", name, "trigger", why, "err", lost)
			}
			ts.st.LastError = fmt.Sprintf("no session with the switch: %v", lost)
			return fmt.Errorf("target %s: %w", name, lost)
		}
		switch {
		case ts.lost:
			ts.lost = false
			c.log.Warn("the switch answers again: reading it back", "target", name, "primary", primary)
			ts.held = nil
		case primary != ts.st.Primary:
			c.log.Warn("mastership changed", "target", name, "primary", primary)
			ts.held = nil // the other controller may have written meanwhile
		case term != ts.term:
			c.log.Warn("new session with the switch (it restarted, or the connection was lost): reading it back", "target", name)
			ts.held = nil
		}
		ts.term = term
		ts.st.Primary = primary
		c.m.setPrimary(name, primary)
		if !primary {
			ts.st.LastError = "" // backup: the primary writes
			return nil           // backup: state stays warm, nothing is written
		}
	}
	// What follows is cut short if the session with the switch ends
	// meanwhile (its heartbeat's verdict): a switch that fell silent would
	// hold a Write or a read in flight until the connection closed.
	wctx, end := ts.whileSession(ctx)
	defer end()
	if ts.held == nil {
		loaded, err := ts.ensureProgram(wctx)
		if err != nil && wctx.Err() != nil {
			return c.cutShort(ctx, ts, "program", err)
		}
		if err != nil {
			msg := fmt.Sprintf("program: %v", err)
			if ts.st.LastError != msg {
				c.m.error("program")
				c.log.Error("the target runs no program of lbc's and cannot be given it", "target", name, "err", err)
			}
			ts.st.LastError = msg
			return fmt.Errorf("target %s: %w", name, err)
		}
		if loaded {
			c.log.Warn("the target had lost lbc's program (a switch restarted empty, an XDP program detached): gave it again; reading it back and writing what it lacks", "target", name, "trigger", why)
			// What a diff does not carry (tunnel sources, MTU) is gone
			// too: commit it again after this push.
			c.committed = nil
		}
		held, err := ts.read(wctx)
		if err != nil && wctx.Err() != nil {
			return c.cutShort(ctx, ts, "read back", err)
		}
		if err != nil {
			ts.st.LastError = fmt.Sprintf("read back: %v", err)
			c.m.error("read")
			c.log.Error("cannot read target back", "target", name, "err", err)
			return fmt.Errorf("target %s: read back: %w", name, err)
		}
		ts.held, ts.of = held, nil
	}
	d, want := r.Diff, ir
	if ts.held != prev || prev == nil {
		// The target does not hold what r was diffed against (a push to
		// it failed part-way, it was read back, its rings were placed
		// otherwise, it is another target): diff against what it holds,
		// with the rings placed so that the half it serves is never
		// written (issue 25, item 4).
		want = placeRings(ts.held, ir)
		d = targets.DiffFor(ts.t, ts.held, want)
	} else if _, ok := ts.t.(targets.RingRoom); ok {
		d = targets.DiffFor(ts.t, ts.held, want) // in waves its ring table holds
	}
	if d.Empty() {
		ts.held, ts.of = want, ir // the same tables; ir also has the latest names
		ts.st.LastError = ""
		return nil
	}
	if err := checkTransition(ts, d); err != nil {
		// Nothing is written: a push that would fail on a full table
		// part-way is refused whole (issue 31).
		if ts.st.LastError != err.Error() {
			c.m.error("capacity")
			c.log.Error("push refused before writing: the target's tables cannot hold the change while it is made", "target", name, "trigger", why, "err", err)
		}
		ts.st.LastError = err.Error()
		return fmt.Errorf("target %s: %w", name, err)
	}
	start := time.Now()
	stats, err := ts.apply(wctx, d)
	took := time.Since(start)
	c.m.push(name, d, took, err, err != nil && wctx.Err() != nil)
	ts.st.Pushes++
	ts.st.LastPush = c.clock.Now()
	ts.st.LastPushWrites = len(d.Changes)
	ts.st.LastPushSeconds = took.Seconds()
	ts.st.TotalWrites += uint64(len(d.Changes))
	if err != nil && wctx.Err() != nil {
		// What was applied stays applied: it is read back first.
		return c.cutShort(ctx, ts, "push", err)
	}
	if err != nil {
		// What was applied stays applied: read back before the next diff.
		ts.held = nil
		ts.st.LastError = err.Error()
		c.log.Error("push failed; will retry", "target", name, "trigger", why, "changes", len(d.Changes), "err", err)
		return fmt.Errorf("target %s: %w", name, err)
	}
	ts.held, ts.of = want, ir
	ts.st.LastError = ""
	ts.st.VerifiedDigest = "" // the last read-back predates this push
	c.log.Info("pushed", "target", name, "trigger", why, "changes", len(d.Changes), "batches", stats.Batches, "took", took.Round(time.Microsecond).String(), "summary", oneLine(d.Summary()))
	return nil
}

// commit hands the full IR to targets that store names and informational
// fields, when any of those changed.
func (c *Controller) commit(ctx context.Context, r *Reconciled) {
	if sameInfo(c.committed, r.IR) {
		return
	}
	ok := true
	for _, ts := range c.tgts {
		cm, is := ts.t.(Committer)
		if !is || ts.held == nil || ts.of != r.IR {
			continue
		}
		ts.mu.Lock()
		err := cm.Commit(r.IR)
		ts.mu.Unlock()
		if err != nil {
			ok = false
			c.m.error("commit")
			c.log.Error("cannot store names on target", "target", ts.t.Name(), "err", err)
		}
	}
	if ok {
		c.committed = r.IR
	}
}

// sameInfo compares the fields Commit stores beyond the datapath's own.
func sameInfo(a, b *compiler.IR) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.NextServiceID != b.NextServiceID || a.NextBackendID != b.NextBackendID || len(a.Services) != len(b.Services) || len(a.Backends) != len(b.Backends) || a.TunnelSource4 != b.TunnelSource4 || a.TunnelSource6 != b.TunnelSource6 || a.MTU != b.MTU {
		return false
	}
	for i := range a.Services {
		x, y := &a.Services[i], &b.Services[i]
		if x.ID != y.ID || x.Name != y.Name || x.Decision != y.Decision || x.Rule != y.Rule || x.FailoverSide != y.FailoverSide || !slices.Equal(x.Eligible, y.Eligible) {
			return false
		}
	}
	for i := range a.Backends {
		x, y := &a.Backends[i], &b.Backends[i]
		if x.ID != y.ID || x.Name != y.Name || x.Weight != y.Weight || x.Failover != y.Failover || x.Deadline != y.Deadline || x.DeadlineRule != y.DeadlineRule {
			return false
		}
	}
	return true
}

// cutShort: what (a push, a read-back, loading the program) on ts was cut
// short, either because the controller is stopping (SIGTERM: ctx ended) or
// because the session with the switch ended or changed hands meanwhile
// (whileSession). What was applied stays applied, so ts is read back
// before its next diff.
//
// Stopping, nothing failed: it is logged at INFO and not counted as an
// error; the next start reads the target back. A session that ended
// fails the target at once (/healthz 503, VIPs withdrawn) instead of
// when the connection closes; the update that follows says the switch is
// lost, and the push when it is back finishes the job. Neither can make a
// half-written ring half active: placeRings keeps the half the switch
// serves out of every diff until the flip (or changes it in one write),
// and what a push writes after a flip deletes only the half it left, which
// the push that finishes the job deletes if this one could not.
func (c *Controller) cutShort(ctx context.Context, ts *target, what string, err error) error {
	name := ts.t.Name()
	ts.held = nil
	if ctx.Err() != nil {
		c.log.Info("stopping: "+what+" cut short; the next start reads the target back", "target", name, "err", err)
		return fmt.Errorf("target %s: %s: %w", name, what, err)
	}
	ts.st.LastError = fmt.Sprintf("%s cut short: the session with the switch ended (%v)", what, err)
	c.log.Warn(what+" cut short: the session with the switch ended; the switch is read back when it answers again", "target", name, "err", err)
	c.sessionEnded(ts, what)
	return fmt.Errorf("target %s: %s cut short: the session with the switch ended: %w", name, what, err)
}

// sessionEnded counts, once, the loss of ts's session that cut work on it
// short: as kind connection, as when the next update finds it lost (the
// client may have reconnected by then, in a new term; a session that
// merely changed hands is no loss). The update that follows then says
// the switch answers again, or that it is still gone, without counting
// it twice.
func (c *Controller) sessionEnded(ts *target, what string) {
	if ts.arb == nil || ts.lost {
		return
	}
	_, term, lost := ts.arb.Mastership()
	if lost == nil && term == ts.term {
		return
	}
	ts.lost = true
	ts.st.Primary = false
	c.m.setPrimary(ts.t.Name(), false)
	c.m.error("connection")
	c.log.Error("lost the switch: its VIPs are not served from here until it is back; reconnecting", "target", ts.t.Name(), "during", what, "err", lost)
}

// verify reads every target back and compares its digest with what the
// controller believes it holds. It reports whether a target drifted (its
// view is then replaced by what it holds, so the next push repairs it).
func (c *Controller) verify(ctx context.Context) bool {
	drifted := false
	for _, ts := range c.tgts {
		if ts.held == nil || (ts.arb != nil && !ts.st.Primary) {
			continue
		}
		rctx, end := ts.whileSession(ctx)
		got, err := ts.read(rctx)
		moved := end() && err != nil
		if err != nil && ctx.Err() != nil {
			// The controller is stopping (SIGTERM) and cut the read
			// short: nothing failed, and nothing is to repair.
			return false
		}
		if err != nil && moved {
			// The session with the switch ended (or changed hands)
			// during the read, which it cut short: the update that
			// follows says so, and reads the switch back once it is
			// back.
			drifted = true
			ts.held = nil
			ts.st.LastError = fmt.Sprintf("read back cut short: the session with the switch ended (%v)", err)
			c.sessionEnded(ts, "verify")
			continue
		}
		if err != nil {
			c.m.error("read")
			c.log.Error("verify: cannot read target back", "target", ts.t.Name(), "err", err)
			// A datapath that cannot be read back may be gone: it is
			// failing (healthz, withdrawal) until a read or push works.
			ts.st.LastError = fmt.Sprintf("read back: %v", err)
			drifted = true
			ts.held = nil
			continue
		}
		want, have := c.digest(ts.held), Digest(got)
		ts.st.VerifiedDigest = have
		ts.st.VerifiedAt = c.clock.Now()
		if want != have {
			drifted = true
			c.m.error("drift")
			c.log.Error("target drifted from what was pushed; repairing", "target", ts.t.Name(), "want", want, "have", have)
			ts.held, ts.of = got, nil
		}
	}
	c.publish(nil, nil)
	c.announce()
	return drifted
}

func (c *Controller) logEvents(evs []Event) {
	for _, e := range evs {
		c.m.event(e)
		c.recordEvent(e)
		attrs := []any{"service", e.Service, "event", e.Kind}
		if e.Backend != "" {
			attrs = append(attrs, "backend", e.Backend)
		}
		attrs = append(attrs, "detail", e.Detail)
		if e.Deadline != 0 {
			attrs = append(attrs, "until", wallTime(e.Deadline).Format(time.RFC3339Nano))
		}
		switch e.Kind {
		case EventFailover, EventFailback, EventEpoch, EventNoBackends:
			c.log.Warn(e.Kind, attrs...) // R-ELIG-5, R-EPOCH
		default:
			c.log.Info(e.Kind, attrs...)
		}
	}
}

func oneLine(s string) string {
	out := []byte(s)
	for i, b := range out {
		if b == '\n' {
			out[i] = ';'
		}
	}
	return string(out)
}

// checkTransition checks d against the tables of a target that knows
// their size (targets.Sized) before anything is written.
func checkTransition(ts *target, d compiler.Diff) error {
	cp, ok := capacityOf(ts)
	if !ok {
		return nil
	}
	return compiler.CheckTransition(ts.held, d, cp)
}

// capacityOf is the size of ts's tables, when it knows them (a program
// without lb.p4's tables fails elsewhere, by name).
func capacityOf(ts *target) (compiler.Capacity, bool) {
	sz, ok := ts.t.(targets.Sized)
	if !ok {
		return compiler.Capacity{}, false
	}
	cp, err := sz.Capacity()
	return cp, err == nil
}

// fits reports why cfg cannot be taken: a target whose tables do not hold
// it (compiler.CheckCapacity, what lbc validate --target checks), or whose
// tables cannot hold the change from what it holds while it is made
// (compiler.CheckTransition). Nothing is written.
func (c *Controller) fits(cfg *compiler.Config) error {
	var r *Reconciled
	for _, ts := range c.tgts {
		cp, ok := capacityOf(ts)
		if !ok {
			continue
		}
		if ps := compiler.CheckCapacity(cfg, cp); len(ps) > 0 {
			return errors.New(ps.Report("does not fit target " + ts.t.Name()))
		}
		if ts.held == nil {
			continue // read back first; the push checks the change then
		}
		if r == nil {
			// Before the health the configuration needs is known (a
			// weight not probed yet), nothing compiles: the push checks
			// the change then, before it writes.
			var err error
			if r, err = Reconcile(cfg, c.mon.State(), c.ir, c.now()); err != nil {
				return nil
			}
		}
		want := placeRings(ts.held, r.IR)
		if err := compiler.CheckTransition(ts.held, targets.DiffFor(ts.t, ts.held, want), cp); err != nil {
			return err
		}
	}
	return nil
}
