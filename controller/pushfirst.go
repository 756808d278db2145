package controller

import (
	"context"
	"sync"
)

// pushFirst is a target's lock. Pushes (and read-backs, the loop's work)
// take it with Lock; a counter read takes it with LockAfterPushes, which
// also waits while a push waits, so that a push queued behind one piece
// of a counter read goes before the next piece (issue 31, item 2: a
// switch's counters are tens of thousands of cells, and a push waited
// behind a whole read of them).
type pushFirst struct {
	mu     sync.Mutex
	held   bool
	pushes int           // Lock callers waiting
	free   chan struct{} // closed at the next Unlock; nil: nobody waits
	// queued, when set (tests), receives a value each time a push
	// starts waiting for the lock.
	queued chan<- struct{}
}

// wait returns the channel that the next Unlock closes; p.mu is held.
func (p *pushFirst) wait() <-chan struct{} {
	if p.free == nil {
		p.free = make(chan struct{})
	}
	return p.free
}

// Lock takes the lock before any LockAfterPushes waiting for it.
func (p *pushFirst) Lock() {
	p.mu.Lock()
	if p.held && p.queued != nil {
		p.queued <- struct{}{}
	}
	p.pushes++
	for p.held {
		ch := p.wait()
		p.mu.Unlock()
		<-ch
		p.mu.Lock()
	}
	p.pushes--
	p.held = true
	p.mu.Unlock()
}

// LockAfterPushes takes the lock once it is free and no Lock waits for
// it, or fails when ctx ends first.
func (p *pushFirst) LockAfterPushes(ctx context.Context) error {
	p.mu.Lock()
	for p.held || p.pushes > 0 {
		ch := p.wait()
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		p.mu.Lock()
	}
	p.held = true
	p.mu.Unlock()
	return nil
}

// Unlock releases the lock and wakes every waiter; a waiting Lock takes
// it, a LockAfterPushes waits on.
func (p *pushFirst) Unlock() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.held {
		panic("controller: Unlock of an unlocked target")
	}
	p.held = false
	if p.free != nil {
		close(p.free)
		p.free = nil
	}
}
