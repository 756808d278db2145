package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"testing"
)

// What the README's commands write into the tree (make's binaries, the
// testbench's default report directory, the GSLB demo database) is
// ignored by git, so a binary built beside them is not "modified" in lbc
// version (Go sets vcs.modified from git status, untracked files
// included); the sources of the same names are not ignored.
func TestDocumentedOutputsIgnored(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skipf("git not on PATH (%v): nothing to check without it (Go records no VCS state either)", err)
	}
	root := filepath.Join("..", "..")
	if out, err := exec.Command(git, "-C", root, "rev-parse", "--is-inside-work-tree").CombinedOutput(); err != nil {
		t.Skipf("not a git work tree (%v: %s): Go records no VCS state for a build here", err, bytes.TrimSpace(out))
	}
	for _, p := range []string{"lbc", "lbc-testbench", "demo.mmdb", "testbench-out/seed001-failover/report.md", "testbench-out/fleet-ecmp/fleet-event-1.png", "soak-out/summary.txt", "soak-out/lbc"} {
		if err := exec.Command(git, "-C", root, "check-ignore", "-q", "--no-index", p).Run(); err != nil {
			t.Errorf("%s is not ignored by git (git check-ignore: %v): a build beside it reports the tree as modified", p, err)
		}
	}
	for _, p := range []string{"cmd/lbc/main.go", "cmd/lbc-testbench/main.go", "testbench/scenario/runner.go"} {
		if err := exec.Command(git, "-C", root, "check-ignore", "-q", "--no-index", p).Run(); err == nil {
			t.Errorf("%s is ignored by git: the ignore patterns are too broad", p)
		}
	}
}
