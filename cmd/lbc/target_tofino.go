package main

import (
	"fmt"
	"log/slog"

	"github.com/lbc-dev/lbc/runtime"
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
	opts := tofino.Options{Options: runtime.Options{
		Addr: c.String(p4AddrFlag.Name), DeviceID: c.Uint64(p4DeviceFlag.Name), ElectionLow: c.Uint64(p4ElectionFlag.Name),
		Role: c.String(p4RoleFlag.Name), BatchSize: c.Int(p4BatchFlag.Name), ReadOnly: readOnly,
		Logger: slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, P4InfoPath: c.String(p4InfoFlag.Name), DeviceConfigPath: c.String(p4DevcfgFlag.Name), DeviceConfigFormat: format,
		ProgramName: c.String(tofinoProgramFlag.Name)}
	if ca, cert, key := c.String(p4CAFlag.Name), c.String(p4CertFlag.Name), c.String(p4KeyFlag.Name); ca != "" || cert != "" {
		tc, err := runtime.TLSConfig(ca, cert, key, "")
		if err != nil {
			return nil, fmt.Errorf("--tls-*: %w", err)
		}
		opts.TLS = tc
	}
	if opts.ElectionLow == 0 {
		return nil, fmt.Errorf("--election-id 0 is not a valid election ID; use 1 or more")
	}
	return tofino.Open(c.Context, opts)
}
