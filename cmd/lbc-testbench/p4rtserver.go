package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/lbc-dev/lbc/p4"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/testbench/p4rt"
	"github.com/urfave/cli/v2"
	"google.golang.org/protobuf/proto"
)

const embeddedP4Info = "p4/build/lb.p4info.txtpb"

var testbenchP4RTServerCommand = &cli.Command{
	Name:      "p4rt-server",
	Usage:     "serve P4Runtime on loopback with the test suite's in-process switch: try lbc push and lbc status --target bmv2 without one",
	UsageText: "lbc-testbench p4rt-server [--p4info FILE] [--listen 127.0.0.1:9559] [--device-id 1] [--no-pipeline]",
	Description: `Runs the P4Runtime server the tests use (testbench/p4rt) until interrupted:
real gRPC, arbitration by election ID, pipeline set and get, and Write and
Read of table entries, default entries and counters, each checked against
the P4Info the server holds, with the spec's error codes. It forwards no
packets: it is a switch's control plane, for trying the P4Runtime path of
lbc (push, status, run) anywhere, with no BMv2 installed.

It starts running --p4info (default: the P4Info of p4/lb.p4 embedded in the
binary, ` + embeddedP4Info + `) as if a controller had pushed it; with
--no-pipeline it starts with none, as a switch just started or restarted,
and lbc push or run pushes lbc's embedded pipeline (or --p4info FILE
--device-config FILE).

Try it (in the source tree; two terminals):
   lbc-testbench p4rt-server --listen 127.0.0.1:9559
   lbc push -c examples/failover.yaml --target bmv2 --addr 127.0.0.1:9559
   lbc status --target bmv2 --addr 127.0.0.1:9559
   lbc run -c examples/failover.yaml --target bmv2 --addr 127.0.0.1:9559`,
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "p4info", Usage: "P4Info `FILE` (text format) the server starts with (default: the embedded " + embeddedP4Info + ")"},
		&cli.StringFlag{Name: "listen", Value: "127.0.0.1:9559", Usage: "`HOST:PORT` to serve gRPC on (port 0: any free one, printed)"},
		&cli.Uint64Flag{Name: "device-id", Value: 1, Usage: "P4Runtime device `ID` (lbc's --device-id)"},
		&cli.BoolFlag{Name: "no-pipeline", Usage: "start with no pipeline: a controller pushes one (lbc push and run push the embedded one)"},
	},
	Action: func(c *cli.Context) error {
		if c.NArg() > 0 {
			return fmt.Errorf("p4rt-server takes no arguments (got %q); see lbc-testbench p4rt-server --help", c.Args().First())
		}
		srv, addr, err := startP4RTServer(c)
		if err != nil {
			return err
		}
		defer srv.Stop()
		fmt.Fprintf(c.App.Writer, "P4Runtime server on %s, device %d; stop it with Ctrl-C\n", addr, c.Uint64("device-id"))
		ctx := c.Context
		if ctx == nil {
			ctx = context.Background()
		}
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		<-ctx.Done()
		fmt.Fprintln(c.App.Writer, "P4Runtime server stopping")
		return nil
	},
}

// startP4RTServer starts the server as the flags say and returns it and
// the address it listens on.
func startP4RTServer(c *cli.Context) (*p4rt.Server, string, error) {
	opts := p4rt.Options{DeviceID: c.Uint64("device-id")}
	if opts.DeviceID == 0 {
		return nil, "", fmt.Errorf("--device-id 0: P4Runtime device IDs start at 1 here (lbc's --device-id defaults to 1)")
	}
	file, raw := c.String("p4info"), p4.BMv2P4Info
	if c.Bool("no-pipeline") && file != "" {
		return nil, "", fmt.Errorf("--no-pipeline and --p4info: give one (the server starts with --p4info's pipeline, or with none)")
	}
	if file != "" {
		var err error
		if raw, err = os.ReadFile(file); err != nil {
			return nil, "", fmt.Errorf("--p4info: %w", err)
		}
	} else {
		file = embeddedP4Info + " (embedded)"
	}
	if !c.Bool("no-pipeline") {
		info, err := runtime.ParseP4Info(raw)
		if err != nil {
			return nil, "", fmt.Errorf("--p4info %s: %w", file, err)
		}
		if _, err := runtime.NewSchema(info); err != nil {
			return nil, "", fmt.Errorf("--p4info %s: %w", file, err)
		}
		// The cookie lbc computes for this P4Info with no device config,
		// or, for the embedded one, with the embedded device config: the
		// server then runs what lbc push and run push by default.
		canon, err := proto.MarshalOptions{Deterministic: true}.Marshal(info)
		if err != nil {
			return nil, "", fmt.Errorf("--p4info %s: %w", file, err)
		}
		var devcfg []byte
		if c.String("p4info") == "" {
			devcfg = p4.BMv2JSON
		}
		opts.P4Info, opts.Cookie = info, bmv2.Cookie(canon, devcfg)
	}
	srv, err := p4rt.New(opts)
	if err != nil {
		return nil, "", fmt.Errorf("--p4info %s: %w", file, err)
	}
	if err := srv.Start(c.String("listen")); err != nil {
		return nil, "", fmt.Errorf("--listen: %w", err)
	}
	if opts.P4Info != nil {
		fmt.Fprintf(c.App.ErrWriter, "pipeline: %s\n", file)
	} else {
		fmt.Fprintln(c.App.ErrWriter, "pipeline: none (--no-pipeline): lbc push and lbc run push lbc's embedded one")
	}
	return srv, srv.Addr(), nil
}
