package controller

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// A push waiting for the lock takes it before a counter read that waits
// too, whichever came first; a counter read that waits gives up when its
// context ends.
func TestPushFirstOrder(t *testing.T) {
	queued := make(chan struct{}, 1)
	p := &pushFirst{queued: queued}
	if err := p.LockAfterPushes(context.Background()); err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 2)
	readWaits := make(chan struct{})
	go func() {
		close(readWaits)
		if err := p.LockAfterPushes(context.Background()); err == nil {
			order <- "read"
			p.Unlock()
		}
	}()
	<-readWaits
	go func() {
		p.Lock()
		order <- "push"
		p.Unlock()
	}()
	<-queued
	p.Unlock()
	if got := fmt.Sprint(<-order, " ", <-order); got != "push read" {
		t.Fatalf("order %q, want the push first", got)
	}

	p.Lock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.LockAfterPushes(ctx); err == nil {
		t.Fatal("LockAfterPushes took a held lock")
	}
	p.Unlock()
}

func TestCounterLog(t *testing.T) {
	var l counterLog
	t0 := time.Unix(0, 0)
	type want struct {
		log      bool
		unlogged int
	}
	for i, tc := range []struct {
		at   time.Duration
		want want
	}{
		{0, want{true, 0}},
		{10 * time.Second, want{false, 0}},
		{59 * time.Second, want{false, 0}},
		{60 * time.Second, want{true, 2}},
		{61 * time.Second, want{false, 0}},
	} {
		log, n := l.failed(t0.Add(tc.at))
		if (want{log, n}) != tc.want {
			t.Errorf("failure %d at %v: log %v unlogged %d, want %+v", i, tc.at, log, n, tc.want)
		}
	}
	if log, n := l.worked(); !log || n != 1 {
		t.Errorf("worked after failures: log %v unlogged %d, want true 1", log, n)
	}
	if log, _ := l.worked(); log {
		t.Error("a read that works after one that worked is logged")
	}
	if log, _ := l.failed(t0.Add(70 * time.Second)); !log {
		t.Error("the first failure after a read that worked is not logged")
	}
}
