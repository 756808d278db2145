package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/lbc-dev/lbc/p4"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/urfave/cli/v2"
)

var (
	p4AddrFlag     = &cli.StringFlag{Name: "addr", Value: "127.0.0.1:9559", Usage: "bmv2: P4Runtime `HOST:PORT` of the switch (simple_switch_grpc --grpc-server-addr)"}
	p4DeviceFlag   = &cli.Uint64Flag{Name: "device-id", Value: 1, Usage: "bmv2: P4Runtime device `ID`"}
	p4ElectionFlag = &cli.Uint64Flag{Name: "election-id", Value: 1, Usage: "bmv2: this controller's election `ID`; the highest connected controller is primary and writes"}
	p4RoleFlag     = &cli.StringFlag{Name: "role", Usage: "bmv2: P4Runtime role `NAME` (default role when empty)"}
	p4InfoFlag     = &cli.StringFlag{Name: "p4info", Usage: "bmv2: P4Info `FILE` to push with --device-config, replacing any other pipeline the switch runs; without both, lbc's embedded build of p4/lb.p4 (p4/build) is pushed to a switch that runs no pipeline (at start, and again if the switch restarts empty), and a switch that runs another is left as it is"}
	p4DevcfgFlag   = &cli.StringFlag{Name: "device-config", Usage: "bmv2: device config `FILE` (BMv2 JSON, p4/build/lb.json) to push with --p4info; pushed only when the switch runs another pipeline"}
	p4BatchFlag    = &cli.IntFlag{Name: "batch-size", Value: runtime.DefaultBatchSize, Usage: "bmv2: `N` updates per Write RPC (BMv2 is ≈20× slower with 1 than with ≥1000)"}
	p4FallbackFlag = &cli.IntFlag{Name: "fallback-port", Value: -1, Usage: "bmv2: switch `PORT` fragments and unparsed protocols leave through, towards the XDP host (-1: leave as is)"}
	p4CAFlag       = &cli.StringFlag{Name: "tls-ca", Usage: "bmv2: CA `FILE` (PEM) to verify the switch; enables TLS"}
	p4CertFlag     = &cli.StringFlag{Name: "tls-cert", Usage: "bmv2: client certificate `FILE` (PEM) for mTLS"}
	p4KeyFlag      = &cli.StringFlag{Name: "tls-key", Usage: "bmv2: client key `FILE` (PEM) for mTLS"}
	p4RingFlag     = &cli.IntFlag{Name: "ring-table-size", Usage: "bmv2: `N` entries of lb.p4's ring table when lbc pushes its embedded pipeline (to a switch that runs none: a new or restarted one; " + ringSizeRange + "). Every service holds one ring at rest, plus room for the largest to change: the default 1,048,576 holds 1,023 services at ringSize auto (1,024 slots), 4195328 holds 4,096. BMv2 allocates the entries when the pipeline is pushed, so each 1,048,576 adds about 0.55 s (idle) to every switch restart and 115 MB (docs/p4.md). lbc validate -c lb.yaml --target bmv2 --ring-table-size N tells whether a configuration fits"}
	// connectTimeoutFlag is shared by the P4Runtime targets (bmv2, tofino).
	connectTimeoutFlag = &cli.DurationFlag{Name: "connect-timeout", Value: runtime.DefaultConnectTimeout,
		Usage: "bmv2, tofino: `DURATION` to wait for the switch to answer (and take lbc as its primary controller) before giving up; lbc run never gives up: it tries again, each attempt waiting twice as long (up to 1 minute), with /healthz 503 and nothing announced until the switch answers"}
)

// ringSizeRange is --ring-table-size's range, for its help.
var ringSizeRange = fmt.Sprintf("%d..%d", p4.MinRingTableSize, p4.MaxRingTableSize)

var bmv2Adapter = &adapter{
	Usage: "P4 switch running p4/lb.p4 (BMv2 simple_switch_grpc) over P4Runtime",
	Flags: []cli.Flag{p4AddrFlag, p4DeviceFlag, p4ElectionFlag, p4RoleFlag, p4InfoFlag, p4DevcfgFlag, p4RingFlag, p4BatchFlag, p4FallbackFlag, p4CAFlag, p4CertFlag, p4KeyFlag, connectTimeoutFlag},
	Open: func(c *cli.Context) (targets.Target, error) {
		t, err := openBMv2(c, false)
		if err != nil {
			return nil, noPipelineHint(c, err, false, "--p4info p4/build/lb.p4info.txtpb --device-config p4/build/lb.json")
		}
		if t.PipelinePushed() {
			fmt.Fprintf(c.App.ErrWriter, "%s: pushed pipeline %s (tables start empty)\n", t.Name(), t.PipelineSource())
		}
		if port := c.Int(p4FallbackFlag.Name); port >= 0 && !t.Primary() {
			// A backup `lbc run` may not write; the primary, started with
			// the same flags, has set the port.
			fmt.Fprintf(c.App.ErrWriter, "%s: backup controller: the primary sets the fallback port\n", t.Name())
		} else if port >= 0 {
			if _, err := t.SetFallbackPort(c.Context, uint32(port)); err != nil {
				t.Close()
				return nil, err
			}
		}
		return t, nil
	},
	OpenRead: func(c *cli.Context) (targets.Target, error) {
		t, err := openBMv2(c, true)
		if err != nil {
			return nil, noPipelineHint(c, err, true, "") // a push gives the embedded pipeline
		}
		return t, nil
	},
	Counters: targetCounters,
}

