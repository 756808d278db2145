package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/testbench/p4rt"
)

// Issue 25, items 1–3, through the command: lbc run --target bmv2 without
// --p4info/--device-config on a switch with no pipeline, which then dies
// (or hangs) and comes back.

// budget is how long a test waits for what takes well under a second on
// an idle machine: until shortly before the test's deadline, so a starved
// machine slows the test instead of failing it.
func budget(t *testing.T) time.Duration {
	if dl, ok := t.Deadline(); ok {
		return max(time.Until(dl)-30*time.Second, 20*time.Second)
	}
	return 5 * time.Minute
}

// runOnSwitch runs lbc run --target bmv2 on addr (no pipeline flags) with
// /healthz and /v1/status on a free port; it returns their base URL.
func runOnSwitch(t *testing.T, addr string) (string, *syncWriter) {
	t.Helper()
	port, _ := loopbackBackends(t, "127.0.0.151", "127.0.0.152", "127.0.0.153")
	cfg := filepath.Join(t.TempDir(), "lb.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(runTestConfig, port, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startRun(t, "-c", cfg, "--target", "bmv2", "--addr", addr, "--watch-interval", "0", "--verify-interval", "0")
	waitRunHealthz(t, r.base, http.StatusOK, r.done, r.logs)
	return r.base, r.logs
}

// waitRunHealthz polls /healthz until it answers code, within budget.
func waitRunHealthz(t *testing.T, base string, code int, done <-chan error, logs *syncWriter) time.Duration {
	t.Helper()
	return pollHealthz(t, func() (int, string, error) {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return 0, "", err
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Status, nil
	}, code, done, logs)
}

// pollHealthz calls get until it answers code, within budget; lbc run
// ending meanwhile (done) fails the test.
func pollHealthz(t *testing.T, get func() (int, string, error), code int, done <-chan error, logs *syncWriter) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(budget(t))
	last := ""
	for {
		select {
		case err := <-done:
			t.Fatalf("lbc run returned %v\n%s", err, logs.String())
		default:
		}
		c, body, err := get()
		if err == nil && c == code {
			return time.Since(start)
		}
		last = fmt.Sprintf("%d %q %v", c, body, err)
		if time.Now().After(deadline) {
			t.Fatalf("/healthz never answered %d (last: %s)\n%s", code, last, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func runStatus(t *testing.T, base string) controller.Status {
	t.Helper()
	resp, err := http.Get(base + controller.StatusPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st controller.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// switchDigest reads the switch back on a read-only connection, as lbc
// status does, and returns the digest of its tables and its ring slots.
func switchDigest(t *testing.T, addr string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), budget(t))
	defer cancel()
	tg, err := bmv2.Open(ctx, bmv2.Options{Options: runtime.Options{Addr: addr, DeviceID: 1, ReadOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	ir, err := tg.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slots := 0
	for _, r := range ir.Rings {
		for _, h := range r.Halves {
			for _, b := range h {
				if b != 0 {
					slots++
				}
			}
		}
	}
	return controller.Digest(ir), slots
}

// checkServed: the switch holds what the controller compiled (its digest
// of the tables in force), both ring halves of 307 slots.
func checkServed(t *testing.T, base, addr string, logs *syncWriter) string {
	t.Helper()
	st := runStatus(t, base)
	got, slots := switchDigest(t, addr)
	if len(st.Targets) != 1 || st.Targets[0].Digest != got || st.Targets[0].LastError != "" || slots != 307 {
		t.Fatalf("switch digest %s, %d ring slots; controller %+v\n%s", got, slots, st.Targets, logs.String())
	}
	return got
}

// TestRunRecoversFromSwitchRestart (issue 25, item 1): lbc run without
// pipeline flags programs an empty switch (the embedded p4/build); the
// switch dies (healthz 503) and comes back empty on the same address; lbc
// run pushes the pipeline and every table again by itself (healthz 200,
// the tables are the compiler's).
func TestRunRecoversFromSwitchRestart(t *testing.T) {
	srv := startP4RT(t)
	addr := srv.Addr()
	base, logs := runOnSwitch(t, addr)
	before := checkServed(t, base, addr, logs)

	srv.Stop()
	t.Logf("switch gone → /healthz 503 in %v", waitRunHealthz(t, base, http.StatusServiceUnavailable, nil, logs))
	p4rt.StartEmpty(t, addr)
	t.Logf("switch back → /healthz 200 in %v", waitRunHealthz(t, base, http.StatusOK, nil, logs))
	if after := checkServed(t, base, addr, logs); after != before {
		t.Fatalf("after the restart the switch holds %s, before %s", after, before)
	}
}

// bmv2Process is a simple_switch_grpc on loopback that a test can kill,
// stop, continue and start again on the same ports, with no pipeline.
type bmv2Process struct {
	t          *testing.T
	bin, addr  string
	thriftPort int
	ipc, log   string
	cmd        *exec.Cmd
}

func startBMv2(t *testing.T) *bmv2Process {
	t.Helper()
	bin, err := exec.LookPath("simple_switch_grpc")
	if err != nil {
		t.Skipf("simple_switch_grpc not on PATH (%v): the live BMv2 restart is skipped; TestRunRecoversFromSwitchRestart runs the same on the in-process server", err)
	}
	dir := t.TempDir()
	p := &bmv2Process{t: t, bin: bin, addr: freeAddr(t), thriftPort: freePortNum(t),
		ipc: "ipc://" + filepath.Join(dir, "notifications.ipc"), log: filepath.Join(dir, "switch.log")}
	p.start()
	t.Cleanup(func() {
		if p.cmd != nil {
			p.cmd.Process.Signal(syscall.SIGCONT)
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	return p
}

func freePortNum(t *testing.T) int {
	_, port, _ := net.SplitHostPort(freeAddr(t))
	var n int
	fmt.Sscan(port, &n)
	return n
}

// start runs the switch empty and waits until it accepts connections.
func (p *bmv2Process) start() {
	p.t.Helper()
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	defer logf.Close()
	p.cmd = exec.Command(p.bin, "--no-p4", "--device-id", "1", "--thrift-port", fmt.Sprint(p.thriftPort), "--log-level", "off",
		"--notifications-addr", p.ipc, "--", "--grpc-server-addr", p.addr, "--cpu-port", "255")
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", p.bin, err)
	}
	deadline := time.Now().Add(budget(p.t))
	for {
		c, err := net.DialTimeout("tcp", p.addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(p.log)
			p.t.Fatalf("simple_switch_grpc did not listen on %s: %v\n%s", p.addr, err, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill9 kills the switch as a crash does.
func (p *bmv2Process) kill9() {
	p.cmd.Process.Kill()
	p.cmd.Wait()
	p.cmd = nil
}

// TestRunRecoversFromBMv2Restart (issue 25, items 1–3) on a live BMv2:
// kill -9 and start again empty: /healthz 503, then 200 with the
// compiler's tables back, pushed by lbc run alone; SIGSTOP (a hung switch,
// its connection still open): /healthz 503 by the heartbeat, and after
// SIGCONT 200 again with nothing written.
func TestRunRecoversFromBMv2Restart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts BMv2")
	}
	sw := startBMv2(t)
	base, logs := runOnSwitch(t, sw.addr)
	before := checkServed(t, base, sw.addr, logs)

	sw.kill9()
	t.Logf("switch killed → /healthz 503 in %v", waitRunHealthz(t, base, http.StatusServiceUnavailable, nil, logs))
	sw.start()
	t.Logf("switch accepting connections → /healthz 200 in %v", waitRunHealthz(t, base, http.StatusOK, nil, logs))
	if after := checkServed(t, base, sw.addr, logs); after != before {
		t.Fatalf("after the restart the switch holds %s, before %s", after, before)
	}

	writes := runStatus(t, base).Targets[0].TotalWrites
	sw.cmd.Process.Signal(syscall.SIGSTOP)
	t.Logf("switch stopped → /healthz 503 in %v (heartbeat bound %v)", waitRunHealthz(t, base, http.StatusServiceUnavailable, nil, logs),
		runtime.DefaultHeartbeat+runtime.DefaultHeartbeatTimeout)
	sw.cmd.Process.Signal(syscall.SIGCONT)
	t.Logf("switch continued → /healthz 200 in %v", waitRunHealthz(t, base, http.StatusOK, nil, logs))
	if after := checkServed(t, base, sw.addr, logs); after != before {
		t.Fatalf("after SIGSTOP/SIGCONT the switch holds %s, before %s", after, before)
	}
	if w := runStatus(t, base).Targets[0].TotalWrites; w != writes {
		t.Fatalf("a switch back with its tables intact got %d writes, want 0\n%s", w-writes, logs.String())
	}
}

// TestRunWaitsForSwitch: lbc run started while nothing listens on the
// switch's address does not exit (it did after 10 s): it keeps trying,
// logs each attempt, answers /healthz 503 with why, and once the switch
// is up on that address pushes the pipeline and every table (/healthz
// 200). A configuration that can never work fails at once, without a
// wait; SIGTERM while waiting stops it cleanly.
func TestRunWaitsForSwitch(t *testing.T) {
	port, _ := loopbackBackends(t, "127.0.0.151", "127.0.0.152", "127.0.0.153")
	cfg := filepath.Join(t.TempDir(), "lb.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(runTestConfig, port, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	const away = "the switch does not answer; lbc run keeps trying"
	t.Run("switch up later", func(t *testing.T) {
		addr := freeAddr(t) // nothing listens there
		r := startRun(t, "-c", cfg, "--target", "bmv2", "--addr", addr, "--connect-timeout", "300ms", "--watch-interval", "0", "--verify-interval", "0")
		waitRunHealthz(t, r.base, http.StatusServiceUnavailable, r.done, r.logs)
		// Two attempts gave up (0.3 s, then 0.6 s), and it is still there.
		waitUntil(t, func() bool { return strings.Count(r.logs.String(), away) >= 2 }, r.logs)
		if code, body := getBody(t, r.base+"/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "waiting for the switch --target bmv2 (attempt ") {
			t.Fatalf("/healthz while waiting: %d %q", code, body)
		}
		if code, _ := getBody(t, r.base+controller.StatusPath); code != http.StatusServiceUnavailable {
			t.Fatalf("/v1/status while waiting: %d, want 503", code)
		}
		p4rt.StartEmpty(t, addr)
		t.Logf("switch up → /healthz 200 in %v", waitRunHealthz(t, r.base, http.StatusOK, r.done, r.logs))
		checkServed(t, r.base, addr, r.logs)
		logs := r.logs.String()
		for _, want := range []string{"the switch answers: lbc run goes on", "pushed pipeline embedded p4/build", "msg=pushed"} {
			if !strings.Contains(logs, want) {
				t.Errorf("log lacks %q:\n%s", want, logs)
			}
		}
	})
	t.Run("bad configuration fails at once", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "lb.yaml")
		if err := os.WriteFile(bad, []byte(strings.Replace(fmt.Sprintf(runTestConfig, port, ""), "ringSize: 307", "ringSize: -3", 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, errw, err := runLBC(t, "run", "-c", bad, "--target", "bmv2", "--addr", freeAddr(t))
		if err == nil || !strings.Contains(err.Error(), "ringSize") || strings.Contains(errw, away) {
			t.Fatalf("lbc run with a bad file and no switch: %v\n%s", err, errw)
		}
		t.Logf("failed in %v", time.Since(start))
	})
	t.Run("bad flag fails at once", func(t *testing.T) {
		_, errw, err := runLBC(t, "run", "-c", cfg, "--target", "bmv2", "--addr", freeAddr(t), "--election-id", "0")
		if err == nil || !strings.Contains(err.Error(), "--election-id 0") || strings.Contains(errw, away) {
			t.Fatalf("lbc run with --election-id 0: %v\n%s", err, errw)
		}
	})
	t.Run("SIGTERM while waiting", func(t *testing.T) {
		r := startRun(t, "-c", cfg, "--target", "bmv2", "--addr", freeAddr(t), "--connect-timeout", "300ms")
		waitUntil(t, func() bool { return strings.Contains(r.logs.String(), away) }, r.logs)
		if err := r.stop(); err != nil {
			t.Fatalf("lbc run stopped while waiting: %v, want nil\n%s", err, r.logs.String())
		}
	})
}
