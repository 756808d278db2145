package scenario

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/targets/xdp"
)

// The flags lbc run gets in process mode open the targets the
// environment opens in process: the XDP datapath with its pins, state,
// mode and egress, the switch through the proxy socket with the pushed
// pipeline's files and the fallback port, and the in-process controller's
// timers.
func TestLBCRunArgs(t *testing.T) {
	x := xdpRunArgs(xdp.Options{Iface: "f1-eth0", Egress: "f1-eth1", Mode: xdp.ModeNative, PinDir: "/tmp/d/bpffs/xdp", StateDir: "/tmp/d/xdp-state"})
	want := []string{"--target", "xdp=f1-eth0", "--mode", "native", "--pin-dir", "/tmp/d/bpffs/xdp", "--state-dir", "/tmp/d/xdp-state", "--ring-entries", "1048576", "--egress", "f1-eth1"}
	if !slices.Equal(x, want) {
		t.Errorf("xdpRunArgs = %q, want %q", x, want)
	}
	if x := xdpRunArgs(xdp.Options{Iface: "lb0", Mode: xdp.ModeNative, PinDir: "p", StateDir: "s"}); slices.Contains(x, "--egress") {
		t.Errorf("no egress interface, yet %q", x)
	}
	b := bmv2RunArgs("/tmp/m/p4rt-lbc.sock", "lb.p4info.txtpb", "lb.json")
	want = []string{"--target", "bmv2=unix:/tmp/m/p4rt-lbc.sock", "--device-id", "1", "--election-id", "1",
		"--p4info", "lb.p4info.txtpb", "--device-config", "lb.json", "--fallback-port", "3"}
	if !slices.Equal(b, want) {
		t.Errorf("bmv2RunArgs = %q, want %q", b, want)
	}
	all := strings.Join(lbcRunArgs("/o/lb.yaml", x), " ")
	for _, w := range []string{"run -c /o/lb.yaml --target xdp=f1-eth0", "--metrics " + lbcRunMetrics, "--debounce 50ms",
		"--watch-interval 0", "--verify-interval 1s", "--retry-interval 500ms"} {
		if !strings.Contains(all, w) {
			t.Errorf("lbc run %s: lacks %q", all, w)
		}
	}
}

// controller: is in-process (the default) or process; anything else is
// rejected naming the field and both values; a fleet scenario has no
// such field (its nodes are lbc run processes).
func TestControllerField(t *testing.T) {
	const base = "name: c\nservice: {name: s, protocol: TCP, ports: [80], backends: [{name: p, endpoints: [{name: a}]}]}\nsteps: [{traffic: {rate: 1, duration: 1s}}]\n"
	for _, tc := range []struct{ field, want, err string }{
		{"", ControllerInProcess, ""},
		{"controller: in-process\n", ControllerInProcess, ""},
		{"controller: process\n", ControllerProcess, ""},
		{"controller: subprocess\n", "", `controller: "subprocess": want in-process`},
	} {
		sc, err := Parse("c.yaml", []byte(base+tc.field))
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "or process")):
			t.Errorf("%q: error %v, want one containing %q and naming both values", tc.field, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.field, err)
		case tc.err == "" && sc.Controller != tc.want:
			t.Errorf("%q: controller %q, want %q", tc.field, sc.Controller, tc.want)
		}
	}
}

// checkControllerKill fails a kill: controller of a process-mode
// scenario that was not a process kill: none killed (the in-process
// kind), a process that exited otherwise than by SIGKILL, no new
// process, or the same PID after; it passes a real one.
func TestCheckControllerKill(t *testing.T) {
	ev := func(k *ControllerKill) FaultEvent {
		return FaultEvent{T: fsec(1), End: fsec(4), Kind: "kill", What: "controller", Fault: "kill controller for 3s", Killed: k}
	}
	for _, tc := range []struct {
		name string
		ev   FaultEvent
		mode string
		ok   bool
		msg  string
	}{
		{"process kill", ev(&ControllerKill{PID: 10, NewPID: 11, Died: diedOfSIGKILL}), ControllerProcess, true, "pid 11) took over"},
		{"in-process kill in a process scenario", ev(&ControllerKill{Died: "in-process: its context cancelled"}), ControllerProcess, false, "no lbc run process was killed"},
		{"no record", ev(nil), ControllerProcess, false, "no lbc run process was killed"},
		{"clean exit", ev(&ControllerKill{PID: 10, NewPID: 11, Died: "exit status 0"}), ControllerProcess, false, `ended "exit status 0"`},
		{"not started again", ev(&ControllerKill{PID: 10, Died: diedOfSIGKILL}), ControllerProcess, false, "no lbc run was started again"},
		{"same pid", ev(&ControllerKill{PID: 10, NewPID: 10, Died: diedOfSIGKILL}), ControllerProcess, false, "not a new process"},
		{"in-process scenario: not checked", ev(&ControllerKill{Died: "in-process: its context cancelled"}), ControllerInProcess, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &stepView{st: &Step{Name: "kill"}, sr: &StepResult{End: fsec(8)}, res: &Result{Controller: tc.mode}, where: `step 1 "kill"`}
			v.faults = []FaultEvent{tc.ev}
			checkControllerKill(v)
			if tc.mode == ControllerInProcess {
				if len(v.sr.Checks) != 0 {
					t.Fatalf("checks %+v in an in-process scenario", v.sr.Checks)
				}
				return
			}
			if len(v.sr.Checks) != 1 {
				t.Fatalf("checks %+v, want one", v.sr.Checks)
			}
			c := v.sr.Checks[0]
			if c.OK != tc.ok || !strings.Contains(c.Msg, tc.msg) {
				t.Errorf("check %+v: want ok %v and %q", c, tc.ok, tc.msg)
			}
		})
	}
}

