package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/testbench/p4rt"
)

// lbc push --target tofino against the in-process P4Runtime server loaded
// through Open with the TNA P4Info and a packed device config: the default
// prime ring is refused naming the service, a power-of-two ring is pushed
// with its idle_ticks row, a second push writes nothing, status reads back.
func TestPushTofino(t *testing.T) {
	srv, err := p4rt.New(p4rt.Options{DeviceID: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	args := []string{"--target", "tofino", "--addr", srv.Addr(), "--p4info", "../../p4/tna/build/lb.p4info.txtpb",
		"--device-config", "../../targets/tofino/testdata/bfp4c/lb.conf", "--device-config-format", "stratum"}

	_, _, err = runLBC(t, append([]string{"push", "-c", "../../examples/failover.yaml"}, args...)...)
	if err == nil || !strings.Contains(err.Error(), `service "web"`) || !strings.Contains(err.Error(), "ringSize: 65536") {
		t.Fatalf("push of the 65537-slot example: %v, want the power-of-two error naming web", err)
	}

	data, err := os.ReadFile("../../examples/failover.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "lb.yaml")
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(data), "    sessionAffinity: NONE\n", "    sessionAffinity: NONE\n    ringSize: 1024\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	push := func() string {
		t.Helper()
		out, errw, err := runLBC(t, append([]string{"push", "-c", cfg, "--fallback-port", "3"}, args...)...)
		if err != nil {
			t.Fatalf("push: %v\n%s", err, errw)
		}
		return out
	}
	out := push()
	// 2059 table rows of the diff plus the idle_ticks row of 60 s.
	if !strings.Contains(out, "ring: 2048 insert") || !strings.Contains(out, "2060 writes") {
		t.Fatalf("first push output:\n%s", out)
	}
	if out := push(); !strings.Contains(out, "up to date (0 writes)") {
		t.Fatalf("second push output:\n%s", out)
	}
	st, errw, err := runLBC(t, append([]string{"status"}, args[:4]...)...)
	if err != nil && !strings.Contains(err.Error(), "counters") {
		t.Fatalf("status: %v\n%s", err, errw)
	}
	if err == nil && (!strings.Contains(st, "web") || !strings.Contains(st, "vm-a1")) {
		t.Fatalf("status output:\n%s", st)
	}
}
