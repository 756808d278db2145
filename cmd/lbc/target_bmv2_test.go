package main

import (
	"bytes"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/testbench/p4rt"
	p4v1 "github.com/p4lang/p4runtime/go/p4/v1"
	"github.com/urfave/cli/v2"
)

// lbc push --target bmv2 against the in-process P4Runtime server: the first
// push installs the pipeline and writes every table, a second identical
// push writes nothing, a failover push writes the new ring, one flip and
// the old half's deletes,
// and status reads it back.
func TestPushBMv2(t *testing.T) {
	srv := startP4RT(t)
	args := []string{"--target", "bmv2", "--addr", srv.Addr(), "--p4info", "../../p4/build/lb.p4info.txtpb", "--device-config", "../../p4/build/lb.json"}
	push := func(extra ...string) string {
		t.Helper()
		out, errw, err := runLBC(t, append(append([]string{"push", "-c", "../../examples/failover.yaml", "--fallback-port", "3"}, extra...), args...)...)
		if err != nil {
			t.Fatalf("push: %v\n%s", err, errw)
		}
		return out
	}
	out := push()
	if !strings.Contains(out, "ring: 1024 insert") || !strings.Contains(out, "service: 1 insert") {
		t.Fatalf("first push output:\n%s", out)
	}
	if out := push(); !strings.Contains(out, "up to date (0 writes)") {
		t.Fatalf("second push output:\n%s", out)
	}
	srv.ResetLog()
	out = push("--health", "../../examples/failover-health.yaml")
	if !strings.Contains(out, "service: 0 insert, 1 modify, 0 delete") || !strings.Contains(out, "backend: 0 insert, 3 modify, 0 delete") {
		t.Fatalf("failover push output:\n%s", out)
	}
	// The flip comes after every ring insert and before the old half's
	// deletes, which end the push (one half at rest).
	log := srv.Log()
	// The ring's seal (issue 36) is cleared before any other write, and
	// set again after the last.
	if n := len(log); n < 3 || log[0].Table != "service" || strings.Contains(string(log[0].Entry.GetMetadata()), `"ring"`) ||
		log[n-1].Table != "service" || !strings.Contains(string(log[n-1].Entry.GetMetadata()), `"ring"`) {
		t.Fatalf("failover push: %d writes; want the seal cleared first and set last", n)
	}
	log = log[1 : len(log)-1]
	flip := slices.IndexFunc(log, func(e p4rt.LogEntry) bool { return e.Table == "service" })
	if flip < 0 || log[len(log)-1].Table != "ring" || log[len(log)-1].Type != p4v1.Update_DELETE {
		t.Fatalf("failover push: flip at %d, last write %s %v; want the flip, then the old half's deletes", flip, log[len(log)-1].Table, log[len(log)-1].Type)
	}
	for i, e := range log {
		if e.Table == "ring" && (e.Type == p4v1.Update_DELETE) != (i > flip) {
			t.Fatalf("failover push: ring %v at %d, the flip at %d", e.Type, i, flip)
		}
	}
	st, errw, err := runLBC(t, append([]string{"status"}, args[:4]...)...)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, errw)
	}
	if !strings.Contains(st, "web") || !strings.Contains(st, "vm-b1") {
		t.Fatalf("status output:\n%s", st)
	}
	if _, _, err := runLBC(t, "push", "--example", "--target", "bmv2", "--addr", srv.Addr(), "--election-id", "0"); err == nil || !strings.Contains(err.Error(), "election") {
		t.Fatalf("--election-id 0: %v", err)
	}
}

// A backup `lbc run --target bmv2 --fallback-port N` opens without writing:
// only the primary may, and it sets the port. (The backup used to try the
// write whenever the switch held another port, and fail on the refusal.)
func TestBMv2BackupLeavesFallbackPortToPrimary(t *testing.T) {
	srv := startP4RT(t)
	ctx := t.Context()
	primary, err := bmv2.Open(ctx, bmv2.Options{Options: runtime.Options{Addr: srv.Addr(), DeviceID: 1, ElectionLow: 10, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		P4InfoPath: "../../p4/build/lb.p4info.txtpb", DeviceConfigPath: "../../p4/build/lb.json"})
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close()
	if _, err := primary.SetFallbackPort(ctx, 3); err != nil {
		t.Fatal(err)
	}
	srv.ResetLog()
	var errw bytes.Buffer
	var opened targets.Target
	app := &cli.App{Name: "lbc", ErrWriter: &errw, Writer: io.Discard, Commands: []*cli.Command{{
		Name: "run", Flags: bmv2Adapter.Flags, // runShared: the command is "run"
		Action: func(c *cli.Context) error {
			var err error
			opened, err = bmv2Adapter.Open(c)
			return err
		},
	}}}
	if err := app.Run([]string{"lbc", "run", "--addr", srv.Addr(), "--election-id", "1", "--fallback-port", "4"}); err != nil {
		t.Fatalf("backup open: %v\n%s", err, errw.String())
	}
	defer opened.Close()
	if opened.(*bmv2.Target).Primary() {
		t.Fatal("the lower election ID became primary")
	}
	if !strings.Contains(errw.String(), "backup controller: the primary sets the fallback port") {
		t.Fatalf("stderr: %s", errw.String())
	}
	if log := srv.Log(); len(log) != 0 {
		t.Fatalf("the backup wrote %d entities", len(log))
	}
}
