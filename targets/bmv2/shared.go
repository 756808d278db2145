package bmv2

import (
	"context"
	"errors"

	"github.com/lbc-dev/lbc/runtime"
)

// OpenShared connects to a switch that other controllers may program too
// (two `lbc run` for high availability). Unlike Open it succeeds as a
// backup: the target then reads but does not write, and Primary and
// MastershipChanges let the controller take over when the primary goes
// (the highest election ID among connected controllers writes). The
// pipeline is pushed only by a primary; a backup reads the switch's P4Info.
func OpenShared(ctx context.Context, opts Options) (*Target, error) {
	if opts.ReadOnly {
		return Open(ctx, opts)
	}
	c, err := runtime.Dial(ctx, opts.Options)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, opts.ConnectTimeoutOrDefault())
	err = c.WaitPrimary(wctx) // waits out our own previous session (restart)
	timedOut := wctx.Err() != nil
	cancel()
	o := opts
	switch {
	case err == nil:
	case errors.Is(err, runtime.ErrNotPrimary) && !timedOut && !errors.Is(err, runtime.ErrElectionIDInUse):
		o.ReadOnly = true // backup: skip the wait and the pipeline push
	default:
		c.Close()
		return nil, err
	}
	t, err := open(ctx, c, o)
	if err != nil {
		c.Close()
		return nil, err
	}
	return t, nil
}

// Primary reports whether this controller is the switch's primary and may
// write (controller.Arbitrated).
func (t *Target) Primary() bool { return t.c.IsPrimary() }

// MastershipChanges returns a channel closed at the next arbitration
// change (controller.Arbitrated).
func (t *Target) MastershipChanges() <-chan struct{} { return t.c.Changed() }

// Mastership reports whether this controller may write, the term of its
// mastership (it changes each time it becomes primary anew: after a lost
// connection, a restarted switch or another controller's term), and,
// while no session with the switch is up, why (controller.Arbitrated).
func (t *Target) Mastership() (primary bool, term uint64, lost error) { return t.c.Session() }
