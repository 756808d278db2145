package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/lbc-dev/lbc/targets"
	"github.com/urfave/cli/v2"
)

// lbc run started while its switch is down (rebooting, not yet up in a
// lab, a partition) waits for it instead of exiting: it keeps trying,
// logs each attempt, answers /healthz 503 and announces nothing, and
// pushes once the switch answers. What can never work (a bad flag, a
// configuration that fails validation, a pipeline file that cannot be
// read) still fails at once.

// maxConnectWait caps the growing wait of each attempt: the log says the
// switch is still away at least this often. The wait does not delay the
// push: within an attempt the client reconnects with its own backoff
// (100 ms to 1 s), so a switch that comes up is used within about a
// second, whatever the attempt's length.
const maxConnectWait = time.Minute

// waitsForSwitch reports whether a --target KIND reaches a switch that
// lbc run waits for.
func waitsForSwitch(kind string) bool { return kind == "bmv2" || kind == "tofino" }

// switchAway reports whether a target's Open failed because the switch
// did not answer within its connect timeout (nothing listens, it is
// still starting, the path to it is down), not because of what lbc was
// given: worth another attempt.
func switchAway(ctx context.Context, err error) bool {
	return ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded)
}

// openWaiting opens a P4Runtime target, attempt after attempt while the
// switch does not answer: the first attempt waits --connect-timeout,
// each next one twice as long, up to maxConnectWait; each failed attempt
// is logged once, and its reason shown by st (/healthz). Another error,
// or ctx ending, returns.
func openWaiting(ctx context.Context, c *cli.Context, spec string, open func() (targets.Target, error), log *slog.Logger, st *startup) (targets.Target, error) {
	wait := c.Duration(connectTimeoutFlag.Name)
	start := time.Now()
	for attempt := 1; ; attempt++ {
		t, err := open()
		if err == nil {
			if attempt > 1 {
				log.Info("the switch answers: lbc run goes on", "target", spec, "attempt", attempt, "waited", time.Since(start).Round(time.Millisecond).String())
			}
			return t, nil
		}
		if !switchAway(ctx, err) {
			return nil, err
		}
		wait = min(2*wait, maxConnectWait)
		st.set(fmt.Sprintf("waiting for the switch --target %s (attempt %d, %s so far): %v", spec, attempt, time.Since(start).Round(time.Second), err))
		log.Warn("the switch does not answer; lbc run keeps trying (/healthz 503, nothing announced, nothing pushed until it answers)",
			"target", spec, "attempt", attempt, "next_wait", wait.String(), "err", err)
		if err := c.Set(connectTimeoutFlag.Name, wait.String()); err != nil {
			return nil, err
		}
	}
}

// startup answers /healthz, /v1/status and the GSLB report until the
// controller exists (lbc run waiting for a switch): 503 and why.
type startup struct {
	mu  sync.Mutex
	why string
	h   map[string]http.Handler // by path, once the controller is up
}

func newStartup() *startup {
	return &startup{why: "starting: opening the targets", h: map[string]http.Handler{}}
}

func (s *startup) set(why string) {
	s.mu.Lock()
	s.why = why
	s.mu.Unlock()
}

// serve hands path to h from now on.
func (s *startup) serve(path string, h http.Handler) {
	s.mu.Lock()
	s.h[path] = h
	s.mu.Unlock()
}

// handler serves path: h once serve gave it, else 503 and why.
func (s *startup) handler(path string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		h, why := s.h[path], s.why
		s.mu.Unlock()
		if h != nil {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, why)
	})
}
