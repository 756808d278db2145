package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/fallback"
	"github.com/lbc-dev/lbc/internal/netns"
)

// nsHTTP answers a GET of url (http://ADDR/PATH) from inside network
// namespace ns (lbc run's --metrics listens on the namespace's loopback):
// the connection is dialled on a thread in ns.
func nsHTTP(ns, url string) (int, string, error) {
	addr := strings.SplitN(strings.TrimPrefix(url, "http://"), "/", 2)[0]
	var conn net.Conn
	if err := netns.Do(ns, func() error {
		var err error
		conn, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}); err != nil {
		return 0, "", err
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) { return conn, nil }}}
	resp, err := c.Get(url)
	if err != nil {
		conn.Close()
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// runInNetns is lbc run started in ns (as a process of its own, through
// enter: ip netns exec, or nsenter --net) with its /healthz on the
// namespace's loopback.
type runInNetns struct {
	ns, base string
	cmd      *exec.Cmd
	logs     *syncWriter
	done     chan error
}

func startRunInNetns(t *testing.T, ns string, enter []string, args ...string) *runInNetns {
	t.Helper()
	bin := built(t, ".", "lbc")
	r := &runInNetns{ns: ns, base: "http://127.0.0.1:9109", logs: &syncWriter{}, done: make(chan error, 1)}
	r.cmd = exec.Command(enter[0], append(append(enter[1:], bin, "run"), append(args, "--metrics", "127.0.0.1:9109")...)...)
	r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() {
		r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.done:
		case <-time.After(budget(t)):
			r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// waitHealthz polls /healthz until it answers code.
func (r *runInNetns) waitHealthz(t *testing.T, code int) time.Duration {
	t.Helper()
	return pollHealthz(t, func() (int, string, error) { return nsHTTP(r.ns, r.base+"/healthz") }, code, r.done, r.logs)
}

func (r *runInNetns) status(t *testing.T) controller.Status {
	t.Helper()
	_, body, err := nsHTTP(r.ns, r.base+controller.StatusPath)
	if err != nil {
		t.Fatal(err)
	}
	var st controller.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("status: %v\n%s", err, body)
	}
	return st
}

var runningProg = regexp.MustCompile(`prog/xdp id (\d+) name ` + fallback.ProgName + ` `)

// waitLog waits until lbc run has logged sub.
func (r *runInNetns) waitLog(t *testing.T, sub string) {
	t.Helper()
	deadline := time.Now().Add(budget(t))
	for !strings.Contains(r.logs.String(), sub) {
		select {
		case err := <-r.done:
			t.Fatalf("lbc run exited: %v\n%s", err, r.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("lbc run never logged %q\n%s", sub, r.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRunReattachesXDP (issue 25): another tool takes lbc's program off
// the interface while lbc run --target xdp runs: it removes the pin
// directory on bpffs (the pinned link was the last reference that kept
// the program attached), or, where lbc attached through netlink (under
// ip netns exec), runs ip link set dev IF xdpgeneric off. lbc run used to
// notice neither: /healthz stayed 200 and the VIP black-holed until it
// was restarted. Now its verify finds the program gone (a read error,
// the target failing) and attaches its program again to the maps it
// holds, pinning them again: the tables and conntrack are intact and
// nothing is written. When another program took the hook meanwhile, lbc
// leaves it alone and fails (/healthz 503, naming it) until it is gone.
func TestRunReattachesXDP(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds lbc")
	}
	nsenter := func(ns string) []string { return []string{"nsenter", "--net=/run/netns/" + ns} }
	for _, tc := range []struct {
		name   string
		enter  func(ns string) []string
		pinned bool
		fault  func(t *testing.T, set *netns.Set, ns, pins string)
		// foreign: another program takes the hook right after the fault
		foreign bool
	}{
		{"pins removed", nsenter, true, removeAll, false},
		{"detached (ip link set xdpgeneric off)", func(ns string) []string { return []string{"ip", "netns", "exec", ns} }, false,
			func(t *testing.T, set *netns.Set, ns, _ string) {
				if out, err := set.IP(ns, "link", "set", "dev", "nc0", "xdpgeneric", "off"); err != nil { // auto mode attached generic on a veth
					t.Fatalf("ip link set dev nc0 xdpgeneric off: %v %s", err, out)
				}
			}, false},
		{"pins removed, another program takes the hook", nsenter, true, removeAll, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set, ns := vethNetns(t, "reattach")
			if out, err := set.IP(ns, "link", "set", "lo", "up"); err != nil { // --metrics listens there
				t.Fatalf("%v %s", err, out)
			}
			pins := filepath.Join("/sys/fs/bpf/lbc/netns", ns, "nc0")
			t.Cleanup(func() {
				// The namespace's whole folder: its pins and the folder
				// itself, which lbc made (issue 36: one was left per run).
				os.RemoveAll(filepath.Dir(pins))
				os.RemoveAll(filepath.Join("/run/lbc/xdp/netns", ns))
			})
			verify := "200ms"
			if tc.foreign {
				verify = "2s" // the foreign program is attached before lbc looks
			}
			// Maps of the compiled sizes: the default rings (512 MiB) are
			// not what this test is about (TestPushXDPDefaultSizesUnderIPNetnsExec).
			r := startRunInNetns(t, ns, tc.enter(ns), "-c", "../../examples/failover.yaml", "--target", "xdp", "--iface", "nc0",
				"--verify-interval", verify, "--watch-interval", "0", "--ring-entries", "1048576")
			r.waitHealthz(t, http.StatusOK)
			show, _ := set.IP(ns, "-d", "link", "show", "nc0")
			if !runningProg.MatchString(show) {
				t.Fatalf("nc0 runs no lbc program:\n%s\n%s", show, r.logs.String())
			}
			writes := r.status(t).Targets[0].TotalWrites
			if writes == 0 {
				t.Fatalf("the first push wrote nothing\n%s", r.logs.String())
			}

			tc.fault(t, set, ns, pins)
			if tc.foreign {
				l := attachPassAfterFault(t, ns, pins, func() { tc.fault(t, set, ns, pins) })
				code, body := 0, ""
				deadline := time.Now().Add(budget(t))
				for code != http.StatusServiceUnavailable || !strings.Contains(body, "not lbc's") {
					if time.Now().After(deadline) {
						t.Fatalf("/healthz %d %q, want 503 naming the other program\n%s", code, body, r.logs.String())
					}
					time.Sleep(20 * time.Millisecond)
					code, body, _ = nsHTTP(ns, r.base+"/healthz")
				}
				t.Logf("/healthz: %s", strings.TrimSpace(body))
				l.Close() // gone: lbc attaches its own at its next retry
			}
			r.waitLog(t, "xdp program attached again")
			t.Logf("→ /healthz 200 in %v", r.waitHealthz(t, http.StatusOK))
			show, _ = set.IP(ns, "-d", "link", "show", "nc0")
			if !runningProg.MatchString(show) {
				t.Fatalf("/healthz 200, but nc0 runs no lbc program:\n%s\n%s", show, r.logs.String())
			}
			st := r.status(t)
			if w := st.Targets[0].TotalWrites; w != writes || st.Targets[0].LastError != "" {
				t.Fatalf("after attaching again: %d writes (want 0: the maps held the tables), error %q\n%s", w-writes, st.Targets[0].LastError, r.logs.String())
			}
			if _, m, _ := nsHTTP(ns, r.base+"/metrics"); !readErrors.MatchString(m) {
				t.Errorf("the lost program was not counted as a failed read-back:\n%s", grepLines(m, "lbc_errors_total"))
			}
			if logs := r.logs.String(); !strings.Contains(logs, "gave it again; reading it back and writing what it lacks") {
				t.Errorf("log lacks the controller's line:\n%s", logs)
			}
			if tc.pinned {
				for _, name := range append(fallback.PinnedMaps, "link") {
					if _, err := os.Stat(filepath.Join(pins, name)); err != nil {
						t.Errorf("not pinned again: %v", err)
					}
				}
			}
		})
	}
}

func removeAll(t *testing.T, _ *netns.Set, _, pins string) {
	if err := os.RemoveAll(pins); err != nil {
		t.Fatal(err)
	}
}

// readErrors: the lost program counted as failed read-backs (once per
// fault lbc saw; attachPassAfterFault may fault more than once).
var readErrors = regexp.MustCompile(`(?m)^lbc_errors_total\{kind="read"\} [1-9][0-9]*$`)

// attachPass attaches an XDP_PASS program to nc0 in ns, as another tool
// would, and returns its link (closing it removes the program; the test's
// end does) and the program's ID.
func attachPass(t *testing.T, ns string) (link.Link, ebpf.ProgramID) {
	t.Helper()
	l, id, err := tryAttachPass(t, ns)
	if err != nil {
		t.Fatal(err)
	}
	return l, id
}

func tryAttachPass(t *testing.T, ns string) (link.Link, ebpf.ProgramID, error) {
	t.Helper()
	dp, err := fallback.Load(fallback.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	var l link.Link
	if err := netns.Do(ns, func() error {
		ifc, err := net.InterfaceByName("nc0")
		if err != nil {
			return err
		}
		l, err = link.AttachXDP(link.XDPOptions{Program: dp.Pass, Interface: ifc.Index, Flags: link.XDPGenericMode})
		return err
	}); err != nil {
		return nil, 0, err
	}
	t.Cleanup(func() { l.Close() })
	info, err := dp.Pass.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return l, id, nil
}

// attachPassAfterFault attaches another program right after lbc's was
// taken off (fault). lbc's verify is a period, not a delay after the
// fault, so it may look first and attach its program again, which then
// holds the hook (EBUSY; more likely on a busy machine): then the fault is
// made again, once lbc has pinned its program again, until the other
// program is first.
func attachPassAfterFault(t *testing.T, ns, pins string, fault func()) link.Link {
	t.Helper()
	deadline := time.Now().Add(budget(t))
	for attempt := 1; ; attempt++ {
		l, _, err := tryAttachPass(t, ns)
		if err == nil {
			return l
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			t.Fatalf("attempt %d: attaching another program after the fault: %v", attempt, err)
		}
		t.Logf("attempt %d: lbc attached its program again before the other one (%v): the fault again", attempt, err)
		for _, err := os.Stat(filepath.Join(pins, "link")); err != nil; _, err = os.Stat(filepath.Join(pins, "link")) {
			if time.Now().After(deadline) {
				t.Fatalf("lbc holds the hook but never pinned its link again: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		fault()
	}
}
