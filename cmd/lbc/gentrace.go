package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/lbc-dev/lbc/trace"
	"github.com/urfave/cli/v2"
)

var genTraceCommand = &cli.Command{
	Name:      "gen-trace",
	Usage:     "generate a seeded, realistic packet trace for a configuration",
	UsageText: "lbc gen-trace [-c lb.yaml] [--seed N] [--packets N] [--clients N] [--duration SEC] [--events] [--oversize] [-o t.jsonl]",
	Description: `Writes a trace (docs/sim.md) for 'lbc replay': many clients, TCP connections
(SYN, data, FIN or RST, reused ports), UDP datagrams (some fragmented, some
fragments out of order), ESP, GRE and ICMP echo to L3_DEFAULT services, ICMP
errors about live flows, packets to no service; IPv4 and IPv6 as the VIPs
are; one packet in eight with a VLAN tag (R-VLAN). --events adds health
flaps (one at least on every service whose entries stop persisting on an
unhealthy backend), weight changes (weighted services) and endpoint removals
and re-additions, with flows live across them. --oversize adds full-size
packets with DF set (R-MTU). The same seed gives the same trace.

With -c, the trace starts with a "# config:" line naming the file (relative
to the trace's folder when it is in it or under it, else absolute), which lbc replay reads
when it is not given -c.`,
	Flags: []cli.Flag{configFlag,
		&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "random `SEED`"},
		&cli.IntFlag{Name: "packets", Value: 10000, Usage: "`N` packet lines"},
		&cli.IntFlag{Name: "clients", Value: 500, Usage: "`N` client addresses per address family"},
		&cli.Float64Flag{Name: "duration", Value: 300, Usage: "`SECONDS` the trace spans"},
		&cli.BoolFlag{Name: "events", Usage: "add health, weight, remove and add events"},
		&cli.BoolFlag{Name: "oversize", Usage: "add full-size packets with DF set (R-MTU)"},
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write to `FILE` instead of stdout"},
	},
	Action: func(c *cli.Context) error {
		l, err := loadConfig(c, c.App.ErrWriter)
		if err != nil {
			return err
		}
		if c.Int("packets") < 1 || c.Int("clients") < 1 || c.Float64("duration") <= 0 {
			return fmt.Errorf("--packets, --clients and --duration must be positive")
		}
		lines := trace.Generate(l.Config, trace.GenOptions{Seed: c.Uint64("seed"), Packets: c.Int("packets"),
			Clients: c.Int("clients"), Duration: c.Float64("duration"), Events: c.Bool("events"), Oversize: c.Bool("oversize")})
		w := c.App.Writer
		out := c.String("output")
		if out != "" {
			f, err := os.Create(out)
			if err != nil {
				return err
			}
			defer f.Close()
			w = f
		}
		if cfg := c.String(configFlag.Name); cfg != "" {
			// lbc replay reads it when -c is not given.
			if _, err := fmt.Fprintf(w, "# config: %s\n", headerPath(cfg, out)); err != nil {
				return err
			}
		}
		if err := trace.Write(w, lines); err != nil {
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "generated %s\n", trace.Describe(lines))
		return nil
	},
}

// headerPath is how a trace's "# config:" line names file: relative to the
// folder of the trace (out) when file is in that folder or under it, as
// spec traces do, so that the two can move together; absolute otherwise,
// and for a trace on stdout, whose folder is not known.
func headerPath(file, out string) string {
	abs, err := filepath.Abs(file)
	if err != nil {
		return file
	}
	if out == "" {
		return abs
	}
	dir, err := filepath.Abs(filepath.Dir(out))
	if err != nil {
		return abs
	}
	rel, err := filepath.Rel(dir, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return abs
	}
	return filepath.ToSlash(rel)
}
