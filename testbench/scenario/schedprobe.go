package scenario

import (
	"fmt"
	"runtime"
	"sync"
	"time"
)

// schedProbe measures how late this machine wakes a task that sleeps:
// one goroutine, on an OS thread of its own, sleeps probeEvery again and
// again and records by how much each wake came late. That lateness is
// the time the task was runnable but not running: the kernel's run queue
// (every other process of the machine, at any load) plus the wait for a
// P of this Go process. The fleet's nodes and the backends' health
// responders wake the same way at the same priority (the nodes are Go
// processes; the backends live in this one), so the probe's delay is
// what their timers (health checks, BGP keepalives) were delayed by, at
// most: it wakes far more often than they do.
type schedProbe struct {
	start time.Time
	every time.Duration

	mu    sync.Mutex
	wakes []probeWake

	probeLife
}

// probeWake is one wake: when (since start) and how late.
type probeWake struct {
	At, Late time.Duration
}

const probeEvery = 10 * time.Millisecond

func startSchedProbe(start time.Time) *schedProbe {
	p := &schedProbe{start: start, every: probeEvery, probeLife: newProbeLife()}
	go p.run()
	return p
}

func (p *schedProbe) run() {
	runtime.LockOSThread()
	defer close(p.done)
	for {
		select {
		case <-p.stop:
			return
		default:
		}
		t0 := time.Now()
		time.Sleep(p.every)
		now := time.Now()
		w := probeWake{At: now.Sub(p.start), Late: max(0, now.Sub(t0)-p.every)}
		p.mu.Lock()
		p.wakes = append(p.wakes, w)
		p.mu.Unlock()
	}
}

// SchedDelay is what the probe saw over a span of the run.
type SchedDelay struct {
	// Span is the span measured.
	Span time.Duration `json:"span"`
	// Lost is the time the probe was runnable but not running: the sum
	// of its wakes' lateness, counted inside the span.
	Lost time.Duration `json:"lost"`
	// Worst is the longest single stall that overlaps the span (whole,
	// also the part outside it).
	Worst time.Duration `json:"worst"`
	// Wakes is how many wakes fell in the span (0: the probe did not
	// run, nothing is known).
	Wakes int `json:"wakes"`
	// RunWait is how long the switch and the controller were runnable
	// but not running in the span (runWaitProbe; 0: not measured).
	RunWait time.Duration `json:"runWait,omitempty"`
}

// Slack is what a bound is widened by: the longer of the probe's lost
// time (a sleeper's late wakes: timers) and the recovery path's run-queue
// wait (CPU-bound work: a pipeline push). Not their sum: a stall of the
// machine delays both at once.
func (d SchedDelay) Slack() time.Duration { return max(d.Lost, d.RunWait) }

// Share is Lost over Span.
func (d SchedDelay) Share() float64 {
	if d.Span <= 0 {
		return 0
	}
	return d.Lost.Seconds() / d.Span.Seconds()
}

func (d SchedDelay) String() string {
	if d.Wakes == 0 {
		return "no scheduling measurement"
	}
	s := fmt.Sprintf("%d ms of %d ms lost to scheduling (%.0f %%), longest stall %d ms",
		d.Lost.Milliseconds(), d.Span.Milliseconds(), 100*d.Share(), d.Worst.Milliseconds())
	if d.RunWait > 0 {
		s += fmt.Sprintf("; the switch and the controller waited %d ms for a CPU", d.RunWait.Milliseconds())
	}
	return s
}

// Window is the delay measured in [from, to] (times since the start):
// stalls count for their part inside it, Worst is the longest stall that
// overlaps it, whole. It first waits (up to a second) for the probe's
// first wake after to, so that a stall still going on at to, which the
// probe records only when it ends, is seen: right after the machine
// resumes, the caller may run before the probe does.
func (p *schedProbe) Window(from, to time.Duration) SchedDelay {
	deadline := time.Now().Add(time.Second)
	for {
		p.mu.Lock()
		caught := len(p.wakes) > 0 && p.wakes[len(p.wakes)-1].At >= to
		p.mu.Unlock()
		stopped := false
		select {
		case <-p.done:
			stopped = true
		default:
		}
		if caught || stopped || time.Now().After(deadline) {
			break
		}
		time.Sleep(p.every / 2)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return delayIn(p.wakes, from, to)
}

func delayIn(wakes []probeWake, from, to time.Duration) SchedDelay {
	d := SchedDelay{Span: max(0, to-from)}
	for _, w := range wakes {
		if w.At < from || w.At-w.Late > to {
			continue
		}
		// The stall is [w.At-w.Late, w.At]; count its part in [from, to].
		lo, hi := max(w.At-w.Late, from), min(w.At, to)
		if w.At <= to {
			d.Wakes++
		}
		if hi > lo {
			d.Lost += hi - lo
			d.Worst = max(d.Worst, w.Late)
		}
	}
	return d
}

// probeLife is a probe's goroutine's stop and done signals: Stop ends the
// probe, once however often it is called, and returns when the goroutine
// has; the measurements stay readable.
type probeLife struct {
	stop chan struct{} // closed by Stop
	done chan struct{} // closed by the goroutine as it ends
}

func newProbeLife() probeLife {
	return probeLife{stop: make(chan struct{}), done: make(chan struct{})}
}

// Stop ends the probe and waits for its goroutine.
func (l probeLife) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}
