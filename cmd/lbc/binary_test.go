package main

import (
	"os"
	"sync"
	"testing"

	"github.com/lbc-dev/lbc/internal/clihelp/clihelptest"
)

// The binaries this package's tests run, each built once per test process
// into one folder that TestMain removes: a go build of lbc links for
// seconds, three times that on a busy machine, and a dozen tests run it
// (issue 36: cmd/lbc took 500 s of go test's 600 at load 10).
var builds struct {
	sync.Mutex
	dir  string
	bins map[string]string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	os.Exit(code)
}

// built returns the binary of the main package in dir (a go build path
// such as "." or "../lbc-testbench"), named name.
func built(t *testing.T, dir, name string) string {
	t.Helper()
	builds.Lock()
	defer builds.Unlock()
	key := dir + "\x00" + name
	if b, ok := builds.bins[key]; ok {
		return b
	}
	if builds.dir == "" {
		d, err := os.MkdirTemp("", "lbc-test-bin-")
		if err != nil {
			t.Fatal(err)
		}
		builds.dir, builds.bins = d, map[string]string{}
	}
	bin := clihelptest.BuildIn(t, dir, name, builds.dir)
	builds.bins[key] = bin
	return bin
}
