package scenario

import (
	"bufio"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// pingServer answers every "ping" line with name, except while held:
// then it keeps the lines and answers them when released, as a
// connection does whose segments TCP resends after a black hole.
type pingServer struct {
	mu      sync.Mutex
	held    bool
	pending int
	conns   []net.Conn
	release chan struct{}
}

func startPingServer(t *testing.T, name string) (addr string, s *pingServer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s = &pingServer{release: make(chan struct{}, 1)}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go func() {
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					s.mu.Lock()
					if s.held {
						s.pending++
						s.mu.Unlock()
						continue
					}
					s.mu.Unlock()
					c.Write([]byte(name + "\n"))
				}
			}()
			go func() {
				for range s.release {
					s.mu.Lock()
					n := s.pending
					s.pending, s.held = 0, false
					s.mu.Unlock()
					c.Write([]byte(strings.Repeat(name+"\n", n)))
				}
			}()
		}
	}()
	return ln.Addr().String(), s
}

func (s *pingServer) hold() { s.mu.Lock(); s.held = true; s.mu.Unlock() }

// TestSilenceWithinTCPBackoffIsNotABreak: a kept connection whose pings
// go unanswered for less than the step's silence limit (twice its
// black-hole bound and a second: TCP's backoff after a black hole that
// long) and then answer is alive; one silent past the limit is broken,
// and the break belongs to the step its silence began in. A CI run
// counted connections broken after 3 unanswered pings (6 s) while the
// switch's black hole (4.4 s) was inside its bound and TCP was resending.
func TestSilenceWithinTCPBackoffIsNotABreak(t *testing.T) {
	for _, tc := range []struct {
		name      string
		limit     time.Duration
		heldFor   time.Duration
		wantAlive bool
	}{
		{"answers within the limit", 10 * time.Second, 8 * time.Second, true},
		{"silent past the limit", 1 * time.Second, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr, srv := startPingServer(t, "r1")
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			k := &kept{c: c, r: bufio.NewReader(c), backend: "r1"}
			tr := &traffic{start: time.Now(), kept: []*kept{k}, maxSilence: func(int) time.Duration { return tc.limit }}
			tr.ping()
			if k.why != "" {
				t.Fatalf("a connection that answers is broken: %s", k.why)
			}
			srv.hold()
			tr.setStep(2)
			if tc.heldFor > 0 {
				time.AfterFunc(tc.heldFor, func() { srv.release <- struct{}{} })
			}
			silentFrom := tr.since()
			tr.ping() // unanswered within its 2 s deadline
			tr.setStep(3)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			tr.settle(ctx)
			if tc.wantAlive {
				if k.why != "" || k.silent {
					t.Fatalf("silent %v, under the limit %v, then answered: broken %q (silent %v)", tc.heldFor, tc.limit, k.why, k.silent)
				}
				return
			}
			if k.why == "" || !strings.Contains(k.why, "no answer for") {
				t.Fatalf("silent past the limit %v: why %q, want a break", tc.limit, k.why)
			}
			if k.brokeStep != 2 || k.brokeAt < silentFrom || k.brokeAt > silentFrom+time.Second {
				t.Errorf("broke in step %d at %v, want step 2 (its silence began at %v)", k.brokeStep, k.brokeAt, silentFrom)
			}
		})
	}
}

// TestMaxSilenceFollowsBlackHoleBound: the limit is twice the step's
// black-hole bound and a second, never under minSilence.
func TestMaxSilenceFollowsBlackHoleBound(t *testing.T) {
	sc := &Scenario{Steps: []Step{
		{Expect: Expect{BlackHole: &BlackHoleExpect{Max: Duration(7 * time.Second)}}},
		{Expect: Expect{BlackHole: &BlackHoleExpect{Max: Duration(500 * time.Millisecond)}}},
		{},
	}}
	for step, want := range []time.Duration{15 * time.Second, minSilence, minSilence, minSilence} {
		if got := sc.maxSilence(step); got != want {
			t.Errorf("step %d: maxSilence %v, want %v", step, got, want)
		}
	}
}
