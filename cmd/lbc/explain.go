package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/sim"
	"github.com/lbc-dev/lbc/trace"
	"github.com/urfave/cli/v2"
)

var explainCommand = &cli.Command{
	Name:      "explain",
	Usage:     "show every decision for one packet, with its rule ID",
	UsageText: `lbc explain -c lb.yaml [--health health.yaml] --packet "tcp 198.51.100.7:4242 > 203.0.113.10:80 S" [--trace t.jsonl] [--at SEC] [--json]`,
	Description: `Runs one packet through the reference datapath (targets/sim) and prints each
decision of the per-packet algorithm with the rule of spec/lb-semantics.md
that made it: the service matched, conntrack admission (R-CT-1/2/3), the
tracking tuple and its bytes (R-TRK), entry validity (R-AGE, R-EPOCH,
R-DRAIN, R-PERSIST, R-PERSIST-CAP: a backend's deadline and the rule that
set it), the affinity tuple and its bytes (R-AFF), the CRC32 hash
(R-HASH), the ring slot (R-MAGLEV-1), the eligible set and the rule that
chose it (R-ELIG), the backend and the encapsulation.

The packet notation:
   PROTO SRC[:PORT] > DST[:PORT] [FLAGS] [frag=first|middle|last] [id=N] [type=N code=N] [quote=PROTO SRC:PORT>DST:PORT]
   tcp 198.51.100.7:4242 > 203.0.113.10:80 S
   udp [2001:db8::7]:5000 > [2001:db8::10]:53
   udp 198.51.100.7 > 203.0.113.30 frag=middle id=7
   icmp 192.0.2.254 > 203.0.113.10 type=3 code=4 quote=tcp 203.0.113.10:80>198.51.100.7:4242

Conntrack starts empty; --trace replays a trace first (its packets create
entries, its events change health and configuration), and the packet then
runs at --at seconds (default: the trace's last time).`,
	Flags: []cli.Flag{configFlag, healthFlag,
		&cli.StringFlag{Name: "packet", Aliases: []string{"p"}, Required: true, Usage: "the `PACKET`, e.g. \"tcp 198.51.100.7:4242 > 203.0.113.10:80 S\""},
		&cli.StringFlag{Name: "trace", Usage: "replay trace `FILE` first, to build conntrack and state"},
		&cli.Float64Flag{Name: "at", Value: -1, Usage: "virtual time in `SECONDS` of the packet (default 0, or the trace's last time)"},
		fallbackFlag, pushOnlyFlag,
		&cli.BoolFlag{Name: "json", Usage: "print JSON for machines"},
	},
	Action: func(c *cli.Context) error {
		pkt, err := trace.ParsePacketSpec(c.String("packet"))
		if err != nil {
			return fmt.Errorf("--packet: %w", err)
		}
		l, err := loadConfig(c, c.App.ErrWriter)
		if err != nil {
			return err
		}
		ctx := c.Context
		if ctx == nil {
			ctx = context.Background()
		}
		dp := sim.New(sim.Options{Fallback: c.Bool(fallbackFlag.Name)})
		rp, err := trace.NewReplayer(ctx, l.Config, l.State, dp, dp)
		if err != nil {
			return err
		}
		rp.PushOnly = c.Bool(pushOnlyFlag.Name)
		last := 0.0
		if name := c.String("trace"); name != "" {
			if last, err = replayQuietly(ctx, rp, name); err != nil {
				return err
			}
		}
		at := c.Float64("at")
		if at < 0 {
			at = last
		}
		if at < last {
			return fmt.Errorf("--at %g is before the trace's last time %g", at, last)
		}
		// Draining deadlines up to the packet's time apply first.
		if _, err := rp.Advance(ctx, at); err != nil {
			return err
		}
		v, det, err := dp.ProcessDetail(pkt, trace.Duration(at))
		if err != nil {
			return err
		}
		if c.Bool("json") {
			return writeExplainJSON(c.App.Writer, pkt, at, v, det)
		}
		writeExplainText(c.App.Writer, pkt, at, v, det)
		return nil
	},
}

func replayQuietly(ctx context.Context, rp *trace.Replayer, name string) (float64, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	rd := trace.NewReader(f, name)
	last := 0.0
	for {
		line, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return last, nil
		}
		if err != nil {
			return 0, err
		}
		rp.PushOnly = rp.PushOnly || rd.Header().PushOnly
		if _, err := rp.Step(ctx, line); err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		last = line.T
	}
}

type explainJSON struct {
	Packet     string         `json:"packet"`
	T          float64        `json:"t"`
	Action     string         `json:"action"`
	Service    string         `json:"service,omitempty"`
	Backend    string         `json:"backend,omitempty"`
	BackendID  uint32         `json:"backendID,omitempty"`
	CT         string         `json:"ct,omitempty"`
	DropReason string         `json:"drop,omitempty"`
	Steps      []targets.Step `json:"steps"`
	Detail     sim.Detail     `json:"detail"`
}

func writeExplainJSON(w io.Writer, p targets.Packet, at float64, v targets.Verdict, d sim.Detail) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(explainJSON{Packet: trace.FormatPacket(p), T: at, Action: v.Action.String(), Service: v.Service,
		Backend: v.Backend, BackendID: v.BackendID, CT: v.CT, DropReason: v.DropReason, Steps: v.Steps, Detail: d})
}

func writeExplainText(w io.Writer, p targets.Packet, at float64, v targets.Verdict, d sim.Detail) {
	fmt.Fprintf(w, "packet  %s  at t=%gs\n", trace.FormatPacket(p), at)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range v.Steps {
		fmt.Fprintf(tw, "  %s\t%s\n", s.Rule, s.Detail)
	}
	tw.Flush()
	switch v.Action {
	case targets.Forward:
		fmt.Fprintf(w, "verdict forward to %s (%s), ct %s\n", v.Backend, d.BackendIP, v.CT)
	case targets.Drop:
		fmt.Fprintf(w, "verdict drop (%s)", v.DropReason)
		if v.CT != "" {
			fmt.Fprintf(w, ", ct %s", v.CT)
		}
		fmt.Fprintln(w)
	default:
		fmt.Fprintf(w, "verdict %s\n", v.Action)
	}
}
