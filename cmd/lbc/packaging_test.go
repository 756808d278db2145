package main

import (
	"os"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestSystemdUnitRunsLbcRun: packaging/systemd/lbc.service starts lbc run
// with flags that exist, each given a value where it takes one, so a copy
// of the unit does not fail at its first start.
func TestSystemdUnitRunsLbcRun(t *testing.T) {
	data, err := os.ReadFile("../../packaging/systemd/lbc.service")
	if err != nil {
		t.Fatal(err)
	}
	var exec []string
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			exec = strings.Fields(v)
		}
	}
	if len(exec) < 2 || !strings.HasSuffix(exec[0], "/lbc") || exec[1] != "run" {
		t.Fatalf("ExecStart is not lbc run: %q", exec)
	}
	byName := map[string]cli.Flag{}
	for _, f := range runCommand.Flags {
		for _, n := range f.Names() {
			byName[n] = f
		}
	}
	hasC := false
	for i := 2; i < len(exec); i++ {
		name := strings.TrimLeft(exec[i], "-")
		if !strings.HasPrefix(exec[i], "-") {
			t.Fatalf("ExecStart argument %q is no flag (flags only: the file is -c)", exec[i])
		}
		f, ok := byName[name]
		if !ok {
			t.Fatalf("ExecStart flag %s: lbc run has no such flag", exec[i])
		}
		hasC = hasC || f == configFlag
		if _, isBool := f.(*cli.BoolFlag); !isBool {
			if i+1 >= len(exec) || strings.HasPrefix(exec[i+1], "-") {
				t.Fatalf("ExecStart flag %s has no value", exec[i])
			}
			i++
		}
	}
	if !hasC {
		t.Fatal("ExecStart has no -c: lbc run refuses to start without its configuration")
	}
	if !strings.Contains(string(data), "ExecReload=/bin/kill -HUP $MAINPID") {
		t.Error("no ExecReload sending SIGHUP, which makes lbc run re-read lb.yaml")
	}
}
