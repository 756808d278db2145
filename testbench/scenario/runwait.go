package scenario

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// runWaitProbe measures what schedProbe cannot: how long the processes on
// a fault's recovery path (the switch, the controller) were runnable but
// not running. schedProbe times a sleeper's wakes, and the kernel wakes a
// sleeper ahead of the busy tasks, so at load 8 it sees stalls of a second
// or two while a CPU-bound task (BMv2 building its pipeline) gets a third of
// a core and takes three times as long. The kernel counts that wait per
// thread (/proc/PID/task/TID/schedstat, its second field: nanoseconds
// spent on a run queue), and the probe samples it every runWaitEvery.
type runWaitProbe struct {
	start time.Time
	every time.Duration
	pids  func() []int // the processes to sample (0 and repeats ignored)

	mu      sync.Mutex
	samples []runWaitSample

	probeLife
}

// runWaitSample is one sample: when (since start), and each sampled
// thread's cumulative run-queue wait, by process.
type runWaitSample struct {
	At   time.Duration
	Wait map[int]map[int]time.Duration // pid → tid → wait
}

const runWaitEvery = 100 * time.Millisecond

func startRunWaitProbe(start time.Time, pids func() []int) *runWaitProbe {
	p := &runWaitProbe{start: start, every: runWaitEvery, pids: pids, probeLife: newProbeLife()}
	go p.run()
	return p
}

func (p *runWaitProbe) run() {
	defer close(p.done)
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		p.sample()
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
	}
}

func (p *runWaitProbe) sample() {
	s := runWaitSample{At: time.Since(p.start), Wait: map[int]map[int]time.Duration{}}
	for _, pid := range p.pids() {
		if pid <= 0 || s.Wait[pid] != nil {
			continue
		}
		if w := threadWaits(pid); len(w) > 0 {
			s.Wait[pid] = w
		}
	}
	p.mu.Lock()
	p.samples = append(p.samples, s)
	p.mu.Unlock()
}

// Window is the run-queue wait of the sampled processes in [from, to]
// (times since the start); see runWaitIn.
func (p *runWaitProbe) Window(from, to time.Duration) time.Duration {
	p.sample() // a window that ends now is measured to now
	p.mu.Lock()
	defer p.mu.Unlock()
	return runWaitIn(p.samples, from, to)
}

// runWaitIn is the run-queue wait in [from, to], from the last sample at
// or before from to the first at or after to (the last one when none is):
// per process, the most one of its threads waited (a recovery's work runs
// on one thread of each process at a time: BMv2 builds a pipeline on the
// thread of the RPC), summed over the processes (the controller's writes
// wait for the switch, and the switch's work for the controller). A thread
// or process first seen after from counts all its wait (it started in the
// window: the switch restarted). The kernel credits a wait when it ends,
// so a window also holds the end of a wait begun before it: the error is a
// scheduling slice or a few, small against the seconds a loaded push waits.
func runWaitIn(ss []runWaitSample, from, to time.Duration) time.Duration {
	if len(ss) == 0 || to <= from || to <= ss[0].At {
		return 0 // nothing measured in the window
	}
	i0, i1 := -1, len(ss)-1
	for i, s := range ss {
		if s.At <= from {
			i0 = i
		}
		if s.At >= to {
			i1 = i
			break
		}
	}
	if i1 <= i0 {
		return 0
	}
	var before map[int]map[int]time.Duration
	if i0 >= 0 {
		before = ss[i0].Wait
	}
	var sum time.Duration
	for pid, threads := range ss[i1].Wait {
		var most time.Duration
		for tid, w := range threads {
			most = max(most, w-before[pid][tid])
		}
		sum += most
	}
	return sum
}

// threadWaits is each thread of pid's cumulative run-queue wait (none when
// the process is gone).
func threadWaits(pid int) map[int]time.Duration {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := make(map[int]time.Duration, len(ents))
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "schedstat"))
		if err != nil {
			continue // the thread ended meanwhile
		}
		if w, err := parseSchedstat(string(b)); err == nil {
			out[tid] = w
		}
	}
	return out
}

// parseSchedstat reads the run-queue wait (the second of three fields, in
// ns) from a schedstat line: "on-cpu-ns wait-ns timeslices".
func parseSchedstat(s string) (time.Duration, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return 0, fmt.Errorf("schedstat %q: want 3 fields", s)
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || ns < 0 {
		return 0, fmt.Errorf("schedstat %q: wait %q is not a count of ns", s, f[1])
	}
	return time.Duration(ns), nil
}
