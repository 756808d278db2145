// Command lbc-testbench runs load-balancer scenarios end to end: it builds
// a network-namespace (or mininet + BMv2) topology, runs the controller
// against real backends, drives traffic and faults, checks the scenario's
// assertions and writes a report with plots.
//
// It is a separate binary from lbc so that the product does not link its
// test bench (design decision 10).
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/lbc-dev/lbc/internal/clihelp"
	"github.com/urfave/cli/v2"
)

// Exit statuses.
const (
	exitFailed = 1
	// exitSkipped: the topology cannot run on this machine and
	// --allow-skip was not given. 77 is what automake and meson read as
	// "skipped".
	exitSkipped = 77
)

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "lbc-testbench:", err)
		os.Exit(exitStatus(err))
	}
}

// exitStatus is the process's exit status for a non-nil error.
func exitStatus(err error) int {
	var se *skippedError
	if errors.As(err, &se) {
		return exitSkipped
	}
	return exitFailed
}

func newApp() *cli.App {
	app := &cli.App{
		Name:        "lbc-testbench",
		Usage:       testbenchUsage,
		Description: testbenchDescription,
		Commands:    []*cli.Command{testbenchRunCommand, testbenchListCommand, testbenchP4RTServerCommand, testbenchSoakCommand},
	}
	clihelp.Install(app, nil)
	return app
}
