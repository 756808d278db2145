package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/testbench/p4rt"
	"github.com/lbc-dev/lbc/testbench/p4rt/readback"
)

// activeRings records, after every update the switch applies, the ring
// each service's row points at (when it changed), and the updates.
type activeRings struct {
	mu      sync.Mutex
	updates int
	seen    [][]uint32 // web's active ring, each time it changed
	onK     func(n int)
}

func (a *activeRings) check(t *testing.T) func(v p4rt.View) {
	return func(v p4rt.View) {
		ir, err := readback.IR(v)
		if err != nil {
			t.Error(err)
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		a.updates++
		if s := ir.ServiceByName("web"); s != nil {
			have := ir.ActiveRing(s)
			if n := len(a.seen); n == 0 || !slices.Equal(a.seen[n-1], have) {
				a.seen = append(a.seen, slices.Clone(have))
			}
		}
		if a.onK != nil {
			a.onK(a.updates)
		}
	}
}

func readIR(t *testing.T, srv *p4rt.Server) *compiler.IR {
	t.Helper()
	var ir *compiler.IR
	var err error
	srv.Snapshot(func(v p4rt.View) { ir, err = readback.IR(v) })
	if err != nil {
		t.Fatal(err)
	}
	return ir
}

// TestRunKilledMidPushRestartFinishes (issue 25, item 5, through the
// built binary): lbc run, a process of its own, is killed with SIGKILL
// while it writes the new ring of a failover into the inactive half (in
// batches of 10, killed at the 40th update). The switch keeps serving
// the old ring: its service row was never flipped, and no update ever
// made a half-written half active. lbc run started again reads the
// switch back and finishes the job, writing only what was missing.
func TestRunKilledMidPushRestartFinishes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds lbc")
	}
	bin := built(t, ".", "lbc")
	port, up := loopbackBackends(t, "127.0.0.151", "127.0.0.152", "127.0.0.153")
	cfg := filepath.Join(t.TempDir(), "lb.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(runTestConfig, port, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startP4RT(t)
	run := func() (*exec.Cmd, string, *syncWriter, chan error) {
		addr := freeAddr(t)
		logs := &syncWriter{}
		cmd := exec.Command(bin, "run", "-c", cfg, "--target", "bmv2", "--addr", srv.Addr(), "--batch-size", "10",
			"--metrics", addr, "--watch-interval", "0", "--verify-interval", "0", "--debounce", "10ms")
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done, exited := make(chan error, 1), make(chan struct{})
		go func() { done <- cmd.Wait(); close(exited) }()
		t.Cleanup(func() { cmd.Process.Kill(); <-exited })
		return cmd, "http://" + addr, logs, done
	}
	cmd1, base1, logs1, done1 := run()
	waitRunHealthz(t, base1, http.StatusOK, done1, logs1)
	before := readIR(t, srv)
	old := before.ActiveRing(before.ServiceByName("web"))

	rings := &activeRings{}
	const k = 40
	rings.onK = func(n int) {
		if n == k {
			cmd1.Process.Kill() // SIGKILL, in the middle of the push
		}
	}
	srv.ResetLog()
	srv.OnUpdate(rings.check(t))
	up["127.0.0.151"].Store(false) // a1 fails: its slots move to a2
	if err := <-done1; err == nil {
		t.Fatalf("lbc run was not killed\n%s", logs1.String())
	}
	cut := readIR(t, srv)
	applied := len(srv.Log())
	if applied < k || applied >= k+10 {
		t.Fatalf("the switch applied %d updates of the failover, want the kill inside a batch after the %dth", applied, k)
	}
	if have := cut.ActiveRing(cut.ServiceByName("web")); !slices.Equal(have, old) {
		t.Fatalf("after the kill the switch does not serve the old ring")
	}

	srv.ResetLog()
	_, base2, logs2, done2 := run()
	waitRunHealthz(t, base2, http.StatusOK, done2, logs2)
	after := readIR(t, srv)
	final := after.ActiveRing(after.ServiceByName("web"))
	if slices.Equal(final, old) {
		t.Fatalf("the restarted lbc run did not finish the failover")
	}
	for _, b := range after.Backends {
		if b.Name == "a1" && slices.Contains(final, b.ID) {
			t.Fatalf("a1 (failed) is still in the ring the switch serves\n%s", logs2.String())
		}
	}
	rings.mu.Lock()
	for i, r := range rings.seen {
		if !slices.Equal(r, old) && !slices.Equal(r, final) {
			t.Errorf("active ring %d of %d the switch served is neither the old ring nor the new one: a half-written half was made active", i+1, len(rings.seen))
		}
	}
	rings.mu.Unlock()
	want := len(compiler.DiffIR(cut, after).Changes)
	writes := 0
	for _, e := range srv.Log() {
		if e.Table != "tunnel_source" && e.Table != "egress_mtu" {
			writes++
		}
	}
	if writes != want {
		t.Fatalf("the restarted lbc run wrote %d updates; %d were missing\n%s", writes, want, logs2.String())
	}
	t.Logf("killed after %d updates of the failover; the restarted lbc run wrote the %d missing", applied, writes)
}