// A removed backend is applied once the service no longer lists it as a
// backend new connections go to: gone, or draining (R-DRAIN).
func TestRemovedApplied(t *testing.T) {
	st := func(bs ...controller.BackendStatus) controller.Status {
		return controller.Status{Services: []controller.ServiceStatus{{Name: "api", Backends: bs}}}
	}
	for _, tc := range []struct {
		name string
		st   controller.Status
		want bool
	}{
		{"still active", st(controller.BackendStatus{Name: "w3"}, controller.BackendStatus{Name: "w1"}), false},
		{"draining", st(controller.BackendStatus{Name: "w3", Draining: true}), true},
		{"gone", st(controller.BackendStatus{Name: "w1"}), true},
		{"service missing", controller.Status{}, false},
	} {
		if got := removedApplied(tc.st, "api", "w3"); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestProcessControllerReloadAndRestart runs a scenario with controller:
// process on the namespace topology through the faults that talk to the
// controller: a backend removed from lb.yaml (lbc run reloads on SIGHUP
// and drains it), a clean restart (SIGTERM, then a new process reads the
// datapath back and writes nothing) and a kill (SIGKILL).
func TestProcessControllerReloadAndRestart(t *testing.T) {
	needNetns(t)
	lbc := buildLBC(t)
	sc, err := Parse("process.yaml", []byte(`
name: process
controller: process
service:
  name: api
  protocol: TCP
  ports: [80]
  connectionTrackingPolicy: {trackingMode: PER_CONNECTION}
  connectionDraining: {drainingTimeoutSec: 1}
  healthCheck: {type: HTTP, checkIntervalSec: 1, healthyThreshold: 1, unhealthyThreshold: 1}
  ringSize: 1021
  backends: [{name: pool, endpoints: [{name: a}, {name: b}, {name: c}]}]
steps:
  - name: c removed
    faults: [{remove: c}]
    traffic: {rate: 30, duration: 3s}
    expect:
      failover: {within: 2000ms}
      share: {expect: {a: 0.5, b: 0.5}}
      established: {mayBreak: [c], rule: R-DRAIN}
  - name: lbc run restarted
    faults: [{restart: controller}]
    traffic: {rate: 30, duration: 3s, keep: 0.2}
    expect:
      share: {expect: {a: 0.5, b: 0.5}}
  - name: lbc run killed
    faults: [{kill: controller, for: 1s}]
    traffic: {rate: 30, duration: 4s}
    expect:
      blackHole: {max: 500ms}
      converge: {within: 2s, maxWrites: 0}
`))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	res, err := Run(t.Context(), sc, Options{OutDir: out, Progress: &logWriter{t: t}, LBC: lbc, Prefix: fmt.Sprintf("lbcsc%dp", os.Getpid())})
	var ae *AssertionError
	if err != nil && !errors.As(err, &ae) {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatalf("assertions failed: %v", err)
	}
	var restart, kill *FaultEvent
	for i, f := range res.Faults {
		switch f.Kind {
		case "remove":
			if f.Err != "" {
				t.Errorf("remove: %s", f.Err)
			}
		case "restart":
			restart = &res.Faults[i]
		case "kill":
			kill = &res.Faults[i]
		}
	}
	if restart == nil || !strings.Contains(restart.Note, "stopped with SIGTERM, started again (pid") {
		t.Errorf("restart event %+v: want lbc run stopped with SIGTERM and a new pid", restart)
	}
	checkProcessKills(t, sc, res)
	if kill == nil {
		t.Fatal("no kill event")
	}
	log, err := os.ReadFile(out + "/controller.log")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "lbc run starts"); n != 3 {
		t.Errorf("controller.log has %d lbc run starts, want 3 (start, restart, after the kill)", n)
	}
	if !strings.Contains(string(log), "SIGHUP: reloading") {
		t.Errorf("controller.log lacks the SIGHUP reload")
	}
}
