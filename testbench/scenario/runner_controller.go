package scenario

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/controller/health"
	"github.com/lbc-dev/lbc/targets"
)

// scenarioController is the controller a scenario runs: controller.New in
// the testbench's process (inProcess) or an lbc run process (lbcRun),
// as the scenario's controller field says.
type scenarioController interface {
	// Status reads its status; false when it does not answer.
	Status(ctx context.Context) (controller.Status, bool)
	// Reload makes it read lb.yaml again and returns once it has and its
	// status passes applied.
	Reload(ctx context.Context, applied func(controller.Status) bool) error
	// Stop stops it cleanly; the datapaths stay programmed.
	Stop() error
	// Kill ends it without a clean shutdown and says how it ended.
	Kill() (ControllerKill, error)
	// PID is its process's ID (0: the testbench's own process).
	PID() int
}

// ControllerKill is how a kill: controller fault ended the controller.
type ControllerKill struct {
	// PID is the killed lbc run's process ID and NewPID the one started
	// after it (0 for the in-process controller).
	PID    int `json:"pid,omitempty"`
	NewPID int `json:"newPid,omitempty"`
	// Died is how it ended: the killed process's wait status ("killed by
	// SIGKILL"), or what stopped the in-process controller.
	Died string `json:"died"`
}

// diedOfSIGKILL is Died of a process that SIGKILL ended.
const diedOfSIGKILL = "killed by SIGKILL"

// inProcess is controller.New and Run in a goroutine of the testbench,
// on targets the environment opened.
type inProcess struct {
	// mu: Status (it reads the targets' counters, through memory views of
	// the XDP maps) holds it for reading; Stop holds it while it closes
	// the targets.
	mu      sync.RWMutex
	c       *controller.Controller
	tgts    []targets.Target
	cancel  context.CancelFunc
	done    chan error
	stopped bool
}

func (r *runner) startInProcess(ctx context.Context) (scenarioController, error) {
	tgts, err := r.env.OpenTargets(ctx)
	if err != nil {
		return nil, err
	}
	c, err := controller.New(controller.Options{
		ConfigPath: r.cfgPath, Targets: tgts, Logger: r.log,
		Prober:   &health.NetProber{Dialer: nsDialer{r.env.ProbeNS()}},
		Debounce: 50 * time.Millisecond,
		// The verify finds an XDP program another tool took off the
		// interface (detach faults): every second here, where lbc run's
		// default is a minute, so that a step bounds it in seconds.
		WatchInterval: -1, VerifyInterval: time.Second, RetryInterval: 500 * time.Millisecond,
	})
	if err != nil {
		closeTargets(tgts)
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	select {
	case <-c.Ready():
	case err := <-done:
		cancel()
		closeTargets(tgts)
		if err == nil {
			err = errors.New("stopped before it was ready")
		}
		return nil, fmt.Errorf("controller: %w (log: %s)", err, r.logf.Name())
	case <-time.After(30 * time.Second):
		cancel()
		<-done
		closeTargets(tgts)
		return nil, fmt.Errorf("controller not ready within 30 s (log: %s)", r.logf.Name())
	}
	return &inProcess{c: c, tgts: tgts, cancel: cancel, done: done}, nil
}

func (p *inProcess) Status(ctx context.Context) (controller.Status, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.stopped {
		return controller.Status{}, false
	}
	return p.c.Status(ctx), true
}

func (p *inProcess) Reload(ctx context.Context, _ func(controller.Status) bool) error {
	return p.c.Reload(ctx) // returns once reloaded and pushed
}

func (p *inProcess) Stop() error {
	p.mu.Lock() // no Status call reads targets being closed
	defer p.mu.Unlock()
	if p.stopped {
		return nil
	}
	p.stopped = true
	p.cancel()
	<-p.done
	closeTargets(p.tgts)
	return nil
}

// Kill cancels the controller's context: no clean shutdown of its own,
// but the testbench's process lives on, so its sessions close as on a
// kill -9.
func (p *inProcess) Kill() (ControllerKill, error) {
	return ControllerKill{Died: "in-process: its context cancelled"}, p.Stop()
}

func (p *inProcess) PID() int { return 0 }

func closeTargets(ts []targets.Target) {
	for _, t := range ts {
		t.Close()
	}
}

// startController starts the scenario's controller, in process or as
// lbc run, and waits until it is ready.
func (r *runner) startController(ctx context.Context) error {
	var c scenarioController
	var err error
	if r.sc.Controller == ControllerProcess {
		c, err = r.startLBCRun(ctx)
	} else {
		c, err = r.startInProcess(ctx)
	}
	if err != nil {
		return err
	}
	r.cmu.Lock()
	r.ctl = c
	r.gen++
	r.cmu.Unlock()
	return nil
}

// takeController removes the running controller from the runner (status
// reads stop) and returns it.
func (r *runner) takeController() scenarioController {
	r.cmu.Lock()
	defer r.cmu.Unlock()
	c := r.ctl
	r.ctl = nil
	return c
}

func (r *runner) stopController() {
	if c := r.takeController(); c != nil {
		if err := c.Stop(); err != nil {
			r.progress("  controller stop: %v", err)
		}
	}
}

// status reads the running controller's status and its generation.
func (r *runner) status(ctx context.Context) (controller.Status, int, bool) {
	r.cmu.Lock()
	c, gen := r.ctl, r.gen
	r.cmu.Unlock()
	if c == nil {
		return controller.Status{}, 0, false
	}
	st, ok := c.Status(ctx)
	return st, gen, ok
}

// controllerPID is the running controller's process ID (0: none, or in
// process).
func (r *runner) controllerPID() int {
	r.cmu.Lock()
	defer r.cmu.Unlock()
	if r.ctl == nil {
		return 0
	}
	return r.ctl.PID()
}

// reload has the running controller read lb.yaml again, without backend
// removed (a remove fault).
func (r *runner) reload(ctx context.Context, removed string) error {
	r.cmu.Lock()
	c := r.ctl
	r.cmu.Unlock()
	if c == nil {
		return errors.New("no controller running")
	}
	return c.Reload(ctx, func(st controller.Status) bool { return removedApplied(st, r.sc.ServiceName(), removed) })
}

// removedApplied: the service in st no longer has backend among those it
// sends new connections to (gone, or draining, R-DRAIN).
func removedApplied(st controller.Status, service, backend string) bool {
	for _, s := range st.Services {
		if s.Name != service {
			continue
		}
		for _, b := range s.Backends {
			if b.Name == backend && !b.Draining {
				return false
			}
		}
		return true
	}
	return false
}
