package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/chain"
	"github.com/lbc-dev/lbc/targets/sim"
	"github.com/lbc-dev/lbc/trace"
	"github.com/urfave/cli/v2"
)

// replayTarget is a datapath that `lbc replay` and `lbc explain` can run
// packets through. To add one, write its opener in a new file and add one
// line to replayTargets.
type replayTarget struct {
	Usage string
	// Open returns the datapath to program (Target) and to run packets
	// through (PacketTarget; usually the same value), and a close func.
	Open func(c *cli.Context) (targets.Target, targets.PacketTarget, func() error, error)
}

// replayTargets lists the datapaths by --target name.
var replayTargets = map[string]*replayTarget{
	"sim":    {Usage: "the reference datapath in Go (targets/sim)", Open: openSim},
	"xdp":    {Usage: "the XDP program's test build, packets run with BPF_PROG_TEST_RUN (root)", Open: openXDPReplay},
	"bmv2":   {Usage: "a live BMv2 simple_switch_grpc running p4/lb.p4, started in its own network namespace; packets on veth ports (root)", Open: openBMv2Replay},
	"sim-p4": {Usage: "the reference datapath as the P4 switch runs it (lb.p4's register conntrack geometry, fallback): what --target bmv2 must print", Open: openSimP4},
}

var pushOnlyFlag = &cli.BoolFlag{Name: "push-only", Usage: "replay as lbc push alone would: events recompile and push, but nothing recompiles at a deadline, so the datapath's own clock ends drains and persistence caps (also set by a trace's \"# push-only: true\" header)"}

var fallbackFlag = &cli.BoolFlag{Name: "fallback", Usage: "sim: P4-switch semantics: fragments and protocols other than TCP/UDP go to the fallback port"}

func openSim(c *cli.Context) (targets.Target, targets.PacketTarget, func() error, error) {
	d := sim.New(sim.Options{Fallback: c.Bool(fallbackFlag.Name)})
	return d, d, d.Close, nil
}

