package bmv2

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/testenv"
	"github.com/lbc-dev/lbc/runtime"
)

// liveSwitch starts simple_switch_grpc with no program on loopback ports;
// the test's first Open pushes p4/build/lb.json. It skips, saying why, when
// the switch or the compiled program is absent.
func liveSwitch(t testing.TB) (addr string, opts Options) {
	t.Helper()
	const covered = "the same pushes run against testbench/p4rt above"
	bin, err := exec.LookPath("simple_switch_grpc")
	if err != nil {
		testenv.SkipWithoutBMv2(t, fmt.Errorf("simple_switch_grpc not on PATH: %w", err), covered)
	}
	if out, err := exec.Command(bin, "--version").CombinedOutput(); err != nil {
		testenv.SkipWithoutBMv2(t, fmt.Errorf("%s does not run (%v: %s)", bin, err, out), covered)
	}
	build := filepath.Join("..", "..", "p4", "build")
	for _, f := range []string{"lb.json", "lb.p4info.txtpb"} {
		if _, err := os.Stat(filepath.Join(build, f)); err != nil {
			testenv.SkipWithoutBMv2(t, fmt.Errorf("p4/build/%s absent (run make p4): %w", f, err), covered)
		}
	}
	grpcPort, thriftPort := freePort(t), freePort(t)
	addr = fmt.Sprintf("127.0.0.1:%d", grpcPort)
	ctx, cancel := context.WithCancel(context.Background())
	// Notifications default to /tmp/bmv2-<device-id>-notifications.ipc,
	// shared with every other switch of the machine: give this one its own.
	ipc := "ipc://" + filepath.Join(t.TempDir(), "notifications.ipc")
	cmd := exec.CommandContext(ctx, bin, "--no-p4", "--device-id", "1", "--thrift-port", fmt.Sprint(thriftPort), "--log-level", "off",
		"--notifications-addr", ipc, "--", "--grpc-server-addr", addr, "--cpu-port", fmt.Sprint(CPUPort))
	logf, _ := os.CreateTemp("", "simple_switch_grpc-*.log")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		logf.Close()
		os.Remove(logf.Name())
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(logf.Name())
			t.Fatalf("simple_switch_grpc did not listen on %s: %v\n%s", addr, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return addr, Options{Options: runtime.Options{Addr: addr, DeviceID: 1, ElectionLow: 1},
		P4InfoPath: filepath.Join(build, "lb.p4info.txtpb"), DeviceConfigPath: filepath.Join(build, "lb.json")}
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// The acceptance pushes against a live BMv2: pipeline push, full push,
// read-back, idempotent re-push, failover diff + flip, a restarted
// controller writing nothing, defaults and counters.
func TestLiveBMv2Push(t *testing.T) {
	_, opts := liveSwitch(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tg, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !tg.PipelinePushed() {
		t.Fatal("the pipeline was not pushed to a switch with no program")
	}
	cfg := load(t, testConfig)
	if _, err := push(t, tg, cfg, nil, 0); err != nil {
		t.Fatal(err)
	}
	held := mustHold(t, tg, compile(t, cfg, nil, nil, 0))
	if d, err := push(t, tg, cfg, nil, 0); err != nil || !d.Empty() {
		t.Fatalf("re-push: %d changes, %v", len(d.Changes), err)
	}
	down := compiler.State{}
	down.SetHealthy("vm-a1", false)
	down.SetHealthy("vm-a2", false)
	d, err := push(t, tg, cfg, down, 1)
	if err != nil {
		t.Fatal(err)
	}
	if c := d.Counts()[compiler.TableService]; c != [3]int{0, 1, 0} {
		t.Fatalf("failover service writes %v, want one flip", c)
	}
	mustHold(t, tg, compile(t, cfg, down, held, 1))
	if _, err := tg.SetFallbackPort(ctx, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Counters(ctx); err != nil {
		t.Fatal(err)
	}
	tg.Close()

	again, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.PipelinePushed() {
		t.Fatal("the same pipeline was pushed again (cookie not kept)")
	}
	if d, err := push(t, again, cfg, down, 2); err != nil || !d.Empty() {
		t.Fatalf("restarted push: %d changes, %v", len(d.Changes), err)
	}
}

// BenchmarkLiveBMv2PushFullRing and the failover diff against a live BMv2.
func BenchmarkLiveBMv2(b *testing.B) {
	_, opts := liveSwitch(b)
	ctx := context.Background()
	cfg := benchConfig(b)
	full := compile(b, cfg, nil, nil, 0)
	down := compiler.State{}
	down.SetHealthy("vm-3", false)
	failed := compile(b, cfg, down, full, 0)
	tg, err := Open(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer tg.Close()
	b.Run("full-ring", func(b *testing.B) {
		var el time.Duration
		for i := 0; i < b.N; i++ {
			start := time.Now()
			if _, err := tg.Apply(ctx, compiler.DiffIR(nil, full)); err != nil {
				b.Fatal(err)
			}
			el += time.Since(start)
			if _, err := tg.Apply(ctx, compiler.DiffIR(full, &compiler.IR{})); err != nil { // back to empty, untimed
				b.Fatal(err)
			}
		}
		report(b, len(compiler.DiffIR(nil, full).Changes), el)
	})
	b.Run("failover", func(b *testing.B) {
		var el time.Duration
		d := compiler.DiffIR(full, failed)
		for i := 0; i < b.N; i++ {
			if _, err := tg.Apply(ctx, compiler.DiffIR(nil, full)); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if _, err := tg.Apply(ctx, d); err != nil {
				b.Fatal(err)
			}
			el += time.Since(start)
			if _, err := tg.Apply(ctx, compiler.DiffIR(failed, &compiler.IR{})); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(d.Changes))*float64(b.N)/el.Seconds(), "entities/s")
		b.ReportMetric(float64(el.Microseconds())/1000/float64(b.N), "ms/push")
		b.ReportMetric(0, "ns/op")
	})
}
