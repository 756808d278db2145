package sim

import (
	"time"

	"github.com/lbc-dev/lbc/internal/tick"
)

// Deadliner is implemented by a geometry whose target keeps backend
// deadlines in a clock of its own (coarser ticks, a counter that wraps):
// the datapath asks it whether a deadline (compile clock, non-zero) has
// passed at now instead of comparing now >= deadline (design decision 8).
type Deadliner interface {
	DeadlinePassed(deadline, now time.Duration) bool
}

// deadlinePassed reports whether a backend's deadline (0 = none) has
// passed at now, on the geometry's clock.
func (d *Datapath) deadlinePassed(deadline, now time.Duration) bool {
	if deadline == 0 {
		return false
	}
	if g, ok := d.ct.(Deadliner); ok {
		return g.DeadlinePassed(deadline, now)
	}
	return now >= deadline
}

// DeadlinePassed implements Deadliner: lb.p4 holds the deadline in
// microseconds of ingress_global_timestamp, rounded up, and compares
// now >= deadline.
func (r *Register) DeadlinePassed(deadline, now time.Duration) bool {
	dl := (deadline + tick.BMv2 - 1) / tick.BMv2
	return now/tick.BMv2 >= dl
}

// DeadlinePassed implements Deadliner: p4/tna/lb.p4 holds the tick of the
// deadline, rounded up, and compares modulo 2^32 (tick.TNAPassed).
func (t *TNA) DeadlinePassed(deadline, now time.Duration) bool {
	dl, err := tick.TNADeadline(t.Timestamp(deadline), 0)
	if err != nil {
		return now >= deadline // cannot happen: 0 is inside the window
	}
	return tick.TNAPassed(t.Tick(now), dl)
}
