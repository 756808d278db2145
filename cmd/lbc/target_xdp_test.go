package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPushDryRunXDPNothingAttached (issue 16): a first push can be
// previewed. With nothing attached to the interface, --dry-run prints the
// full initial diff (every row an insert) and attaches, pins and writes
// nothing; an interface that does not exist is an error.
func TestPushDryRunXDPNothingAttached(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("--target xdp needs root (CI runs as root); the reference model covers the diff itself")
	}
	pins := filepath.Join(t.TempDir(), "pins")
	state := t.TempDir()
	out, errw, err := runLBC(t, "push", "-c", "../../examples/failover.yaml", "--target", "xdp", "--iface", "lo",
		"--pin-dir", pins, "--state-dir", state, "--dry-run")
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, errw)
	}
	if !strings.Contains(out, "xdp lo (nothing attached yet): would write") {
		t.Errorf("output lacks the preview line:\n%s", out)
	}
	tables := 0
	for _, l := range strings.Split(out, "\n") {
		for _, tb := range []string{"backend:", "ring:", "service:", "vip:"} {
			if strings.HasPrefix(l, tb) {
				tables++
				if !strings.HasSuffix(l, " insert, 0 modify, 0 delete") || strings.HasPrefix(l, tb+" 0 insert") {
					t.Errorf("a first push inserts every row: %q", l)
				}
			}
		}
	}
	if tables != 4 {
		t.Errorf("%d tables in the diff, want 4:\n%s", tables, out)
	}
	if _, err := os.Stat(pins); !os.IsNotExist(err) {
		t.Errorf("the dry run created %s (%v)", pins, err)
	}
	if ents, _ := os.ReadDir(state); len(ents) != 0 {
		t.Errorf("the dry run wrote into the state directory: %v", ents)
	}
	_, _, err = runLBC(t, "push", "-c", "../../examples/failover.yaml", "--target", "xdp", "--iface", "lbc-no-such-if",
		"--pin-dir", pins, "--state-dir", state, "--dry-run")
	if err == nil || !strings.Contains(err.Error(), "lbc-no-such-if") {
		t.Fatalf("dry run on a missing interface: %v", err)
	}
}
