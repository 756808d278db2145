package main

import (
	"errors"
	"fmt"

	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/tofino"
	"github.com/urfave/cli/v2"
)

var (
	tofinoFormatFlag = &cli.StringFlag{Name: "device-config-format", Value: string(tofino.FormatPI),
		Usage: "tofino: `FORMAT` in which --device-config (the .conf file or output directory of p4c-barefoot, the SDE's bf-p4c) is packed: pi (bf_switchd, stratum_bf: name, tofino.bin, context.json, each length-prefixed) or stratum (stratum_bfrt BfPipelineConfig)"}
	tofinoProgramFlag = &cli.StringFlag{Name: "program-name", Usage: "tofino: P4 program `NAME` when --device-config is a directory (default: its name)"}
)

// tofinoPipelineFlags is what pushes the TNA pipeline (docs/tofino.md).
const tofinoPipelineFlags = "--p4info lb.p4info.txtpb --device-config out/lb.conf (p4c-barefoot's outputs for p4/tna/lb.p4; docs/tofino.md)"

var tofinoAdapter = &adapter{
	Usage: "Tofino switch running p4/tna/lb.p4 over P4Runtime (--p4info: p4c-barefoot's P4Info, written with --p4runtime-force-std-externs as make p4-tna does; --device-config: its .conf or output directory; ringSize must be a power of two)",
	Flags: []cli.Flag{p4AddrFlag, p4DeviceFlag, p4ElectionFlag, p4RoleFlag, p4InfoFlag, p4DevcfgFlag, tofinoFormatFlag, tofinoProgramFlag, p4BatchFlag, p4FallbackFlag, p4CAFlag, p4CertFlag, p4KeyFlag, connectTimeoutFlag},
	Open: func(c *cli.Context) (targets.Target, error) {
		t, err := openTofino(c, false)
		if err != nil {
			return nil, noPipelineHint(c, err, false, tofinoPipelineFlags)
		}
		if t.PipelinePushed() {
			fmt.Fprintf(c.App.ErrWriter, "%s: pushed pipeline %s + %s (tables start empty)\n", t.Name(), c.String(p4InfoFlag.Name), c.String(p4DevcfgFlag.Name))
		}
		if port := c.Int(p4FallbackFlag.Name); port >= 0 {
			if _, err := t.SetFallbackPort(c.Context, uint32(port)); err != nil {
				t.Close()
				return nil, err
			}
		}
		return t, nil
	},
	OpenRead: func(c *cli.Context) (targets.Target, error) {
		t, err := openTofino(c, true)
		if err != nil {
			return nil, noPipelineHint(c, err, true, tofinoPipelineFlags)
		}
		return t, nil
	},
	// The TNA Counter externs are read with P4Runtime CounterEntry, as
	// counters of the P4Info p4c-barefoot writes with
	// --p4runtime-force-std-externs; a P4Info without them is
	// tofino.ErrNoStdCounters, which says so itself.
	Counters: func(t targets.Target) (*counters, error) {
		cnt, err := targetCounters(t)
		if err != nil && !errors.Is(err, tofino.ErrNoStdCounters) {
			err = fmt.Errorf("%w (lbc reads the TNA counters with P4Runtime CounterEntry: the switch must run p4/tna/lb.p4 with the P4Info p4c-barefoot writes with --p4runtime-force-std-externs, as make p4-tna does)", err)
		}
		return cnt, err
	},
}

func openTofino(c *cli.Context, readOnly bool) (*tofino.Target, error) {
	format, err := tofino.ParseFormat(c.String(tofinoFormatFlag.Name))
	if err != nil {
		return nil, err
	}
	ro, err := p4RuntimeOptions(c, readOnly)
	if err != nil {
		return nil, err
	}
	opts := tofino.Options{Options: ro, P4InfoPath: c.String(p4InfoFlag.Name), DeviceConfigPath: c.String(p4DevcfgFlag.Name), DeviceConfigFormat: format,
		ProgramName: c.String(tofinoProgramFlag.Name), PipelineHint: tofinoPipelineFlags}
	return tofino.Open(c.Context, opts)
}
