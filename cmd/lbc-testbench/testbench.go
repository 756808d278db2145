package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/lbc-dev/lbc/internal/netns"
	"github.com/lbc-dev/lbc/testbench/scenario"
	"github.com/lbc-dev/lbc/testbench/scenarios"
	"github.com/urfave/cli/v2"
)

const testbenchUsage = "run load-balancer scenarios end to end on a namespace or mininet testbench"

var testbenchDescription = `A scenario (YAML) is a service, steps of traffic and faults, and assertions.
The testbench builds a topology, starts the controller (in its own process,
with lbc run's code, or as an lbc run process when the scenario says
controller: process) with real HTTP health checks against backends that answer with their name, drives
real TCP, UDP and fragmented UDP from a client, injects the faults, checks the
assertions, and writes a report (report.md with a table per step, report.json,
connections.png, ring-shares.png, and a plot per kill, block or detach fault).

Shipped scenarios: ` + strings.Join(scenarios.Names(), ", ") + `

Examples:
   lbc-testbench list
   sudo lbc-testbench run seed001-failover --out /tmp/seed001
   sudo lbc-testbench run ./my-scenario.yaml --topology mininet --out report/
   sudo lbc-testbench run fleet-ecmp --out /tmp/fleet   # 3 lbc run nodes, BIRD, ECMP (docs/fleet.md)
   sudo lbc-testbench run switch-faults --topology mininet --out /tmp/faults   # kill -9 BMv2, block P4Runtime, kill -9 lbc run
From a source tree: go run ./cmd/lbc-testbench run seed001-failover, or make
testbench, which builds lbc beside lbc-testbench for the scenarios that run it
(fleet-ecmp, switch-faults: controller: process; else give --lbc).

Exit status: 0 when every assertion held, 1 when one failed or the run could
not be done, 77 when the topology cannot run on this machine (not root, no
BMv2 or mininet) and --allow-skip was not given.`

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
simple_switch_grpc or mininet is not installed (or, for both, without root)
the run is skipped with the reason: the exit status is then 77, or 0 with
--allow-skip.

The exit status is 1 when an assertion fails; each failure names the step,
the backend and the numbers.`,
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "topology", Value: "netns", Usage: "`KIND`: netns (XDP alone) or mininet (BMv2 + XDP fallback host)"},
		&cli.StringFlag{Name: "out", Usage: "report `DIR` (default ./testbench-out/<scenario>)"},
		&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "traffic `SEED` (client and protocol choices)"},
		&cli.BoolFlag{Name: "allow-skip", Usage: "exit 0 (not 77) when the topology cannot run on this machine"},
		&cli.StringFlag{Name: "lbc", Usage: "the lbc `BINARY` that fleet scenarios and scenarios with controller: process run (default: $LBC_BINARY, an lbc beside lbc-testbench, lbc on PATH)"},
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
		if topo != "netns" && topo != "mininet" {
			return fmt.Errorf("--topology %q: want netns or mininet", topo)
		}
		if err := topologyAvailable(topo); err != nil {
			if c.Bool("allow-skip") {
				fmt.Fprintf(c.App.ErrWriter, "lbc-testbench: scenario %s on %s skipped (--allow-skip): %v\n", sc.Name, topo, err)
				return nil
			}
			return &skippedError{fmt.Errorf("scenario %s on %s skipped: %w (exit status %d; --allow-skip makes it 0)", sc.Name, topo, err, exitSkipped)}
		}
		// Ctrl-C stops the run and still removes the namespaces.
		ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
		defer stop()
		res, err := scenario.Run(ctx, sc, scenario.Options{Topology: topo, OutDir: out, Progress: c.App.Writer, Seed: c.Uint64("seed"), LBC: c.String("lbc")})
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

// skippedError: the scenario could not run here; main exits with
// exitSkipped.
type skippedError struct{ err error }

func (e *skippedError) Error() string { return e.err.Error() }
func (e *skippedError) Unwrap() error { return e.err }

// topologyAvailable reports why a topology cannot run on this machine
// (wrapping scenario.ErrUnavailable).
func topologyAvailable(topo string) error {
	switch topo {
	case "netns":
		if err := netns.Available(); err != nil {
			return fmt.Errorf("%w: %v", scenario.ErrUnavailable, err)
		}
	case "mininet":
		return scenario.MininetAvailable()
	}
	return nil
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

// isBoolFlag reports whether name is a boolean flag of c's command (it
// takes no value after it).
func isBoolFlag(c *cli.Context, name string) bool {
	for _, f := range c.Command.Flags {
		if _, ok := f.(*cli.BoolFlag); !ok {
			continue
		}
		for _, n := range f.Names() {
			if n == name {
				return true
			}
		}
	}
	return false
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
		if !ok && isBoolFlag(c, name) {
			val, ok = "true", true
		}
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
