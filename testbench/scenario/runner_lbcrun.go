package scenario

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lbc-dev/lbc/controller"
)

// lbcRunMetrics is the --metrics address of a scenario's lbc run, on the
// loopback of the namespace it runs in.
const lbcRunMetrics = "127.0.0.1:9100"

// lbcRun is a scenario's controller as an lbc run process.
type lbcRun struct {
	proc *lbcProc
	ns   string
	log  string
}

// lbcRunArgs are lbc run's arguments in a scenario: the configuration, the
// environment's targets (RunArgs) and the timers the in-process
// controller runs with (debounce 50 ms, verify every second, retry after
// 500 ms, the file not watched: reloads come by SIGHUP).
func lbcRunArgs(cfg string, targetArgs []string) []string {
	args := append([]string{"run", "-c", cfg}, targetArgs...)
	return append(args, "--metrics", lbcRunMetrics, "--debounce", "50ms", "--watch-interval", "0",
		"--verify-interval", "1s", "--retry-interval", "500ms")
}

// startLBCRun starts lbc run in the environment's namespace and waits
// until its status says it is ready (the first push done).
func (r *runner) startLBCRun(ctx context.Context) (scenarioController, error) {
	ns, targetArgs := r.env.RunArgs()
	log := r.logf.Name()
	p, err := startLBC(ns, r.lbc, lbcRunArgs(r.cfgPath, targetArgs), log)
	if err != nil {
		return nil, err
	}
	c := &lbcRun{proc: p, ns: ns, log: log}
	fail := func(err error) (scenarioController, error) {
		p.kill()
		return nil, fmt.Errorf("lbc run (pid %d): %w (log: %s)", p.PID(), err, log)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := readStatus(ctx, ns, lbcRunMetrics)
		if err == nil && st.Ready {
			break
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("lbc run (pid %d) exited before it was ready: %v (log: %s)", p.PID(), p.err, log)
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("not ready within 30 s (last status read: %v)", err))
		}
	}
	// The PID is lbc's own (ip netns exec execs it in place): the kill
	// fault's note names it.
	exe, err := lbcExecutable(p.PID())
	if err != nil {
		return fail(err)
	}
	want, err := filepath.EvalSymlinks(r.lbc)
	if err != nil {
		return fail(err)
	}
	if want, _ = filepath.Abs(want); exe != want {
		return fail(fmt.Errorf("the process runs %s, not the lbc binary %s", exe, want))
	}
	return c, nil
}

func (c *lbcRun) Status(ctx context.Context) (controller.Status, bool) {
	if !c.proc.running() {
		return controller.Status{}, false
	}
	st, err := readStatus(ctx, c.ns, lbcRunMetrics)
	if err != nil {
		return controller.Status{}, false
	}
	return *st, true
}

// Reload sends SIGHUP (lbc run reloads on it) and waits until the status
// shows the new configuration applied, or the file rejected.
func (c *lbcRun) Reload(ctx context.Context, applied func(controller.Status) bool) error {
	if err := c.proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		return fmt.Errorf("SIGHUP lbc run (pid %d): %w", c.PID(), err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := readStatus(ctx, c.ns, lbcRunMetrics)
		switch {
		case err == nil && st.ReloadError != "":
			return fmt.Errorf("lbc run (pid %d) rejected the configuration: %s", c.PID(), st.ReloadError)
		case err == nil && applied(*st):
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lbc run (pid %d): the reload did not show in its status within 10 s (last read: %v; log: %s)", c.PID(), err, c.log)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *lbcRun) Stop() error { return c.proc.stop(15 * time.Second) }

// Kill sends SIGKILL: lbc run gets no chance to close anything; the
// kernel closes its sockets.
func (c *lbcRun) Kill() (ControllerKill, error) {
	pid := c.PID()
	died, err := c.proc.kill()
	if err != nil {
		return ControllerKill{PID: pid}, err
	}
	if _, serr := os.Stat(fmt.Sprintf("/proc/%d", pid)); !errors.Is(serr, os.ErrNotExist) {
		return ControllerKill{PID: pid, Died: died}, fmt.Errorf("lbc run (pid %d) %s, yet /proc/%d is still there", pid, died, pid)
	}
	return ControllerKill{PID: pid, Died: died}, nil
}

func (c *lbcRun) PID() int { return c.proc.PID() }

// killNote is a kill: controller fault's note.
func killNote(k ControllerKill, down, took time.Duration) string {
	if k.PID == 0 {
		return fmt.Sprintf("controller stopped without a clean shutdown, started again after %s (%s; the switch sees the session close as on a kill -9); %s until it was ready",
			down, k.Died, took.Round(time.Millisecond))
	}
	how := "killed with SIGKILL"
	if k.Died != diedOfSIGKILL {
		how = "ended " + strings.TrimSpace(k.Died) + " (not by SIGKILL)"
	}
	return fmt.Sprintf("lbc run (pid %d) %s (wait status: %s); the datapaths ran alone for %s; lbc run started again (pid %d), ready %s after the kill",
		k.PID, how, k.Died, down, k.NewPID, took.Round(time.Millisecond))
}
