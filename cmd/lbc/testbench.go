package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/lbc-dev/lbc/testbench/scenario"
	"github.com/lbc-dev/lbc/testbench/scenarios"
	"github.com/urfave/cli/v2"
)

var testbenchCommand = &cli.Command{
	Name:  "testbench",
	Usage: "run load-balancer scenarios end to end on a namespace or mininet testbench",
	Description: `A scenario (YAML) is a service, steps of traffic and faults, and assertions.
The testbench builds a topology, starts the controller (as lbc run does) with
real HTTP health checks against backends that answer with their name, drives
real TCP, UDP and fragmented UDP from a client, injects the faults, checks the
assertions, and writes a report (report.md with a table per step, report.json,
connections.png, ring-shares.png).

Shipped scenarios: ` + strings.Join(scenarios.Names(), ", ") + `

Examples:
   lbc testbench list
   sudo lbc testbench run seed001-failover --out /tmp/seed001
   sudo lbc testbench run ./my-scenario.yaml --topology mininet --out report/
   sudo lbc testbench run fleet-ecmp --out /tmp/fleet   # 3 lbc run nodes, BIRD, ECMP (docs/fleet.md)`,
	Subcommands: []*cli.Command{testbenchRunCommand, testbenchListCommand},
}

var testbenchListCommand = &cli.Command{
	Name:  "list",
	Usage: "list the shipped scenarios",
	Action: func(c *cli.Context) error {
		for _, n := range scenarios.Names() {
			data, _ := scenarios.Get(n)
			sc, err := scenario.Parse(n+".yaml", data)
			if err != nil {
				fmt.Fprintf(c.App.Writer, "%-24s (invalid: %v)\n", n, err)
				continue
			}
			if sc.Fleet != nil {
				fmt.Fprintf(c.App.Writer, "%-24s %d backends, fleet of %d nodes behind a BGP router (BIRD 2), %d events\n", n, len(sc.BackendNames()), sc.Fleet.Nodes, len(sc.Fleet.Events))
				continue
			}
			fmt.Fprintf(c.App.Writer, "%-24s %d backends, %d steps\n", n, len(sc.BackendNames()), len(sc.Steps))
		}
		return nil
	},
}

var testbenchRunCommand = &cli.Command{
	Name:      "run",
	Usage:     "run one scenario, print progress and assertions, write the report",
	ArgsUsage: "SCENARIO (a shipped scenario's name or a YAML file)",
	Description: `--topology netns (default) is fallback-only mode: network namespaces joined by
a bridge, the XDP datapath alone on the load balancer's interface. It needs
root (namespaces, BPF). --topology mininet runs a BMv2 simple_switch_grpc
programmed over P4Runtime with an XDP fallback host on its fallback port; where
simple_switch_grpc is not installed the run is skipped with the reason.

The exit status is 1 when an assertion fails; each failure names the step,
the backend and the numbers.`,
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "topology", Value: "netns", Usage: "`KIND`: netns (XDP alone) or mininet (BMv2 + XDP fallback host)"},
		&cli.StringFlag{Name: "out", Usage: "report `DIR` (default ./testbench-out/<scenario>)"},
		&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "traffic `SEED` (client and protocol choices)"},
	},
	Action: func(c *cli.Context) error {
		if err := trailingFlags(c); err != nil {
			return err
		}
		if c.NArg() < 1 {
			return fmt.Errorf("want one SCENARIO (a name: %s; or a YAML file)", strings.Join(scenarios.Names(), ", "))
		}
		sc, err := loadScenario(c.Args().First())
		if err != nil {
			return err
		}
		out := c.String("out")
		if out == "" {
			out = filepath.Join("testbench-out", sc.Name)
		}
		topo := c.String("topology")
		if topo == "mininet" {
			if err := scenario.MininetAvailable(); err != nil {
				fmt.Fprintf(c.App.ErrWriter, "lbc testbench: scenario %s on mininet skipped: %v\n", sc.Name, err)
				return nil
			}
		}
		// Ctrl-C stops the run and still removes the namespaces.
		ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
		defer stop()
		res, err := scenario.Run(ctx, sc, scenario.Options{Topology: topo, OutDir: out, Progress: c.App.Writer, Seed: c.Uint64("seed")})
		var ae *scenario.AssertionError
		switch {
		case errors.As(err, &ae):
			return fmt.Errorf("scenario %s on %s: %w (report: %s)", sc.Name, topo, err, filepath.Join(out, "report.md"))
		case err != nil:
			return fmt.Errorf("scenario %s on %s: %w", sc.Name, topo, err)
		}
		fmt.Fprintf(c.App.Writer, "scenario %s on %s PASSED in %.1f s (report: %s)\n", sc.Name, topo, res.Took.Seconds(), filepath.Join(out, "report.md"))
		return nil
	},
}

// loadScenario reads a file, or a shipped scenario by name.
func loadScenario(arg string) (*scenario.Scenario, error) {
	if _, err := os.Stat(arg); err == nil {
		return scenario.LoadFile(arg)
	}
	if data, ok := scenarios.Get(filepath.Base(arg)); ok {
		return scenario.Parse(strings.TrimSuffix(filepath.Base(arg), ".yaml")+".yaml", data)
	}
	return nil, fmt.Errorf("scenario %q: no such file, and not a shipped scenario (%s)", arg, strings.Join(scenarios.Names(), ", "))
}

// trailingFlags applies flags written after SCENARIO (the usage line puts
// them there; urfave/cli stops parsing at the first argument).
func trailingFlags(c *cli.Context) error {
	args := c.Args().Slice()
	if len(args) <= 1 {
		return nil
	}
	rest := args[1:]
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if !strings.HasPrefix(a, "-") {
			return fmt.Errorf("unexpected argument %q: want one SCENARIO", a)
		}
		name, val, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !ok {
			if i+1 >= len(rest) {
				return fmt.Errorf("flag %s needs a value", a)
			}
			i++
			val = rest[i]
		}
		if err := c.Set(name, val); err != nil {
			return fmt.Errorf("flag %s: %w", a, err)
		}
	}
	return nil
}
