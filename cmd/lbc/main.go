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
backends and a weighted Maglev ring per service, compiles them into tables, and
writes them to a P4 switch (P4Runtime: BMv2, Tofino) or an XDP program.

Start with:
   lbc compile                      # the embedded example (examples/failover.yaml)
   lbc compile -c lb.yaml --health health.yaml
   lbc validate -c lb.yaml
   lbc explain -c lb.yaml --packet "tcp 198.51.100.7:4242 > 203.0.113.10:80 S"
Then program a datapath and keep it right:
   lbc push -c lb.yaml --target xdp --iface eth1          # fallback-only mode (root)
   lbc push -c lb.yaml --target bmv2 --addr 127.0.0.1:9559
   lbc run  -c lb.yaml --target bmv2 --metrics 127.0.0.1:9100`,
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