func replayTargetNames() string {
	var names []string
	for n := range replayTargets {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

var replayTargetFlag = &cli.StringFlag{Name: "target", Value: "sim", Usage: "datapath `KIND` that runs the packets: " + replayTargetNames()}

// switchTargets are the replay targets with a fallback port, which
// --fallback-target chains a fallback datapath behind. (Not tofino:
// replay cannot run packets through one; see noTofinoReplay.)
var switchTargets = []string{"bmv2", "sim-p4"}

// noTofinoReplay is why --target tofino is not a replay target, though it
// is one of push, status and run.
const noTofinoReplay = "--target tofino: replay runs packets through a datapath it drives itself, and a Tofino is not one: lbc starts no Tofino model and cannot inject packets into a switch (docs/tofino.md). Replay on sim-p4 (the P4 semantics) or bmv2; program a Tofino with lbc push --target tofino"

// fallbackTargets are the datapaths that can stand behind a switch's
// fallback port: the XDP program, or its model.
var fallbackTargets = map[string]func(c *cli.Context) (targets.Target, targets.PacketTarget, func() error, error){
	"sim": func(c *cli.Context) (targets.Target, targets.PacketTarget, func() error, error) {
		d := sim.New(sim.Options{})
		return d, d, d.Close, nil
	},
	"xdp": openXDPReplay,
}

var fallbackTargetFlag = &cli.StringFlag{Name: "fallback-target", Usage: "chain datapath `KIND` (sim or xdp) behind the fallback port of --target sim-p4|bmv2: what the switch sends there continues through it, at the same time, and each line reports both hops and the final backend"}

func openReplayTarget(c *cli.Context) (targets.Target, targets.PacketTarget, func() error, error) {
	name := c.String(replayTargetFlag.Name)
	rt, ok := replayTargets[name]
	if !ok && name == "tofino" {
		return nil, nil, nil, errors.New(noTofinoReplay)
	}
	if !ok {
		return nil, nil, nil, fmt.Errorf("--target %q: known targets are %s", name, replayTargetNames())
	}
	fbName := c.String(fallbackTargetFlag.Name)
	if fbName == "" {
		return rt.Open(c)
	}
	if !slices.Contains(switchTargets, name) {
		return nil, nil, nil, fmt.Errorf("--fallback-target chains a datapath behind a switch's fallback port: use it with --target %s, not %s", strings.Join(switchTargets, ", "), name)
	}
	openFB, ok := fallbackTargets[fbName]
	if !ok {
		return nil, nil, nil, fmt.Errorf("--fallback-target %q: want sim or xdp", fbName)
	}
	sw, swp, swClose, err := rt.Open(c)
	if err != nil {
		return nil, nil, nil, err
	}
	fb, fbp, fbClose, err := openFB(c)
	if err != nil {
		swClose()
		return nil, nil, nil, fmt.Errorf("--fallback-target %s: %w", fbName, err)
	}
	ch := chain.New(sw, swp, fb, fbp)
	return ch, ch, func() error { return errors.Join(swClose(), fbClose()) }, nil
}

var replayCommand = &cli.Command{
	Name:      "replay",
	Usage:     "run a packet trace through a datapath and print each packet's fate",
	UsageText: "lbc replay [-c lb.yaml] [--health health.yaml] --trace t.jsonl [--target sim] [--fallback-target sim|xdp] [--summary-only]",
	Description: `Replays a trace (JSON Lines: packets and events at virtual times; see
docs/sim.md) against a datapath programmed from lb.yaml. Events (health,
weight, remove, add) recompile the tables through the controller's own code
path, with epochs and draining timers; a draining backend is gone at its
deadline (with --push-only, or a "# push-only: true" header, nothing
recompiles then: the datapath alone enforces the deadline, as with
` + "`lbc push`" + ` and no ` + "`lbc run`" + `). Prints one JSON line per packet:

   {"line":3,"t":1,"action":"forward","service":"web","backend":"vm-a2","ct":"new","rule":[...]}

one line per event (what it changed), and a final {"summary": ...} with
per-backend packet and new-connection counts, conntrack outcomes and drops.

With --target sim-p4|bmv2 --fallback-target sim|xdp, replay runs the whole
system: a packet the switch sends to its fallback port (a fragment, a
protocol it does not parse, a session without ports, a packet too big to
encapsulate) continues through the fallback datapath at the same virtual
time, and its line carries "hops", what each did, with the final action
and backend at the top:

   {"line":7,"t":2,"action":"forward","backend":"media-2","ct":"hit","hops":[{"target":"sim-p4","action":"fallback"},{"target":"sim","action":"forward","backend":"media-2","ct":"hit"}]}

Without -c (--health), replay uses the file of the trace's "# config:"
("# health:") line, relative to the trace's folder, and says so; a -c or
--health that names another file wins, with a warning (the header's health
is then not used with another -c). gen-trace -c writes the "# config:" line.

--target bmv2 starts a simple_switch_grpc of its own (in a network
namespace, P4Runtime on a unix socket there), pushes lb.p4 to it and stops
it at the end; it says so on stderr, with the time it took, and prints a
line a second while a push writes (the first writes every ring). The JSON
lines go to stdout alone; --quiet (-q) silences the progress lines.

A line may carry an "expect" written from the spec; a line whose outcome
differs gets a "mismatch" field, and replay exits 1. The traces under
testbench/testdata are such tests: run them against any --target.

   lbc gen-trace -c lb.yaml --seed 1 --events > t.jsonl
   lbc replay --trace t.jsonl
   lbc replay --trace testbench/testdata/r-persist-matrix.jsonl   # its header names persist.yaml and persist-health.yaml`,
	Flags: []cli.Flag{configFlag, healthFlag,
		&cli.StringFlag{Name: "trace", Aliases: []string{"t"}, Required: true, Usage: "trace `FILE` (JSON Lines; - for stdin)"},
		replayTargetFlag, fallbackTargetFlag, fallbackFlag, bmv2ClockFlag, pushOnlyFlag,
		&cli.BoolFlag{Name: "summary-only", Usage: "print only the summary"}, quietFlag,
	},
	Action: func(c *cli.Context) error {
		name := c.String("trace")
		var in io.Reader = os.Stdin
		dir := "." // where the header's relative paths start
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				return err
			}
			defer f.Close()
			in, dir = f, filepath.Dir(name)
		}
		hdr, in, err := trace.ScanHeader(in)
		if err != nil {
			return fmt.Errorf("--trace %s: %w", name, err)
		}
		cfgFile, healthFile, err := replayFiles(c.String(configFlag.Name), c.String(healthFlag.Name), hdr, dir, c.App.ErrWriter)
		if err != nil {
			return fmt.Errorf("--trace %s: %w", name, err)
		}
		l, err := loadConfigFiles(cfgFile, healthFile, c.App.ErrWriter)
		if err != nil {
			return err
		}
		tgt, pt, closeFn, err := openReplayTarget(c)
		if err != nil {
			return err
		}
		defer closeFn()
		ctx := c.Context
		if ctx == nil {
			ctx = context.Background()
		}
		rp, err := trace.NewReplayer(ctx, l.Config, l.State, tgt, pt)
		if err != nil {
			return err
		}
		rp.PushOnly = c.Bool(pushOnlyFlag.Name)
		enc := json.NewEncoder(c.App.Writer)
		enc.SetEscapeHTML(false) // "<", ">" and "&" as written (packets read "a > b"), not as \u003e
		quiet := c.Bool("summary-only")
		rd := trace.NewReader(in, name)
		for {
			line, err := rd.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			rp.PushOnly = rp.PushOnly || rd.Header().PushOnly
			outs, err := rp.Step(ctx, line)
			if err != nil {
				var te *trace.Error
				if errors.As(err, &te) && te.File == "" {
					te.File = name
				}
				return err
			}
			for _, o := range outs {
				if quiet && o.Mismatch == "" {
					continue
				}
				if err := enc.Encode(o); err != nil {
					return err
				}
			}
		}
		s := rp.Summary()
		if err := enc.Encode(struct {
			Summary trace.Summary `json:"summary"`
		}{s}); err != nil {
			return err
		}
		if s.Mismatches > 0 {
			return fmt.Errorf("%s: %d of %d expectations not met (lines with \"mismatch\")", name, s.Mismatches, s.Expected)
		}
		return nil
	},
}
