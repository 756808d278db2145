// Command lbc compiles a pass-through L4 load balancer's policy into
// datapath tables and keeps them programmed.
package main

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/lbc-dev/lbc/internal/clihelp"
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
	app := &cli.App{
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
   lbc run  -c lb.yaml --target bmv2 --metrics 127.0.0.1:9100

lbc help COMMAND (or lbc COMMAND --help) describes a command. The rules the
datapaths implement, by ID (R-CT-1, R-ELIG-3, R-PERSIST, ...), are in
docs/semantics.md. The scenario testbench is a separate program:
lbc-testbench (go run ./cmd/lbc-testbench).`,
		Commands:             append([]*cli.Command(nil), commands...),
		EnableBashCompletion: true, // lbc completion bash|zsh
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return fmt.Errorf("%w\nusage: lbc [--version] COMMAND [flags] [arguments]\n(lbc help lists the commands)", err)
		},
		Flags: []cli.Flag{versionFlag},
		// The command line, for messages that say which command to run
		// again (rerunWith).
		Before: func(c *cli.Context) error {
			c.App.Metadata = map[string]any{argsKey: c.Args().Slice()}
			return nil
		},
	}
	guardOnce.Do(func() { guardArgs(commands, "") }) // the commands are shared by every app
	clihelp.Install(app, func(c *cli.Context) error {
		if c.Bool(versionFlag.Name) {
			return writeVersion(c.App.Writer, readVersion())
		}
		return cli.ShowAppHelp(c)
	})
	return app
}

var guardOnce sync.Once

// commands lists every subcommand; each lives in its own file.
var commands = []*cli.Command{
	validateCommand,
	compileCommand,
	pushCommand, statusCommand, detachCommand,
	replayCommand, explainCommand, genTraceCommand,
	gslbCommand,
	runCommand, fleetCommand,
	versionCommand, completionCommand,
	testbenchMovedCommand,
}

// testbenchMovedCommand tells a user of the old `lbc testbench` where it
// went: the product binary does not link its test bench.
var testbenchMovedCommand = &cli.Command{
	Name:            "testbench",
	Hidden:          true,
	SkipFlagParsing: true,
	Action: func(c *cli.Context) error {
		args := strings.Join(c.Args().Slice(), " ")
		if args == "" {
			args = "list"
		}
		return fmt.Errorf("the scenario testbench is its own program now, lbc-testbench (lbc does not link its test bench): run\n"+
			"   go run ./cmd/lbc-testbench %s     (in the source tree; or make testbench SCENARIO=...)\n"+
			"   go install github.com/lbc-dev/lbc/cmd/lbc-testbench@latest, then lbc-testbench %s", args, args)
	},
}
