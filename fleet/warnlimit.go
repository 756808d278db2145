package fleet

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// Rejections and refusals are logged at most rejectLogBurst a window;
// the rest are counted, and one line sums them up when the window ends
// (or the node stops): a flood of connections must not flood the log.
const (
	rejectLogBurst         = 5
	DefaultRejectLogWindow = 10 * time.Second
)

// warnLimiter is the rate limit of the fleet's rejection and refusal
// warnings.
type warnLimiter struct {
	log    *slog.Logger
	window time.Duration

	mu         sync.Mutex
	start      time.Time // of the current window
	logged     int       // lines written in it
	suppressed map[string]uint64
	timer      *time.Timer // sums up the window's suppressed lines at its end
}

func newWarnLimiter(log *slog.Logger, window time.Duration) *warnLimiter {
	return &warnLimiter{log: log, window: window, suppressed: map[string]uint64{}}
}

// warn logs msg with args, unless rejectLogBurst lines were logged in
// this window already; then it counts it under reason.
func (w *warnLimiter) warn(reason, msg string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if now.Sub(w.start) >= w.window {
		w.flushLocked(now)
		w.start, w.logged = now, 0
	}
	if w.logged < rejectLogBurst {
		w.logged++
		w.log.Warn(msg, args...)
		return
	}
	if len(w.suppressed) == 0 {
		w.timer = time.AfterFunc(w.start.Add(w.window).Sub(now), w.flush)
	}
	w.suppressed[reason]++
}

// flush writes the summary of the lines suppressed so far, if any.
func (w *warnLimiter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushLocked(time.Now())
}

func (w *warnLimiter) flushLocked(now time.Time) {
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	if len(w.suppressed) == 0 {
		return
	}
	var total uint64
	args := make([]any, 0, 2*len(w.suppressed))
	for _, r := range slices.Sorted(maps.Keys(w.suppressed)) {
		total += w.suppressed[r]
		args = append(args, slog.Uint64(r, w.suppressed[r]))
	}
	since := min(now.Sub(w.start), w.window).Round(100 * time.Millisecond)
	w.log.Warn(fmt.Sprintf("fleet: … and %d more rejections suppressed in the last %s", total, since), args...)
	clear(w.suppressed)
}
