// Package netns builds throw-away network namespaces: create them, run
// `ip` inside them, run Go code inside them, start processes tied to this
// one, and remove them all on Close, even after a failure. It needs root.
// The live BMv2 switch of `lbc replay --target bmv2` (targets/bmv2/live)
// and the test bench's topologies (testbench/netns) are built on it.
package netns

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Set is a group of namespaces removed together.
type Set struct {
	mu     sync.Mutex
	prefix string
	names  []string
}

// NewSet returns an empty set whose namespaces are named prefix-<name>.
// The prefix should be unique per run (e.g. include the PID).
func NewSet(prefix string) *Set { return &Set{prefix: prefix} }

// Available reports why namespaces cannot be used here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("not root (euid %d)", os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("ip (iproute2) not on PATH: %w", err)
	}
	return nil
}

// Add creates namespace name (prefixed) and returns its full name.
func (s *Set) Add(name string) (string, error) {
	full := s.prefix + "-" + name
	if out, err := exec.Command("ip", "netns", "add", full).CombinedOutput(); err != nil {
		return "", fmt.Errorf("ip netns add %s: %v: %s", full, err, out)
	}
	s.mu.Lock()
	s.names = append(s.names, full)
	s.mu.Unlock()
	if _, err := s.IP(full, "link", "set", "lo", "up"); err != nil {
		return full, err
	}
	return full, nil
}

// Close deletes every namespace of the set (their interfaces go with them).
func (s *Set) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []string
	for i := len(s.names) - 1; i >= 0; i-- {
		if out, err := exec.Command("ip", "netns", "del", s.names[i]).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v: %s", s.names[i], err, bytes.TrimSpace(out)))
		}
	}
	s.names = nil
	if len(errs) > 0 {
		return fmt.Errorf("netns cleanup: %s", strings.Join(errs, "; "))
	}
	return nil
}

// IP runs `ip -n ns args...` (ns "" is the current namespace).
func (s *Set) IP(ns string, args ...string) (string, error) {
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// WaitUp waits until dev in ns is operationally up. A veth's queueing
// discipline is attached only when the kernel's link watcher sees its
// carrier, up to a second after `ip link set up` on a loaded machine;
// until then every frame sent on it is silently dropped.
func (s *Set) WaitUp(ns, dev string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		out, err := s.IP(ns, "-o", "link", "show", "dev", dev)
		if err != nil {
			return err
		}
		if strings.Contains(out, "state UP") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s in %s not up after %s: %s", dev, ns, timeout, strings.TrimSpace(out))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Exec runs a command inside ns (ip netns exec).
func (s *Set) Exec(ctx context.Context, ns string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s in %s: %v: %s", name, strings.Join(args, " "), ns, err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// Sysctl sets a sysctl inside ns.
func (s *Set) Sysctl(ns, key, value string) error {
	_, err := s.Exec(context.Background(), ns, "sysctl", "-qw", key+"="+value)
	return err
}

// Do runs fn on an OS thread that has entered ns. Sockets created by fn
// belong to ns and may be used from any goroutine afterwards.
func Do(ns string, fn func() error) error {
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return fmt.Errorf("open namespace %s: %w", ns, err)
	}
	defer target.Close()
	return DoIn(target, fn)
}

// DoIn is Do for the network namespace target refers to (/run/netns/NAME,
// /proc/PID/ns/net, /proc/thread-self/ns/net of another thread).
func DoIn(target *os.File, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is not unlocked: if restoring the namespace failed it
		// must die with the goroutine rather than serve others.
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("restore namespace: %w", err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	select {
	case err := <-errc:
		return err
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("function did not return within 2 minutes")
	}
}
