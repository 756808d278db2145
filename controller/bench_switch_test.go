package controller_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/internal/testenv"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/testbench/p4rt"
)

// Issue 25, items 1–2, measured:
//
//	go test -run - -bench 'SwitchRestartRecovery|SwitchLossDetection' -benchtime 3x ./controller/
//
// BenchmarkSwitchRestartRecovery: the switch dies and comes back empty
// (the in-process P4Runtime server stopped and started again on its
// address; a live simple_switch_grpc killed with SIGKILL and started
// again, when on PATH); s/recovery is from the moment it accepts
// connections again to the controller announcing its VIP as served, i.e.
// the pipeline pushed and every table written and active, with web's ring
// at the default 65,537 slots (both halves: 131,085 writes). The P4Runtime
// client has lbc run's defaults (reconnect backoff 100 ms .. 1 s).
func BenchmarkSwitchRestartRecovery(b *testing.B) {
	const ring = 65537
	b.Run("p4rt", func(b *testing.B) {
		srv := p4rt.StartEmpty(b, "127.0.0.1:0")
		addr := srv.Addr()
		r, _ := healthyRigRing(b, defaultBackoff(embeddedSwitchOptions(addr)), ring)
		var total time.Duration
		for i := 0; i < b.N; i++ {
			srv.Stop()
			r.ann.waitServing(b, false, r.logs)
			srv = p4rt.StartEmpty(b, addr)
			start := time.Now()
			r.ann.waitServing(b, true, r.logs)
			took := time.Since(start)
			total += took
			b.Logf("sample %d: accepting connections → VIPs served in %v%s", i+1, took, phases(r.logs.String()))
		}
		b.ReportMetric(total.Seconds()/float64(b.N), "s/recovery")
		b.ReportMetric(0, "ns/op")
	})
	b.Run("bmv2", func(b *testing.B) {
		sw := startBMv2Process(b)
		r, _ := healthyRigRing(b, defaultBackoff(embeddedSwitchOptions(sw.addr)), ring)
		var total time.Duration
		for i := 0; i < b.N; i++ {
			sw.kill()
			r.ann.waitServing(b, false, r.logs)
			start := sw.start(b) // when it accepts connections
			r.ann.waitServing(b, true, r.logs)
			took := time.Since(start)
			total += took
			b.Logf("sample %d: accepting connections → VIPs served in %v%s", i+1, took, phases(r.logs.String()))
		}
		b.ReportMetric(total.Seconds()/float64(b.N), "s/recovery")
		b.ReportMetric(0, "ns/op")
	})
}

// BenchmarkSwitchLossDetection: ms/detection from the switch going away to
// the controller withdrawing its VIP (and /healthz 503): "kill", the
// in-process server stopped (its connections close, as a dead process's
// do); "silent", its bytes no longer passed (a partition or a hung
// switch: only the heartbeat can tell, bound 1 s).
func BenchmarkSwitchLossDetection(b *testing.B) {
	b.Run("kill", func(b *testing.B) {
		srv := p4rt.StartEmpty(b, "127.0.0.1:0")
		addr := srv.Addr()
		r, _ := healthyRig(b, embeddedSwitchOptions(addr))
		var total time.Duration
		for i := 0; i < b.N; i++ {
			start := time.Now()
			srv.Stop()
			r.ann.waitServing(b, false, r.logs)
			total += time.Since(start)
			srv = p4rt.StartEmpty(b, addr)
			r.ann.waitServing(b, true, r.logs)
		}
		b.ReportMetric(float64(total.Microseconds())/1e3/float64(b.N), "ms/detection")
		b.ReportMetric(0, "ns/op")
	})
	b.Run("silent", func(b *testing.B) {
		srv := p4rt.StartEmpty(b, "127.0.0.1:0")
		fz := startFreezer(b, srv.Addr())
		r, _ := healthyRig(b, embeddedSwitchOptions(fz.Addr()))
		var total time.Duration
		for i := 0; i < b.N; i++ {
			start := time.Now()
			fz.freeze()
			r.ann.waitServing(b, false, r.logs)
			total += time.Since(start)
			fz.thaw()
			r.ann.waitServing(b, true, r.logs)
		}
		b.ReportMetric(float64(total.Microseconds())/1e3/float64(b.N), "ms/detection")
		b.ReportMetric(0, "ns/op")
	})
}

// phases returns the log lines of the last recovery: the new session,
// the pipeline pushed again, and the push of every table with its time.
func phases(logs string) string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		for _, k := range []string{"answers again", "had lost lbc's program", "msg=pushed"} {
			if strings.Contains(l, k) {
				out = append(out, l)
			}
		}
	}
	if len(out) > 3 {
		out = out[len(out)-3:]
	}
	return "\n" + strings.Join(out, "\n")
}

// defaultBackoff gives the client lbc run's reconnect backoff.
func defaultBackoff(o bmv2.Options) bmv2.Options {
	o.MinBackoff, o.MaxBackoff = 0, 0
	return o
}

// bmv2Process is simple_switch_grpc on free loopback ports, with no
// pipeline, that a benchmark kills and starts again.
type bmv2Process struct {
	bin, addr, ipc, log string
	thrift              int
	cmd                 *exec.Cmd
}

func startBMv2Process(b testing.TB) *bmv2Process {
	bin, err := exec.LookPath("simple_switch_grpc")
	if err != nil {
		testenv.SkipWithoutBMv2(b, fmt.Errorf("simple_switch_grpc not on PATH: %w", err), "the in-process P4Runtime server runs the same checks")
	}
	free := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	dir := b.TempDir()
	p := &bmv2Process{bin: bin, addr: fmt.Sprintf("127.0.0.1:%d", free()), thrift: free(),
		ipc: "ipc://" + filepath.Join(dir, "notifications.ipc"), log: filepath.Join(dir, "switch.log")}
	p.start(b)
	b.Cleanup(p.kill)
	return p
}

// start runs the switch and returns when it accepts connections.
func (p *bmv2Process) start(b testing.TB) time.Time {
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	p.cmd = exec.Command(p.bin, "--no-p4", "--device-id", "1", "--thrift-port", fmt.Sprint(p.thrift), "--log-level", "off",
		"--notifications-addr", p.ipc, "--", "--grpc-server-addr", p.addr, "--cpu-port", "255")
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := net.DialTimeout("tcp", p.addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return time.Now()
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(p.log)
			b.Fatalf("simple_switch_grpc did not listen on %s: %v\n%s", p.addr, err, out)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (p *bmv2Process) kill() {
	if p.cmd != nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		p.cmd = nil
	}
}
