package main

import (
	"fmt"
	"log/slog"

	"github.com/lbc-dev/lbc/targets"
	bmv2live "github.com/lbc-dev/lbc/targets/bmv2/live"
	"github.com/lbc-dev/lbc/targets/sim"
	"github.com/urfave/cli/v2"
)

var bmv2ClockFlag = &cli.StringFlag{Name: "bmv2-clock", Value: "paced", Usage: "bmv2: `MODE` mapping trace time onto the switch's clock: " +
	"paced (a packet goes no earlier than its trace time: idle gaps are real, the replay takes as long as the trace) or " +
	"free (as fast as the switch goes; refused once the trace or the run reaches an idle timeout)"}

// openBMv2Replay starts simple_switch_grpc with p4/lb.p4 (the embedded
// build) in a network namespace of its own, programs it over P4Runtime and
// runs each trace packet through its veth ports (targets/bmv2/live).
func openBMv2Replay(c *cli.Context) (targets.Target, targets.PacketTarget, func() error, error) {
	clk, err := bmv2live.ParseClock(c.String(bmv2ClockFlag.Name))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--%s: %w", bmv2ClockFlag.Name, err)
	}
	if err := bmv2live.Available(""); err != nil {
		return nil, nil, nil, fmt.Errorf("--target bmv2 starts simple_switch_grpc in a network namespace: %w", err)
	}
	p := newProgress(c)
	p.Phase("starting a BMv2 switch for the replay (simple_switch_grpc in a network namespace of its own, P4Runtime on a unix socket there) and pushing the pipeline (lbc's embedded p4/lb.p4)")
	sw, err := bmv2live.Start(c.Context, bmv2live.Options{Clock: clk,
		Logger: slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return nil, nil, nil, err
	}
	p.Done("BMv2 switch ready in namespace %s: pipeline pushed, fallback port and default route set", sw.Namespace())
	// The replay's pushes: a line a second for one that takes longer
	// (the first, which writes every ring), none for the quick ones.
	sw.Target().SetProgress(func(done, total int) {
		if done == 0 {
			p.Label("writing %s updates to %s", commas(total), sw.Name())
			return
		}
		p.Count(done, total)
	})
	return sw, sw, sw.Close, nil
}

// openSimP4 is the reference datapath as the P4 switch runs it: lb.p4's
// register conntrack geometry (read from the embedded build) and fallback
// semantics. Its output is what --target bmv2 must print.
func openSimP4(c *cli.Context) (targets.Target, targets.PacketTarget, func() error, error) {
	o, err := bmv2live.SimOptions(nil)
	if err != nil {
		return nil, nil, nil, err
	}
	o.Name = "sim-p4"
	d := sim.New(o)
	return d, d, d.Close, nil
}
