package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lbc-dev/lbc/internal/netns"
	"github.com/lbc-dev/lbc/internal/testenv"
	"github.com/lbc-dev/lbc/testbench/scenarios"
)

// logWriter sends progress lines to the test log.
type logWriter struct {
	t   *testing.T
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			return len(p), nil
		}
		w.t.Log(strings.TrimRight(line, "\n"))
	}
}

// reportDir is a scenario run's report directory. It is removed when the
// test passes and kept when it fails, so that the failing run's report
// (report.md, report.json, the controller's log, the plots) can be read
// after the test: t.TempDir would delete it with the rest.
func reportDir(t *testing.T, name string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "lbc-scenario-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the failing run's report is kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

func needNetns(t *testing.T) {
	t.Helper()
	if err := netns.Available(); err != nil {
		t.Skipf("the namespace testbench needs root and iproute2: %v (assertion logic is covered by TestShareAssertionMessage)", err)
	}
}

// TestScenariosNetns runs every shipped scenario on the namespace topology
// (fallback-only mode: the XDP datapath alone) and requires every
// assertion to pass. Progress and every check are printed.
func TestScenariosNetns(t *testing.T) {
	needNetns(t)
	lbc := buildLBC(t) // controller: process scenarios run it
	ran, total := 0, 0
	for i, name := range scenarios.Names() {
		total++
		if !testenv.Full() && !mininetSample[name] {
			continue
		}
		ran++
		t.Run(name, func(t *testing.T) {
			data, _ := scenarios.Get(name)
			sc, err := Parse(name+".yaml", data)
			if err != nil {
				t.Fatal(err)
			}
			if sc.Fleet != nil {
				t.Skip("a fleet scenario: TestFleetScenarios runs it")
			}
			out := reportDir(t, name+"-netns")
			res, err := Run(t.Context(), sc, Options{Topology: "netns", OutDir: out, Progress: &logWriter{t: t},
				Prefix: fmt.Sprintf("lbcsc%d%c", os.Getpid(), 'a'+i), LBC: lbc})
			if err != nil {
				t.Fatalf("scenario %s: %v", name, err)
			}
			checkProcessKills(t, sc, res)
			checks := 0
			for _, s := range res.Steps {
				checks += len(s.Checks)
			}
			if checks == 0 {
				t.Fatalf("scenario %s ran no assertion", name)
			}
			for _, f := range []string{"report.md", "report.json", ConnectionsPNG, RingSharesPNG} {
				st, err := os.Stat(filepath.Join(out, f))
				if err != nil || st.Size() == 0 {
					t.Errorf("report file %s missing or empty: %v", f, err)
				}
			}
			t.Logf("scenario %s passed: %d steps, %d checks, %d flows in %.1f s", name, len(res.Steps), checks, len(res.Flows), res.Took.Seconds())
		})
	}
}

// TestBrokenAssertionFails: a scenario whose stated shares are wrong (the
// weights are equal, the scenario claims 80/10/10) fails, and the message
// names the step, the backend and the numbers.
func TestBrokenAssertionFails(t *testing.T) {
	needNetns(t)
	sc, err := Parse("broken.yaml", []byte(`
name: broken
service:
  name: api
  protocol: TCP
  ports: [80]
  localityLbPolicy: WEIGHTED_MAGLEV
  healthCheck: {type: HTTP, checkIntervalSec: 1, healthyThreshold: 1, unhealthyThreshold: 1}
  ringSize: 1021
  backends: [{name: pool, endpoints: [{name: w1}, {name: w2}, {name: w3}]}]
weights: {w1: 100, w2: 100, w3: 100}
steps:
  - name: claims 80 percent on w1
    traffic: {rate: 40, duration: 4s}
    expect:
      share: {expect: {w1: 0.8, w2: 0.1, w3: 0.1}}
      eligible: [w1]
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(t.Context(), sc, Options{OutDir: t.TempDir(), Progress: &logWriter{t: t}, Prefix: fmt.Sprintf("lbcsc%dz", os.Getpid())})
	var ae *AssertionError
	if !errors.As(err, &ae) {
		t.Fatalf("run returned %v, want an assertion failure", err)
	}
	t.Logf("the run failed as it must:\n%v", err)
	var share, elig *Failure
	for i, f := range ae.Failures {
		switch {
		case f.Check == "share" && f.Backend == "w1":
			share = &ae.Failures[i]
		case f.Check == "eligible":
			elig = &ae.Failures[i]
		}
	}
	if share == nil || elig == nil {
		t.Fatalf("failures %v: want a share failure on w1 and an eligible-set failure", ae.Failures)
	}
	for _, want := range []string{`step 1 "claims 80 percent on w1"`, "backend w1", "new connections", "expected 80.0 %"} {
		if !strings.Contains(share.Msg, want) {
			t.Errorf("share failure %q lacks %q", share.Msg, want)
		}
	}
	if !strings.Contains(elig.Msg, "{w1, w2, w3}") || !strings.Contains(elig.Msg, "want {w1}") {
		t.Errorf("eligible failure %q does not give both sets", elig.Msg)
	}
	if len(res.Failures) != len(ae.Failures) {
		t.Errorf("result lists %d failures, error %d", len(res.Failures), len(ae.Failures))
	}
}

// TestScenariosMininet runs every shipped scenario on the mininet topology
// (BMv2 switch + XDP fallback host) where simple_switch_grpc is installed,
// and checks that the report splits packets between the two datapaths.
func TestScenariosMininet(t *testing.T) {
	if err := MininetAvailable(); err != nil {
		const covered = "the same scenarios run on the namespace topology in TestScenariosNetns"
		if _, lerr := exec.LookPath("simple_switch_grpc"); lerr != nil {
			testenv.SkipWithoutBMv2(t, err, covered) // fails with LBC_REQUIRE_BMV2=1
		}
		t.Skipf("mininet + BMv2 testbench: %v (%s)", err, covered)
	}
	lbc := buildLBC(t) // controller: process scenarios run it
	ran, total := 0, 0
	for i, name := range scenarios.Names() {
		total++
		if !testenv.Full() && !mininetSample[name] {
			continue
		}
		ran++
		t.Run(name, func(t *testing.T) {
			data, _ := scenarios.Get(name)
			sc, err := Parse(name+".yaml", data)
			if err != nil {
				t.Fatal(err)
			}
			if sc.Fleet != nil {
				t.Skip("a fleet scenario runs on namespaces only: TestFleetScenarios")
			}
			out := reportDir(t, name+"-mininet")
			res, err := Run(t.Context(), sc, Options{Topology: "mininet", OutDir: out, Progress: &logWriter{t: t},
				Prefix: fmt.Sprintf("lbcmn%d%c", os.Getpid(), 'a'+i), LBC: lbc})
			if err != nil {
				t.Fatalf("scenario %s on mininet: %v", name, err)
			}
			checkProcessKills(t, sc, res)
			if res.Datapaths["switch"] == 0 {
				t.Errorf("the switch carried no packet: %v", res.Datapaths)
			}
			frags := 0
			for _, f := range res.Flows {
				if f.Kind == "frag" {
					frags++
				}
			}
			if frags > 0 && res.Datapaths["xdp"] == 0 {
				t.Errorf("%d fragmented datagrams, yet the fallback host carried no packet: %v", frags, res.Datapaths)
			}
			t.Logf("scenario %s passed on mininet; packets by datapath: %s", name, datapathShares(res.Datapaths))
		})
	}
	testenv.SkipRest(t, ran, total, "scenarios on mininet", "./testbench/scenario")
}

// mininetSample are the scenarios plain go test runs on mininet (all of
// them run on namespaces in TestScenariosNetns, and on mininet with
// LBC_FULL_LIVE=1): failover through the switch, and fragments that take
// the XDP fallback.
var mininetSample = map[string]bool{"seed001-failover": true, "udp-fragments": true}

// checkProcessKills: in a controller: process scenario every kill:
// controller fault killed an lbc run process with SIGKILL and a new
// process (another PID) took over, and the fault's note says so; at least
// one such kill happened when the scenario has one.
func checkProcessKills(t *testing.T, sc *Scenario, res *Result) {
	t.Helper()
	if sc.Controller != ControllerProcess {
		return
	}
	want := 0
	for _, st := range sc.Steps {
		for _, f := range st.Faults {
			if f.Kill == "controller" {
				want++
			}
		}
	}
	got := 0
	for _, ev := range res.Faults {
		if ev.Kind != "kill" || ev.What != "controller" {
			continue
		}
		got++
		k := ev.Killed
		if k == nil || k.PID == 0 || k.NewPID == 0 || k.NewPID == k.PID || k.Died != diedOfSIGKILL {
			t.Errorf("%s: not a process kill: %+v", ev.Fault, k)
			continue
		}
		if wantNote := fmt.Sprintf("lbc run (pid %d) killed with SIGKILL", k.PID); !strings.Contains(ev.Note, wantNote) {
			t.Errorf("%s: note %q lacks %q", ev.Fault, ev.Note, wantNote)
		}
		t.Logf("%s: lbc run pid %d %s, pid %d took over", ev.Fault, k.PID, k.Died, k.NewPID)
	}
	if got != want {
		t.Errorf("%d kill: controller faults happened, the scenario has %d", got, want)
	}
}
