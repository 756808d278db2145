package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/controller/bgp"
	"github.com/lbc-dev/lbc/examples"
	"github.com/lbc-dev/lbc/fleet"
	"github.com/lbc-dev/lbc/gslb/metrics"
	"github.com/lbc-dev/lbc/gslb/proximity"
	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/sim"
	"github.com/urfave/cli/v2"
)

var (
	runTargetFlag = &cli.StringSliceFlag{Name: "target", Aliases: []string{"t"}, Value: cli.NewStringSlice("sim"),
		Usage: "datapath `KIND`[=WHERE] to keep programmed; repeat the flag for several. KIND is sim or " + adapterNames() + "; WHERE overrides --addr (bmv2) or --iface (xdp) for that target"}
	runMetricsFlag  = &cli.StringFlag{Name: "metrics", Usage: "serve /metrics (Prometheus), /healthz, " + controller.StatusPath + " (lbc status --controller), " + metrics.Path + " and " + proximity.Path + " (GSLB; see --rtt-allow) on `ADDR`, e.g. 127.0.0.1:9100"}
	runSiteFlag     = &cli.StringFlag{Name: "site", Usage: "site `NAME` in the GSLB report (" + metrics.Path + ")"}
	runDebounceFlag = &cli.DurationFlag{Name: "debounce", Value: 100 * time.Millisecond, Usage: "gather health changes over `DURATION` into one push"}
	runWatchFlag    = &cli.DurationFlag{Name: "watch-interval", Value: 2 * time.Second, Usage: "check the configuration file for changes every `DURATION` (0: only on SIGHUP)"}
	runVerifyFlag   = &cli.DurationFlag{Name: "verify-interval", Value: time.Minute, Usage: "read every target back every `DURATION`, flag and repair drift (0: never)"}
	runCountersFlag = &cli.DurationFlag{Name: "counter-interval", Value: controller.DefaultCounterInterval, Usage: "read the datapaths' counters every `DURATION` into the snapshot that /metrics and " + controller.StatusPath + " serve, so that a scrape never reads a switch nor waits for a push, and a push never waits for more than one counter array (lbc_datapath_counters_age_seconds says how old the snapshot is; 0: never read them, and export no datapath series)"}
	runRetryFlag    = &cli.DurationFlag{Name: "retry-interval", Value: 5 * time.Second, Usage: "retry a push that failed (a target that refused or lost writes) after `DURATION`; a switch that comes back is pushed to at once, without this wait"}
	runProbesFlag   = &cli.IntFlag{Name: "max-probes", Value: 64, Usage: "`N` health probes in flight at most"}
	runLogFlag      = &cli.StringFlag{Name: "log-level", Value: "info", Usage: "`LEVEL` of logs on stderr: debug, info, warn, error"}
	runLogFmtFlag   = &cli.StringFlag{Name: "log-format", Value: "text", Usage: "`FORMAT` of logs on stderr: text (key=value) or json (one object a line, for journald, Loki or Elasticsearch)"}
	runBGPFlag      = &cli.StringFlag{Name: "bgp", Usage: "announce the VIPs this node serves over BGP as `bgp.yaml` says (local ASN, router ID, peers; docs/fleet.md): a VIP is announced while the datapath holds the tables in force and its service has eligible backends, withdrawn otherwise and on shutdown"}
)

