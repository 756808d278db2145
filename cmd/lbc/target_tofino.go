package main

import (
	"fmt"

	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/tofino"
	"github.com/urfave/cli/v2"
)

var (
	tofinoFormatFlag = &cli.StringFlag{Name: "device-config-format", Value: string(tofino.FormatPI),
		Usage: "tofino: how --device-config (bf-p4c's .conf file or output directory) is packed: pi (bf_switchd, stratum_bf: name, tofino.bin, context.json, each length-prefixed) or stratum (stratum_bfrt BfPipelineConfig)"}
	tofinoProgramFlag = &cli.StringFlag{Name: "program-name", Usage: "tofino: P4 program `NAME` when --device-config is a directory (default: its name)"}
)

var tofinoAdapter = &adapter{
	Usage: "Tofino switch running p4/tna/lb.p4 over P4Runtime (--p4info: bf-p4c's P4Info; --device-config: bf-p4c's .conf or output directory; ringSize must be a power of two)",
	Flags: []cli.Flag{p4AddrFlag, p4DeviceFlag, p4ElectionFlag, p4RoleFlag, p4InfoFlag, p4DevcfgFlag, tofinoFormatFlag, tofinoProgramFlag, p4BatchFlag, p4FallbackFlag, p4CAFlag, p4CertFlag, p4KeyFlag},
	Open: func(c *cli.Context) (targets.Target, error) {
		t, err := openTofino(c, false)
		if err != nil {
			return nil, err
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
	OpenRead: func(c *cli.Context) (targets.Target, error) { return openTofino(c, true) },
	// p4test's P4Info has no TNA counters; bf-p4c's has.
	Counters: func(t targets.Target) (*counters, error) {
		return targetCounters(t, " (the switch's P4Info must come from bf-p4c to list the TNA Counter externs)")
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
		ProgramName: c.String(tofinoProgramFlag.Name)}
	return tofino.Open(c.Context, opts)
}
