// Command lbc compiles a pass-through L4 load balancer's policy into
// datapath tables and keeps them programmed.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

func main() {
	app := newApp()
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "lbc:", err)
		os.Exit(1)
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:  "lbc",
		Usage: "compile L4 load-balancer policy into P4 and XDP datapath tables",
		Description: `lbc reads a load balancer's policy (lb.yaml, in the vocabulary of a cloud
network load balancer: backends and failover groups, health, weights, session
affinity, connection tracking, failover ratio, draining), computes the eligible
backends and a weighted Maglev ring per service, and compiles them into tables.

Start with:
   lbc compile                      # the embedded example (examples/failover.yaml)
   lbc compile -c lb.yaml --health health.yaml
   lbc validate -c lb.yaml`,
		Commands:        commands,
		HideHelpCommand: true,
	}
}

// commands lists every subcommand; each lives in its own file.
var commands = []*cli.Command{
	validateCommand,
	compileCommand,
	pushCommand, statusCommand, detachCommand,
	replayCommand, explainCommand, genTraceCommand,
	gslbCommand,
	testbenchCommand,
	runCommand,
}
