package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/internal/netns"
)

// lbcProc is one `lbc run` process inside a namespace: the fleet's nodes
// and a scenario's controller in process mode. `ip netns exec` enters the
// namespace and execs lbc in place, so the process's PID is lbc's own.
type lbcProc struct {
	ns  string
	cmd *exec.Cmd
	// exited is closed when the process has exited; err is then Wait's.
	exited chan struct{}
	err    error
}

// startLBC starts `lbc args...` in ns, its output appended to logPath
// after a line that marks the start. The kernel kills it if the testbench
// dies (netns.StartTied).
func startLBC(ns, lbc string, args []string, logPath string) (*lbcProc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "==== %s: lbc run starts\n", time.Now().Format(time.TimeOnly))
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, lbc}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	done, err := netns.StartTied(cmd, syscall.SIGKILL)
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s in %s: %w", lbc, ns, err)
	}
	p := &lbcProc{ns: ns, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = <-done
		logf.Close()
		close(p.exited)
	}()
	return p, nil
}

// PID is the process's ID.
func (p *lbcProc) PID() int { return p.cmd.Process.Pid }

// running reports whether the process has not exited yet.
func (p *lbcProc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL (no clean shutdown at all) and waits for the exit;
// it returns how the process ended, from its wait status.
func (p *lbcProc) kill() (string, error) {
	p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		return "", fmt.Errorf("lbc run (pid %d) still running 10 s after SIGKILL", p.PID())
	}
	return exitReason(p.cmd.ProcessState), nil
}

// exitReason is "killed by SIGKILL", "exit status 0" and the like.
func exitReason(ps *os.ProcessState) string {
	if ps == nil {
		return "not exited"
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by " + sigName(ws.Signal())
	}
	return ps.String()
}

func sigName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// stop sends SIGTERM and waits for lbc to exit cleanly; after limit it is
// killed and that is the error.
func (p *lbcProc) stop(limit time.Duration) error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		var ee *exec.ExitError
		if p.err != nil && !errors.As(p.err, &ee) {
			return p.err
		}
		if p.err != nil {
			return fmt.Errorf("lbc run (pid %d) exited with %v on SIGTERM", p.PID(), p.err)
		}
		return nil
	case <-time.After(limit):
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
		return fmt.Errorf("lbc run (pid %d) did not stop within %s of SIGTERM", p.PID(), limit)
	}
}

// lbcExecutable is the file a PID runs, as the kernel sees it.
func lbcExecutable(pid int) (string, error) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return "", err
	}
	return filepath.Clean(exe), nil
}

// nsHTTPClient reaches addresses inside a namespace (an lbc run's
// --metrics on the namespace's loopback).
func nsHTTPClient(ns string) *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return nsDialer{ns}.DialContext(ctx, network, addr)
		},
		DisableKeepAlives: true,
	}}
}

// readStatus reads an lbc run's status (controller.StatusPath) on its
// --metrics address inside ns.
func readStatus(ctx context.Context, ns, addr string) (*controller.Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+controller.StatusPath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := nsHTTPClient(ns).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", controller.StatusPath, resp.Status, trimBody(data))
	}
	var st controller.Status
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", controller.StatusPath, err)
	}
	return &st, nil
}

func trimBody(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	return string(b)
}