var runCommand = &cli.Command{
	Name:      "run",
	Usage:     "keep datapaths programmed: health checks, failover, draining, reloads, metrics",
	UsageText: "lbc run -c lb.yaml [--target sim|xdp|bmv2|tofino[=WHERE]]... [--metrics HOST:PORT] [--bgp bgp.yaml] [--fleet fleet.yaml]",
	ArgsUsage: " ",
	Description: `lbc run loads lb.yaml, reads every target back, probes every backend once,
pushes only the difference, and then keeps the targets right: health checks
(HTTP with the X-Load-Balancing-Endpoint-Weight header for WEIGHTED_MAGLEV,
TCP, UDP, ICMP) with thresholds and jitter; failover and failback (R-ELIG-5)
and epoch bumps (R-EPOCH) logged; removed backends drained (R-DRAIN); the
configuration reloaded on SIGHUP and when the file changes (a file that
fails validation is rejected with its problems, and the running one stays).
SIGTERM stops the controller and leaves the datapaths programmed; a restart
with nothing changed writes nothing.

Several --target flags program several datapaths (switches and XDP nodes
behind ECMP) with identical tables; lbc status --controller shows each
target's digest and flags one that differs. Two lbc run on one switch
arbitrate with P4Runtime election IDs (--election-id): the highest writes,
the other keeps its state warm and takes over, writing only what changed.
A switch that dies or stops answering (a 1 s heartbeat) fails /healthz and
withdraws its VIPs at once; when it is back, lbc reads it back and writes
what it lacks: the pipeline and every table after a restart, nothing after
a partition that left its tables intact. Started while a switch is down,
lbc run waits for it (--connect-timeout per attempt, then longer), with
/healthz 503 and nothing announced, and pushes once it answers; a
configuration or flag that can never work fails at once.

--target xdp creates the XDP maps, when none exist, at the sizes of
--service-entries, --backend-entries, --ring-entries and --conntrack-entries
(docs/xdp.md#map-sizes); maps that exist keep theirs. lbc run refuses to
start when the maps are smaller than a size flag given or than the
configuration needs, and prints the commands that re-create them.

Examples:
   lbc run -c lb.yaml --metrics 127.0.0.1:9100                  # reference datapath (sim)
   lbc run -c lb.yaml --target xdp --iface eth1
   lbc run -c lb.yaml --target bmv2 --addr 127.0.0.1:9559        # pushes the embedded p4/build pipeline if the switch runs none
   lbc run -c lb.yaml --target bmv2=10.0.0.1:9559 --target bmv2=10.0.0.2:9559 --target xdp=eth1
   lbc run -c lb.yaml --target xdp --iface eth1 --bgp bgp.yaml     # one node of an ECMP fleet
   lbc status --controller 127.0.0.1:9100

With --bgp, SIGTERM first withdraws every VIP and closes the BGP sessions
(the routers move traffic to the other nodes at once), then stops; a node
that dies is withdrawn by its routers when the BGP hold time runs out.`,
	Flags: append(append([]cli.Flag{configFlag, exampleFlag, runTargetFlag, runMetricsFlag, runSiteFlag, runDebounceFlag, runWatchFlag, runVerifyFlag, runCountersFlag, runRetryFlag, runProbesFlag, runLogFlag, runLogFmtFlag, runBGPFlag, runFleetFlag, runRTTAllowFlag, runRTTPortsFlag, runRTTRateFlag}, adapterFlags()...), xdpSizeFlags...),
	Action: func(c *cli.Context) error {
		var level slog.Level
		if err := level.UnmarshalText([]byte(c.String(runLogFlag.Name))); err != nil {
			return fmt.Errorf("--log-level: %w", err)
		}
		var log *slog.Logger
		switch f := c.String(runLogFmtFlag.Name); f {
		case "text":
			log = slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: level}))
		case "json":
			log = slog.New(slog.NewJSONHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: level}))
		default:
			return fmt.Errorf("--log-format %q: use text or json", f)
		}
		if d := c.Duration(runRetryFlag.Name); d <= 0 {
			return fmt.Errorf("--retry-interval %s: give a positive duration, e.g. 5s", d)
		}
		if set := sizeSetFlags(c); len(set) > 0 && !slices.ContainsFunc(c.StringSlice(runTargetFlag.Name), func(t string) bool { return t == "xdp" || strings.HasPrefix(t, "xdp=") }) {
			return fmt.Errorf("%s size the maps of --target xdp, and no --target is xdp", strings.Join(set, ", "))
		}
		if err := requireConfig(c); err != nil {
			return err
		}
		cfg := c.String(configFlag.Name)
		var cfgData []byte // the embedded example, with --example
		if cfg == "" {
			// As compile does: the embedded example, which is no file,
			// so nothing is watched and SIGHUP reloads the same.
			cfg, cfgData = "examples/"+examples.DefaultName, examples.Default()
			log.Info("--example: running the embedded example; give -c lb.yaml for a configuration of your own (watched and reloaded)", "config", cfg)
		}

		var bgpCfg *bgp.Config
		if f := c.String(runBGPFlag.Name); f != "" {
			data, err := os.ReadFile(f)
			if err != nil {
				return fmt.Errorf("--bgp: %w", err)
			}
			if bgpCfg, err = bgp.Load(f, data); err != nil {
				return fmt.Errorf("--bgp %s: %w", f, err)
			}
		}
		var fleetCfg *fleet.Config
		if f := c.String(runFleetFlag.Name); f != "" {
			data, err := os.ReadFile(f)
			if err != nil {
				return fmt.Errorf("--fleet: %w", err)
			}
			if fleetCfg, err = fleet.Load(f, data); err != nil {
				return fmt.Errorf("--fleet %s: %w", f, err)
			}
		}
		// A file that can never work fails now, not after a wait for
		// the switch.
		if err := controller.CheckConfig(cfg, cfgData); err != nil {
			return err
		}
		rtt, err := siteRTTHandler(c, log) // G-3's probes, within --rtt-* (run_rtt.go)
		if err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, os.Interrupt)
		defer stop()
		c.Context = ctx // the targets' Open waits end with a SIGTERM
		m := controller.NewMetrics()
		// The fleet node reads and writes the datapaths' conntrack through
		// the controller (under each target's lock), which it needs
		// first: it is made with a late-bound conntrack. Made before the
		// wait for a switch, so its certificates fail at once.
		var fleetNode *fleet.Node
		late := &lateConntrack{}
		if fleetCfg != nil {
			var err error
			if fleetNode, err = fleet.New(fleet.Options{Config: fleetCfg, Conntrack: late, Logger: log, Registry: m.Registry()}); err != nil {
				return fmt.Errorf("--fleet: %w", err)
			}
		}
		var sharer controller.FleetSharer
		if fleetNode != nil {
			sharer = fleetNode
		}
		st := newStartup()
		var srv *http.Server
		var ln net.Listener
		if addr := c.String(runMetricsFlag.Name); addr != "" {
			// Served before the targets are opened: while lbc run waits
			// for a switch, /healthz says so (503).
			var err error
			if ln, err = net.Listen("tcp", addr); err != nil {
				return fmt.Errorf("--metrics %s: %w", addr, err)
			}
			mux := http.NewServeMux()
			mux.Handle("/metrics", m.Handler())
			mux.Handle(proximity.Path, rtt)
			for _, path := range []string{"/healthz", controller.StatusPath, metrics.Path} {
				mux.Handle(path, st.handler(path))
			}
			srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
			log.Info("serving metrics and status", "addr", ln.Addr().String())
		}
		run := func(ctx context.Context) error {
			tgts, err := openRunTargets(ctx, c, c.StringSlice(runTargetFlag.Name), log, st)
			if err != nil && ctx.Err() != nil {
				log.Info("stopped before every target was open; nothing was pushed", "err", err)
				return nil
			}
			if err != nil {
				return err
			}
			defer func() {
				for _, t := range tgts {
					t.Close() // the datapath stays programmed
				}
			}()
			var speaker *bgp.Speaker
			var announcer controller.Announcer
			if bgpCfg != nil {
				speaker = bgp.New(bgpCfg, log, bgp.NewMetrics(m.Registry()))
				if err := speaker.Start(ctx); err != nil {
					return err
				}
				announcer = speaker
				// Runs before the targets are closed (deferred earlier): the
				// routers move traffic away while this datapath still serves.
				defer func() {
					sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					if err := speaker.Shutdown(sctx, "lbc run stopping"); err != nil {
						log.Error("bgp shutdown", "err", err)
					}
				}()
			}
			ctl, err := controller.New(controller.Options{
				ConfigPath:        cfg,
				ConfigData:        cfgData,
				Targets:           tgts,
				Logger:            log,
				Debounce:          orNever(c.Duration(runDebounceFlag.Name)),
				WatchInterval:     orNever(c.Duration(runWatchFlag.Name)),
				VerifyInterval:    orNever(c.Duration(runVerifyFlag.Name)),
				CounterInterval:   orNever(c.Duration(runCountersFlag.Name)),
				RetryInterval:     c.Duration(runRetryFlag.Name),
				MaxProbesInFlight: c.Int(runProbesFlag.Name),
				Metrics:           m,
				Announcer:         announcer,
				Fleet:             sharer,
			})
			if err != nil {
				return err
			}
			if fleetNode != nil {
				ct, ok := ctl.Conntrack()
				if !ok {
					return fmt.Errorf("--fleet: no --target whose conntrack lbc can read and write (xdp, sim); the P4 targets' registers are not shared yet (docs/fleet.md)")
				}
				late.ConntrackTarget = ct
				fctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- fleetNode.Run(fctx) }()
				defer func() {
					cancel()
					if err := <-done; err != nil {
						log.Error("fleet", "err", err)
					}
				}()
			}
			st.serve("/healthz", ctl.HealthzHandler())
			st.serve(controller.StatusPath, ctl.StatusHandler())
			st.serve(metrics.Path, metrics.Handler((&controller.SiteReporter{C: ctl, Site: c.String(runSiteFlag.Name)}).Report))
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			go func() {
				for {
					select {
					case <-ctx.Done():
						return
					case <-hup:
						log.Info("SIGHUP: reloading", "file", cfg)
						_ = ctl.Reload(ctx) // a rejected file is logged with its problems
					}
				}
			}()
			return ctl.Run(ctx)
		}
		if srv == nil {
			return run(ctx)
		}
		return runServing(ctx, run, srv, ln)
	},
}