func openBMv2(c *cli.Context, readOnly bool) (*bmv2.Target, error) {
	ro, err := p4RuntimeOptions(c, readOnly)
	if err != nil {
		return nil, err
	}
	opts := bmv2.Options{Options: ro, P4InfoPath: c.String(p4InfoFlag.Name), DeviceConfigPath: c.String(p4DevcfgFlag.Name),
		PipelineHint: "--p4info FILE --device-config FILE (p4/build/lb.p4info.txtpb, p4/build/lb.json)"}
	if opts.DeviceConfigPath != "" && opts.P4InfoPath == "" {
		return nil, fmt.Errorf("--device-config needs --p4info (the pipeline is pushed as a pair)")
	}
	ring := c.Int(p4RingFlag.Name)
	if c.IsSet(p4RingFlag.Name) && opts.P4InfoPath != "" {
		return nil, fmt.Errorf("--ring-table-size sizes lbc's embedded pipeline, not the one --p4info gives: give one of them (a build of p4/lb.p4 of another size: make p4 P4FLAGS=-DRING_TABLE_SIZE=N)")
	}
	if c.IsSet(p4RingFlag.Name) && readOnly {
		return nil, fmt.Errorf("--ring-table-size sizes the pipeline a push gives a switch: this command only reads the switch, which reports its own sizes")
	}
	if opts.P4InfoPath == "" && !readOnly {
		// The embedded build: pushed to a switch that runs no pipeline
		// (and again if it restarts empty); another one is left alone.
		info, devcfg, err := p4.BMv2Build(ring)
		if err != nil {
			return nil, fmt.Errorf("--ring-table-size: %w", err)
		}
		opts.P4Info, opts.DeviceConfig, opts.PipelineIfAbsent = info, devcfg, true
		opts.PipelineName = "embedded p4/build (lb.p4info.txtpb, lb.json)"
		if ring != 0 {
			opts.PipelineName = fmt.Sprintf("embedded p4/build (lb.p4info.txtpb, lb.json) with a ring table of %d entries", ring)
		}
	}
	if runShared(c) {
		return bmv2.OpenShared(c.Context, opts) // lbc run: may start as the backup
	}
	return bmv2.Open(c.Context, opts)
}

// p4RuntimeOptions reads the P4Runtime connection flags shared by the
// bmv2 and tofino targets.
func p4RuntimeOptions(c *cli.Context, readOnly bool) (runtime.Options, error) {
	opts := runtime.Options{
		Addr: c.String(p4AddrFlag.Name), DeviceID: c.Uint64(p4DeviceFlag.Name), ElectionLow: c.Uint64(p4ElectionFlag.Name),
		Role: c.String(p4RoleFlag.Name), BatchSize: c.Int(p4BatchFlag.Name), ReadOnly: readOnly, ConnectTimeout: c.Duration(connectTimeoutFlag.Name),
		Logger: slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if ca, cert, key := c.String(p4CAFlag.Name), c.String(p4CertFlag.Name), c.String(p4KeyFlag.Name); ca != "" || cert != "" {
		tc, err := runtime.TLSConfig(ca, cert, key, "")
		if err != nil {
			return opts, fmt.Errorf("--tls-*: %w", err)
		}
		opts.TLS = tc
	}
	if opts.ConnectTimeout <= 0 {
		return opts, fmt.Errorf("--connect-timeout %s: give a positive duration, e.g. 10s", opts.ConnectTimeout)
	}
	if opts.ElectionLow == 0 {
		return opts, fmt.Errorf("--election-id 0 is not a valid election ID; use 1 or more")
	}
	return opts, nil
}

// noPipelineHint adds to an error that says the switch runs no pipeline
// what the user of this command does about it: a push or run gives one
// (pipelineFlags, the target's files); a status or push --dry-run, which
// only read (readOnly), can show nothing until a push has given one.
func noPipelineHint(c *cli.Context, err error, readOnly bool, pipelineFlags string) error {
	if !errors.Is(err, bmv2.ErrNoPipeline) {
		return err
	}
	if !readOnly {
		return fmt.Errorf("%w\n  give the pipeline to push with the tables: %s", err, pipelineFlags)
	}
	what := "lbc status"
	if c.Command != nil && c.Command.Name == "push" {
		what = "lbc push --dry-run"
	}
	push := fmt.Sprintf("lbc push -c lb.yaml --target %s --addr %s", c.String("target"), c.String(p4AddrFlag.Name)) // not targetFlag.Name: an initialization cycle
	if pipelineFlags != "" {
		push += " " + pipelineFlags
	}
	return fmt.Errorf("%w\n  %s only reads what the switch holds, and it holds nothing yet; push the pipeline and the tables first:\n  %s", err, what, push)
}
