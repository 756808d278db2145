package scenario

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/lbc-dev/lbc/internal/netns"
	"github.com/lbc-dev/lbc/internal/testenv"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets/bmv2"
)

// TestRouterAgentBesidePrimary runs the router agent against a live BMv2
// while a controller (lbc's bmv2 target, default role, election ID 1)
// is primary: before any pipeline a sync fails and writes nothing; after
// the controller pushed it, the agent writes every route once (a second
// sync writes none), the controller reads them back from the switch, and
// stays primary and able to write.
func TestRouterAgentBesidePrimary(t *testing.T) {
	needNetns(t)
	if _, err := exec.LookPath("simple_switch_grpc"); err != nil {
		testenv.SkipWithoutBMv2(t, err, "the mininet scenarios use the agent only with BMv2")
	}
	p4info, err := repoFile(p4Info)
	if err != nil {
		t.Skip(err)
	}
	devcfg, err := repoFile(p4JSON)
	if err != nil {
		t.Skip(err)
	}
	set := netns.NewSet(fmt.Sprintf("lbcra%d", os.Getpid()))
	t.Cleanup(func() { set.Close() })
	ns, err := set.Add("sw") // the thrift port, where built in, binds there
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("/tmp", "lbc-ra-") // short: a unix socket path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "p4rt.sock")
	var swlog bytes.Buffer
	sw := exec.Command("ip", "netns", "exec", ns, "simple_switch_grpc", "--device-id", "1", "--thrift-port", "9090",
		"--log-level", "off", "--no-p4", "--", "--grpc-server-addr", "unix:"+sock)
	sw.Stdout, sw.Stderr = &swlog, &swlog
	done, err := netns.StartTied(sw, syscall.SIGKILL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Process.Kill(); <-done })
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("simple_switch_grpc: no socket within 60 s: %s", swlog.String())
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	routes := []route{{netip.MustParsePrefix("10.98.0.0/24"), portClient, "02:00:00:00:00:0a"},
		{netip.MustParsePrefix("10.99.0.11/32"), portLAN, "02:00:00:00:00:11"}}
	a, err := newRouterAgent(sock, p4info, routes, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
	n, err := a.sync(sctx)
	scancel()
	if err == nil || n != 0 {
		t.Fatalf("sync before any pipeline: %d written, %v; want an error and none", n, err)
	}

	ctl, err := bmv2.Open(ctx, bmv2.Options{Options: runtime.Options{Addr: "unix:" + sock, DeviceID: 1, ElectionLow: controllerElection,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, P4InfoPath: p4info, DeviceConfigPath: devcfg})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	if n, err := a.sync(ctx); err != nil || n != len(routes) {
		t.Fatalf("sync after the pipeline: %d written, %v; want %d", n, err, len(routes))
	}
	if n, err := a.sync(ctx); err != nil || n != 0 {
		t.Errorf("second sync: %d written, %v; want none", n, err)
	}
	ft, err := ctl.Translator().Schema().Table("forward")
	if err != nil {
		t.Fatal(err)
	}
	es, err := ctl.Client().ReadTable(ctx, ft.Preamble.Id)
	if err != nil || len(es) != len(routes) {
		t.Fatalf("the controller reads %d forward entries (%v), want %d", len(es), err, len(routes))
	}
	if ok, err := ctl.Client().Primary(); !ok {
		t.Fatalf("the controller lost the primary to the agent: %v", err)
	}
	if _, err := ctl.SetFallbackPort(ctx, portFallback); err != nil {
		t.Errorf("the controller's write after the agent's: %v", err)
	}
}
