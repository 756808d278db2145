package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startP4RTServer runs the built lbc-testbench p4rt-server with args on a
// free loopback port and returns its address; the server is interrupted
// (as Ctrl-C does) at the end of the test, and must then exit 0.
func startP4RTServer(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"p4rt-server", "--listen", "127.0.0.1:0"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncWriter
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	stopped := false
	t.Cleanup(func() {
		if stopped {
			return
		}
		cmd.Process.Signal(os.Interrupt)
		for range lines { // drain until the server closes stdout
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("p4rt-server after an interrupt: %v, want exit 0\nstderr:\n%s", err, stderr.String())
		}
	})
	listening := regexp.MustCompile(`^P4Runtime server on (127\.0\.0\.1:\d+), device 1`)
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				stopped = true
				cmd.Wait()
				t.Fatalf("p4rt-server ended before listening; stderr:\n%s", stderr.String())
			}
			if m := listening.FindStringSubmatch(l); m != nil {
				return m[1]
			}
		case <-timeout:
			cmd.Process.Signal(syscall.SIGKILL)
			t.Fatalf("p4rt-server did not say where it listens in 30 s; stderr:\n%s", stderr.String())
		}
	}
}

// TestPushAndStatusOnP4RTServer (issue 24, item 9): lbc push and lbc
// status --target bmv2 work against lbc-testbench p4rt-server, the tests'
// P4Runtime server run as a program: with the embedded pipeline (push
// needs no --p4info) and with none (push gives it). A status of a switch
// with no pipeline tells a read-only user to push first, not to "pass
// --p4info to push one"; a normal close is no "mastership lost" warning.
func TestPushAndStatusOnP4RTServer(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds lbc-testbench")
	}
	bin := built(t, "../lbc-testbench", "lbc-testbench")
	cfg := td + "seed001.yaml"
	for _, tc := range []struct {
		name       string
		serverArgs []string
		pushArgs   []string // what the first push needs
		// before the first push
		statusErr string
		pushErr   string // a push without pushArgs; "" when it works
	}{
		{name: "embedded pipeline"},
		// Issue 25: push gives the embedded pipeline by itself.
		{name: "no pipeline", serverArgs: []string{"--no-pipeline"},
			statusErr: "lbc status only reads what the switch holds, and it holds nothing yet; push the pipeline and the tables first:\n  lbc push -c lb.yaml --target bmv2 --addr ADDR"},
		{name: "no pipeline, explicit files", serverArgs: []string{"--no-pipeline"},
			pushArgs:  []string{"--p4info", "../../p4/build/lb.p4info.txtpb", "--device-config", "../../p4/build/lb.json"},
			statusErr: "lbc status only reads what the switch holds, and it holds nothing yet; push the pipeline and the tables first:\n  lbc push -c lb.yaml --target bmv2 --addr ADDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := startP4RTServer(t, bin, tc.serverArgs...)
			target := []string{"--target", "bmv2", "--addr", addr}
			out, errw, err := runLBC(t, append([]string{"status"}, target...)...)
			if tc.statusErr == "" {
				if err != nil || !strings.Contains(out, "bmv2 "+addr+": 0 services, 0 VIP rows, 0 backends") {
					t.Fatalf("status before a push: %v\n%s%s", err, out, errw)
				}
			} else {
				want := strings.ReplaceAll(tc.statusErr, "ADDR", addr)
				if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "pass --p4info to push one") {
					t.Fatalf("status of a switch with no pipeline: %v, want %q", err, want)
				}
			}
			push := append(append([]string{"push", "-c", cfg}, target...), tc.pushArgs...)
			// Issue 36: the first push can be previewed, pipeline or not.
			out, errw, err = runLBC(t, append(push, "--dry-run")...)
			if err != nil || !strings.Contains(out, "write 1032 changes (dry run)") {
				t.Fatalf("push --dry-run before the first push: %v\n%s%s", err, out, errw)
			}
			// A dry run reads: its progress promises no arbitration, no pipeline.
			if want := "connecting to bmv2 " + addr + " …"; !strings.Contains(errw, want) || strings.Contains(errw, "arbitration") {
				t.Errorf("push --dry-run's progress, want %q and no arbitration:\n%s", want, errw)
			}
			if tc.statusErr != "" && !strings.Contains(out, "runs no pipeline yet; a push would push the pipeline") {
				t.Fatalf("push --dry-run of a switch with no pipeline does not say the pipeline comes first:\n%s", out)
			}
			if tc.pushErr != "" {
				_, _, err := runLBC(t, append([]string{"push", "-c", cfg}, target...)...)
				if err == nil || !strings.Contains(err.Error(), tc.pushErr) {
					t.Fatalf("push without a pipeline: %v, want %q", err, tc.pushErr)
				}
			}
			out, errw, err = runLBC(t, push...)
			if err != nil || !strings.Contains(out, "bmv2 "+addr+": 1032 writes in ") {
				t.Fatalf("push: %v\n%s%s", err, out, errw)
			}
			if !strings.Contains(errw, "connecting to bmv2 "+addr+" (arbitration; the pipeline if it runs none) …") {
				t.Errorf("push's progress does not say it arbitrates:\n%s", errw)
			}
			if strings.Contains(errw, "mastership lost") || strings.Contains(errw, "level=WARN") {
				t.Errorf("push warns on a normal close:\n%s", errw)
			}
			out, errw, err = runLBC(t, push...)
			if err != nil || !strings.Contains(out, "bmv2 "+addr+": up to date (0 writes)") {
				t.Fatalf("second push: %v\n%s%s", err, out, errw)
			}
			out, errw, err = runLBC(t, append([]string{"status"}, target...)...)
			if err != nil {
				t.Fatalf("status: %v\n%s", err, errw)
			}
			for _, want := range []string{"bmv2 " + addr + ": 1 service, 2 VIP rows, 8 backends", "service web (id 1)  ring 1021 slots", "eligible (primary, R-ELIG-3d): vm-a1, vm-a2, vm-d1, vm-d2", "vm-c2"} {
				if !strings.Contains(out, want) {
					t.Errorf("status lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// TestP4RTServerFlags: the server's flags fail with the flag's name and
// the fix.
func TestP4RTServerFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds lbc-testbench")
	}
	bin := built(t, "../lbc-testbench", "lbc-testbench")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--p4info", "/nonexistent/p4info.txtpb"}, "--p4info: open /nonexistent/p4info.txtpb: no such file or directory"},
		{[]string{"--p4info", "../../p4/build/lb.json"}, "--p4info ../../p4/build/lb.json: "},
		{[]string{"--no-pipeline", "--p4info", "../../p4/build/lb.p4info.txtpb"}, "--no-pipeline and --p4info: give one"},
		{[]string{"--device-id", "0"}, "--device-id 0: "},
		{[]string{"--listen", "256.0.0.1:1"}, "--listen: "},
		{[]string{"extra"}, `p4rt-server takes no arguments (got "extra")`},
	} {
		cmd := exec.Command(bin, append([]string{"p4rt-server"}, tc.args...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), tc.want) {
			t.Errorf("p4rt-server %v: %v, output %q; want exit 1 and %q", tc.args, err, out, tc.want)
		}
	}
}

// TestPushRingTableSize: --ring-table-size N pushes the embedded pipeline
// with a ring table of N entries (p4.BMv2Build), and the push checks the
// configuration against that size, as read back from the switch: one ring
// of 1,021 slots and room for it to change fit 2,048 entries, a ring of
// 16,384 does not, and the refusal names the flag that raises it.
func TestPushRingTableSize(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds lbc-testbench")
	}
	bin := built(t, "../lbc-testbench", "lbc-testbench")
	addr := startP4RTServer(t, bin, "--no-pipeline")
	target := []string{"--target", "bmv2", "--addr", addr, "--ring-table-size", "2048"}
	out, errw, err := runLBC(t, append([]string{"push", "-c", td + "seed001.yaml"}, target...)...)
	if err != nil || !strings.Contains(out, "bmv2 "+addr+": 1032 writes in ") ||
		!strings.Contains(errw, "pushed pipeline embedded p4/build (lb.p4info.txtpb, lb.json) with a ring table of 2048 entries") {
		t.Fatalf("push: %v\n%s%s", err, out, errw)
	}
	_, _, err = runLBC(t, append([]string{"push", "-c", "../../examples/weighted.yaml", "--health", "../../examples/weighted-health.yaml"}, target...)...)
	if err == nil || !strings.Contains(err.Error(), "LbIngress.ring holds (2048)") || !strings.Contains(err.Error(), "--ring-table-size N") {
		t.Fatalf("push of rings larger than the table: %v, want the ring table's 2048 and the flag", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"push", "-c", td + "seed001.yaml", "--target", "bmv2", "--addr", addr, "--ring-table-size", "100"}, "--ring-table-size: ring table size 100: give 2048..67108864"},
		{[]string{"push", "-c", td + "seed001.yaml", "--target", "bmv2", "--addr", addr, "--ring-table-size", "4096", "--p4info", "../../p4/build/lb.p4info.txtpb", "--device-config", "../../p4/build/lb.json"}, "--ring-table-size sizes lbc's embedded pipeline, not the one --p4info gives"},
	} {
		if _, _, err := runLBC(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
}
