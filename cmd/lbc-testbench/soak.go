package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/lbc-dev/lbc/testbench/soak"
	"github.com/urfave/cli/v2"
)

var testbenchSoakCommand = &cli.Command{
	Name:      "soak",
	Usage:     "run lbc run for a long time under churn; check that memory, goroutines and open files stay flat",
	UsageText: "lbc-testbench soak [--duration 30m] [--out soak-out] [--lbc PATH]",
	Description: `Builds lbc (go build ./cmd/lbc, from the source tree; or --lbc PATH) and
runs "lbc run --target bmv2" as a process of its own against the tests'
P4Runtime server (testbench/p4rt, served by the soak on 127.0.0.1; no switch
or root needed) for --duration, while:
  - two of its five HTTP backends (127.0.0.11-15) flap their health answer
    in turn every --flap-every (health checks every 1 s, thresholds 1);
  - the configuration file is rewritten every --reload-every (a backend
    added, then removed and drained);
  - /metrics (the counter snapshot lbc run reads every --counter-interval), /v1/status and /healthz
    are scraped every --scrape-every (250 ms) each.
Every second it samples lbc run's resident memory (/proc/PID/status VmRSS),
goroutines (go_goroutines of its /metrics) and open files (/proc/PID/fd).

It passes when, for each, the median of the last quarter of the run is
within the tolerance of the median of the second quarter (the first is
warm-up): RSS +16 MiB or +25 %, goroutines +5, open files +5; when lbc
run's log has no WARN or ERROR line but the flapping backends' probe
failures; when every reload was applied and no push failed; and when lbc
run exits 0 on SIGTERM. The report (summary.txt, samples.csv, rss.png,
goroutines.png, open-files.png, lbc-run.log) goes to --out.

Examples:
   lbc-testbench soak --duration 2m
   make soak SOAK=10m

Exit status: 0 when every check held, 1 otherwise.`,
	Flags: []cli.Flag{
		&cli.DurationFlag{Name: "duration", Value: soak.DefaultDuration, Usage: "run lbc run for `DURATION` (at least 20s: each quarter needs 5 samples)"},
		&cli.StringFlag{Name: "out", Value: "soak-out", Usage: "report `DIR`"},
		&cli.StringFlag{Name: "lbc", Usage: "the lbc binary to soak (default: go build ./cmd/lbc into --out)"},
		&cli.DurationFlag{Name: "flap-every", Value: soak.DefaultFlapEvery, Usage: "a flapping backend switches its health answer every `DURATION`"},
		&cli.DurationFlag{Name: "reload-every", Value: soak.DefaultReloadEvery, Usage: "rewrite the configuration file every `DURATION`"},
		&cli.DurationFlag{Name: "scrape-every", Value: soak.DefaultScrapeEvery, Usage: "scrape /metrics, /v1/status and /healthz, each, every `DURATION`"},
	},
	Action: func(c *cli.Context) error {
		if c.NArg() > 0 {
			return fmt.Errorf("soak takes no arguments (got %q); see lbc-testbench soak --help", c.Args().First())
		}
		if d := c.Duration("duration"); d < 20*time.Second {
			return fmt.Errorf("--duration %s: too short to decide anything (each quarter of the run needs %d samples, one a second); give at least 20s", d, soak.MinSamplesPerQuarter)
		}
		ctx := c.Context
		if ctx == nil {
			ctx = context.Background()
		}
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		res, err := soak.Run(ctx, soak.Options{
			Duration:    c.Duration("duration"),
			Out:         c.String("out"),
			LBC:         c.String("lbc"),
			FlapEvery:   c.Duration("flap-every"),
			ReloadEvery: c.Duration("reload-every"),
			ScrapeEvery: c.Duration("scrape-every"),
			Progress:    c.App.ErrWriter,
		})
		if err != nil {
			return fmt.Errorf("soak: %w", err)
		}
		fmt.Fprint(c.App.Writer, "\n"+soak.Summary(res))
		fmt.Fprintf(c.App.Writer, "report in %s\n", c.String("out"))
		if !res.OK() {
			return fmt.Errorf("soak failed: %d check(s) (listed above, and in %s/%s)", len(res.Failures), c.String("out"), soak.SummaryTXT)
		}
		return nil
	},
}