// runServing runs the controller (run: opening the targets, then the
// controller's loop) and the metrics server together. A
// server that stops on its own (its listener failed) stops the controller,
// and lbc run exits with the reason: the GSLB and Prometheus can no longer
// see this site. The datapaths stay programmed, and a restarted lbc run
// writes nothing when nothing changed.
func runServing(ctx context.Context, run func(context.Context) error, srv *http.Server, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	ran := make(chan error, 1)
	go func() { ran <- run(ctx) }()
	select {
	case err := <-ran:
		srv.Close()
		<-served // http.ErrServerClosed
		return err
	case err := <-served:
		cancel()
		if rerr := <-ran; rerr != nil {
			err = errors.Join(err, rerr)
		}
		return fmt.Errorf("--metrics %s: the metrics server stopped, so lbc run stops (the datapaths stay programmed): %w", ln.Addr(), err)
	}
}

// orNever maps a flag's 0 ("never") to the controller's negative.
func orNever(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// openRunTargets opens each --target KIND[=WHERE]; a switch that does not
// answer is waited for (openWaiting).
func openRunTargets(ctx context.Context, c *cli.Context, specs []string, log *slog.Logger, st *startup) ([]targets.Target, error) {
	var out []targets.Target
	fail := func(err error) ([]targets.Target, error) {
		for _, t := range out {
			t.Close()
		}
		return nil, err
	}
	seen := map[string]bool{}
	for _, spec := range specs {
		kind, where, _ := strings.Cut(spec, "=")
		var t targets.Target
		switch kind {
		case "sim":
			// The reference datapath, in this process: for trying lbc run
			// out, and for status, metrics and explain without hardware.
			start := time.Now()
			d := sim.New(sim.Options{Now: func() time.Duration { return time.Since(start) }})
			if where != "" {
				t = namedTarget{d, "sim " + where}
			} else {
				t = d
			}
		default:
			a, ok := adapters[kind]
			if !ok {
				return fail(fmt.Errorf("--target %q: known targets are sim, %s", spec, adapterNames()))
			}
			if where != "" {
				flag := map[string]string{"bmv2": "addr", "xdp": "iface"}[kind]
				if flag == "" {
					return fail(fmt.Errorf("--target %q: %s takes no =WHERE", spec, kind))
				}
				if err := c.Set(flag, where); err != nil {
					return fail(err)
				}
			}
			open := func() (targets.Target, error) { return a.Open(c) }
			var err error
			if waitsForSwitch(kind) {
				t, err = openWaiting(ctx, c, spec, open, log, st)
			} else {
				t, err = open()
			}
			if err != nil {
				return fail(fmt.Errorf("--target %s: %w", spec, err))
			}
		}
		if seen[t.Name()] {
			t.Close()
			return fail(fmt.Errorf("--target %s: %s is already a target", spec, t.Name()))
		}
		seen[t.Name()] = true
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, errors.New("no --target")
	}
	return out, nil
}

// runShared reports whether targets are opened for `lbc run`, where a
// P4Runtime switch may be shared with another controller (HA): the target
// then opens as the backup when another controller is primary.
func runShared(c *cli.Context) bool { return c.Command != nil && c.Command.Name == "run" }

// namedTarget renames a target (several sims in one process).
type namedTarget struct {
	*sim.Datapath
	name string
}

func (n namedTarget) Name() string { return n.name }

// lateConntrack is a conntrack bound after the controller that provides
// it is made.
type lateConntrack struct{ targets.ConntrackTarget }
