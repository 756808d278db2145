package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/targets"
)

// blockingReadTarget's Read (or Apply, with onApply), once armed, says so on reading and waits for
// its context to end, as a switch's read-back cut short by a stop.
type blockingReadTarget struct {
	*lockedSim
	armed   chan struct{} // closed: Read (or Apply) blocks
	reading chan struct{}
	onApply bool
}

func (b *blockingReadTarget) Apply(ctx context.Context, d compiler.Diff) (targets.ApplyStats, error) {
	if !b.onApply {
		return b.lockedSim.Apply(ctx, d)
	}
	select {
	case <-b.armed:
		select {
		case b.reading <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return targets.ApplyStats{}, ctx.Err()
	default:
		return b.lockedSim.Apply(ctx, d)
	}
}

func (b *blockingReadTarget) Read(ctx context.Context) (*compiler.IR, error) {
	select {
	case <-b.armed:
		if b.onApply {
			return b.lockedSim.Read(ctx)
		}
		select {
		case b.reading <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return nil, ctx.Err()
	default:
		return b.lockedSim.Read(ctx)
	}
}

// TestStopDuringVerifyLogsNoError (issue 25, item 7: found by the soak):
// a stop (SIGTERM) while the periodic verify read a target back cut the
// read short, and lbc logged two false ERROR lines, "verify: cannot read
// target back … context canceled" and, from the repair push that followed,
// "cannot read target back" (on a switch: "the target runs no program of
// lbc's and cannot be given it"). A read or a push cut short by the stop
// is no failure: no WARN or ERROR, no error counted.
func TestStopDuringVerifyLogsNoError(t *testing.T) {
	for _, c := range []struct {
		name    string
		onApply bool
	}{{"verify's read-back", false}, {"a push", true}} {
		t.Run(c.name, func(t *testing.T) {
			bt := &blockingReadTarget{lockedSim: newLockedSim("sim"), armed: make(chan struct{}), reading: make(chan struct{}, 1), onApply: c.onApply}
			r := startRigOpts(t, rigOptions{config: func(port int) string { return seedConfig(port, false, 0, 1, 1) }, sims: []*lockedSim{bt.lockedSim}}, func(o *controller.Options) {
				o.Targets = []targets.Target{bt}
			})
			r.probe(1)
			close(bt.armed)
			if c.onApply {
				r.setHealthy("vm-a1", false) // a change to push
				r.c.Monitor().ProbeAll(r.ctx)
				go func() { _ = r.c.Sync(r.ctx) }()
			} else {
				go func() { _ = r.c.Verify(r.ctx) }()
			}
			select {
			case <-bt.reading:
			case <-time.After(waitBudget(t)):
				t.Fatalf("the target was not read or written\n%s", r.logs)
			}
			r.stop()
			for _, l := range strings.Split(r.logs.String(), "\n") {
				if strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") && !strings.Contains(l, "health probe failed") && !strings.Contains(l, "became unhealthy") {
					t.Errorf("logged at stop: %s", l)
				}
			}
		})
	}
}
