// Package fakeclock is a manually advanced clock for deterministic tests
// of the health monitor and the controller.
package fakeclock

import (
	"sort"
	"sync"
	"time"

	"github.com/lbc-dev/lbc/controller/health"
)

// Clock starts at a fixed time and moves only on Advance.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*timer
	changed chan struct{}
}

type timer struct {
	c    *Clock
	at   time.Time
	ch   chan time.Time
	done bool
}

// New returns a clock at start.
func New(start time.Time) *Clock { return &Clock{now: start, changed: make(chan struct{})} }

// Now implements health.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer implements health.Clock.
func (c *Clock) NewTimer(d time.Duration) health.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.done = true
		t.ch <- c.now
	} else {
		c.timers = append(c.timers, t)
		c.signal()
	}
	return t
}

func (c *Clock) signal() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.done {
		return false
	}
	t.done = true
	for i, x := range t.c.timers {
		if x == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			break
		}
	}
	t.c.signal()
	return true
}

// Advance moves the clock by d and fires, in deadline order, every timer
// that is due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
	keep := c.timers[:0]
	for _, t := range c.timers {
		if !t.at.After(c.now) {
			t.done = true
			t.ch <- t.at
			continue
		}
		keep = append(keep, t)
	}
	c.timers = keep
	c.signal()
}

// Pending returns the number of timers not yet fired or stopped.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitPending blocks until at least n timers are pending or timeout passes
// (real time), and reports whether they are.
func (c *Clock) WaitPending(n int, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		c.mu.Lock()
		ok := len(c.timers) >= n
		ch := c.changed
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}
