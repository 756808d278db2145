package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lbc-dev/lbc/examples"
	"github.com/lbc-dev/lbc/gslb"
	"github.com/lbc-dev/lbc/gslb/dnsserver"
	"github.com/lbc-dev/lbc/gslb/geo"
	"github.com/lbc-dev/lbc/gslb/metrics"
	"github.com/urfave/cli/v2"
)

var gslbConfigFlag = &cli.StringFlag{
	Name:    "config",
	Aliases: []string{"c"},
	Usage:   "GSLB configuration `FILE` (gslb.yaml); without it, the embedded examples/gslb.yaml",
}

var geoDBFlag = &cli.StringFlag{
	Name:  "geo-db",
	Usage: "MaxMind-format City database `FILE` (it must exist); overrides policy.geoProximity.database, or stands for it when the configuration names none",
}

var gslbCommand = &cli.Command{
	Name:  "gslb",
	Usage: "global server load balancing: pick a site by policy and answer DNS for it",
	Description: `The GSLB answers DNS queries for service names with the address (VIP) of the
best site, where each site is a load balancer run by 'lbc run'. The policy
chain of docs/gslb.md runs in this order; each step narrows the
candidate sites, and a step that cannot decide passes them on:

   G-1 health             sites whose load balancer reports a healthy backend
   G-2 capacity           drop sites over maxSessions or maxBitsPerSec
   G-3 network-proximity  lowest RTT from the site to the resolver (measured at query time)
   G-4 geo-proximity      nearest site to the client (ECS, else resolver) by great circle
   G-5 connection-load    drop sites over maxConnectionLoad (new connections/s over the period)
   G-6 preference         highest operator preference
   G-7 least-selected     the site chosen least often        } exactly one of these
   G-8 static             round robin or weighted round robin } is the final step

policy.mode picks the data the GSLB has (G-MODE): gslb+slb (every step), gslb-only
(no site metrics: health, geo-proximity, preference) or dns (round robin only).

Each site's 'lbc run --metrics ADDR' serves its metrics at /v1/gslb/metrics and
RTT probes at /v1/gslb/rtt (see docs/gslb.md for the JSON). A site probes only
the resolvers its --rtt-allow admits (default: public addresses), on the ports
of --rtt-ports (default 53: policy.networkProximity.tcpPort must be one), at
most --rtt-rate a second; a site that refuses, or does not serve the endpoint,
is named in G-3's note, and G-3 is skipped.

Start with (in the source tree; without -c, the embedded examples/gslb.yaml):
   lbc gslb explain --name www.example.com --client 198.51.100.7 --metrics examples/gslb-sites.json
   lbc gslb demo-geodb --out demo.mmdb
   lbc gslb explain --geo-db demo.mmdb --name www.example.com --client 198.51.100.7
   lbc gslb serve -c examples/gslb.yaml --listen 127.0.0.1:5353
G-4 needs a MaxMind-format City database: while the one the configuration
names is absent, G-4 is skipped on every query (and says so); --geo-db FILE
must exist.`,
	Subcommands: []*cli.Command{gslbServeCommand, gslbExplainCommand, gslbDemoGeoDBCommand},
}

func loadGSLB(c *cli.Context) (string, *gslb.Config, error) {
	name := c.String(gslbConfigFlag.Name)
	var data []byte
	if name == "" {
		name = "examples/gslb.yaml"
		var err error
		if data, err = examples.Files.ReadFile("gslb.yaml"); err != nil {
			return "", nil, err
		}
	} else {
		var err error
		if data, err = os.ReadFile(name); err != nil {
			return "", nil, err
		}
	}
	db := c.String(geoDBFlag.Name)
	if db != "" {
		// Asked for by name: it must be there (a database named only in
		// the configuration may be absent: G-4 is then skipped).
		if _, err := os.Stat(db); err != nil {
			return "", nil, geoHint(fmt.Errorf("--geo-db: %w", err))
		}
	}
	// --geo-db is the database before validation, so that it satisfies
	// geo-proximity's need of one when the configuration names none.
	cfg, err := gslb.LoadWith(name, data, gslb.LoadOptions{GeoDatabase: db})
	if err != nil {
		return "", nil, problemsError(name, err)
	}
	return name, cfg, nil
}

var gslbServeCommand = &cli.Command{
	Name:      "serve",
	Usage:     "run the authoritative DNS server (UDP and TCP) for gslb.yaml",
	UsageText: "lbc gslb serve -c gslb.yaml --listen 127.0.0.1:5353 [--geo-db FILE] [--log-level debug]",
	Description: `Serves A and AAAA for the names of gslb.yaml, authoritative for its zones,
over UDP and TCP on --listen. Polls every site's metrics on metrics.interval;
a site that misses metrics.unknownAfter polls is unknown, and a slow site never
delays an answer. It answers once the first poll of every site has ended (at
most metrics.timeout after it starts), so its first answers already follow the
sites' reports. NXDOMAIN (with the SOA) for unknown names in the zones,
REFUSED outside them, no recursion; EDNS Client Subnet is used for G-4 and
echoed with its scope; answers too large for UDP are truncated (TC); a
per-source UDP rate limit applies (server.rateLimit).

Try it:  dig @127.0.0.1 -p 5353 www.example.com A +subnet=203.0.113.0/24`,
	Flags: []cli.Flag{gslbConfigFlag, geoDBFlag,
		&cli.StringFlag{Name: "listen", Value: "127.0.0.1:5353", Usage: "`ADDR:PORT` for UDP and TCP"},
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "`LEVEL`: debug, info, warn, error"},
	},
	Action: func(c *cli.Context) error {
		name, cfg, err := loadGSLB(c)
		if err != nil {
			return err
		}
		var level slog.Level
		if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
			return fmt.Errorf("--log-level: %w", err)
		}
		log := slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: level}))
		eng, err := gslb.New(cfg, gslb.Options{Log: log})
		if err != nil {
			return fmt.Errorf("%s: %w", name, geoHint(err))
		}
		defer eng.Close()
		pc, ln, err := dnsserver.Listen(c.String("listen"))
		if err != nil {
			return fmt.Errorf("--listen: %w", err)
		}
		ctx := c.Context
		if ctx == nil {
			ctx = context.Background()
		}
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		go eng.Run(ctx)
		// The first answers follow the sites' first reports, not the
		// "nothing known, all kept" of a GSLB that has polled nothing.
		select {
		case <-eng.Polled():
		case <-ctx.Done():
			return nil
		}
		log.Info("serving", "config", name, "udp", pc.LocalAddr().String(), "tcp", ln.Addr().String(),
			"steps", fmt.Sprint(cfg.Steps()), "names", len(cfg.Names), "sites", len(cfg.Sites))
		return dnsserver.New(eng, log).Serve(ctx, pc, ln)
	},
}

var gslbExplainCommand = &cli.Command{
	Name:      "explain",
	Usage:     "show how the policy chain picks the site for one query, step by step",
	UsageText: "lbc gslb explain -c gslb.yaml --name www.example.com --client 198.51.100.7 [--ecs 203.0.113.0/24] [--type A|AAAA] [--metrics FILE | --poll] [--rtt seoul=12ms,... | --probe] [--json]",
	Description: `Runs the chain once for a query and prints each step: the candidates in and
out, what it did (narrowed, decided, passed, skipped) and why, then the step
that decided and the answer. Needs no network unless asked:

   --metrics FILE  the sites' reports, a JSON list of what each site serves at
                   /v1/gslb/metrics: [{"schema": "lbc.gslb.metrics/v1", "site": "seoul",
                   "services": [{"name": "web", "healthyBackends": 2, "backends": 2,
                   "sessions": 10, "bitsPerSec": 1e6, "newConnectionsPerSec": 120}]}]
   --poll          poll every site's metrics once instead
   --rtt LIST      RTTs to the resolver per site, e.g. seoul=12ms,virginia=80ms
   --probe         ask the sites to measure RTTs (as serve does)
Without metrics, every site's health is unknown (as in mode gslb-only); without
RTTs, G-3 is skipped.`,
	Flags: []cli.Flag{gslbConfigFlag, geoDBFlag,
		&cli.StringFlag{Name: "name", Aliases: []string{"n"}, Required: true, Usage: "the queried `NAME`"},
		&cli.StringFlag{Name: "client", Required: true, Usage: "the resolver's `ADDRESS` (the query's source)"},
		&cli.StringFlag{Name: "ecs", Usage: "EDNS Client Subnet `PREFIX`, e.g. 203.0.113.0/24"},
		&cli.StringFlag{Name: "type", Value: "A", Usage: "query `TYPE`: A or AAAA"},
		&cli.StringFlag{Name: "metrics", Usage: "site reports `FILE` (JSON list)"},
		&cli.BoolFlag{Name: "poll", Usage: "poll the sites' metrics once"},
		&cli.StringFlag{Name: "rtt", Usage: "per-site RTT `LIST`, e.g. seoul=12ms,virginia=80ms"},
		&cli.BoolFlag{Name: "probe", Usage: "ask the sites for their RTT to the resolver"},
		&cli.BoolFlag{Name: "json", Usage: "print JSON for machines"},
	},
	Action: func(c *cli.Context) error {
		_, cfg, err := loadGSLB(c)
		if err != nil {
			return err
		}
		q := gslb.Query{Name: gslb.Fqdn(c.String("name")), DryRun: true}
		if q.Resolver, err = netip.ParseAddr(c.String("client")); err != nil {
			return fmt.Errorf("--client: %q is not an IP address", c.String("client"))
		}
		q.Resolver = q.Resolver.Unmap()
		if s := c.String("ecs"); s != "" {
			if q.ECS, err = netip.ParsePrefix(s); err != nil {
				return fmt.Errorf("--ecs: %q is not a prefix such as 203.0.113.0/24", s)
			}
			q.ECS = q.ECS.Masked()
		}
		switch strings.ToUpper(c.String("type")) {
		case "A":
			q.Family = 4
		case "AAAA":
			q.Family = 6
		default:
			return fmt.Errorf("--type: %q: use A or AAAA", c.String("type"))
		}
		o := gslb.Options{NoPoll: !c.Bool("poll"), NoProbe: !c.Bool("probe") && c.String("rtt") == ""}
		if f := c.String("metrics"); f != "" {
			if c.Bool("poll") {
				return fmt.Errorf("--metrics and --poll: give one")
			}
			if o.StaticMetrics, err = readReports(f); err != nil {
				return err
			}
		}
		if s := c.String("rtt"); s != "" {
			if c.Bool("probe") {
				return fmt.Errorf("--rtt and --probe: give one")
			}
			rtt, err := parseRTTs(s, cfg)
			if err != nil {
				return err
			}
			o.RTT = rtt
		}
		eng, err := gslb.New(cfg, o)
		if err != nil {
			return geoHint(err)
		}
		defer eng.Close()
		ctx := c.Context
		if ctx == nil {
			ctx = context.Background()
		}
		if c.Bool("poll") {
			pctx, cancel := context.WithTimeout(ctx, cfg.Metrics.Timeout.D()+time.Second)
			eng.PollOnce(pctx)
			cancel()
		}
		if eng.Zone(q.Name) == nil {
			return fmt.Errorf("--name: %s is in none of the zones of the configuration (a server answers REFUSED)", q.Name)
		}
		r := eng.Select(ctx, q)
		for _, n := range eng.Notes() {
			fmt.Fprintln(c.App.ErrWriter, "lbc gslb explain: note:", n)
		}
		if c.Bool("json") {
			var as []string
			for _, a := range r.Addrs {
				as = append(as, a.String())
			}
			enc := json.NewEncoder(c.App.Writer)
			enc.SetEscapeHTML(false) // "<", ">" and "&" as written (packets read "a > b"), not as \u003e
			enc.SetIndent("", "  ")
			return enc.Encode(map[string]any{"name": q.Name, "decision": r.Decision, "sites": r.Sites, "addresses": as, "ecsScope": r.ECSScope})
		}
		r.Explain(c.App.Writer)
		return nil
	},
}

// geoHint adds the fix to a missing geolocation database.
func geoHint(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w\n  give a MaxMind-format City database with --geo-db FILE (lbc gslb demo-geodb --out demo.mmdb writes a small demo one)", err)
	}
	return err
}

// staticRTT is a fixed RTT per site (explain --rtt).
type staticRTT map[string]time.Duration

func (s staticRTT) Measure(context.Context, netip.Addr) (map[string]time.Duration, string) {
	return s, "not given in --rtt"
}

func parseRTTs(s string, cfg *gslb.Config) (staticRTT, error) {
	out := staticRTT{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		d, err := time.ParseDuration(v)
		if !ok || err != nil || d < 0 {
			return nil, fmt.Errorf("--rtt: %q: write SITE=DURATION, e.g. seoul=12ms", part)
		}
		found := false
		for _, st := range cfg.Sites {
			found = found || st.Name == k
		}
		if !found {
			return nil, fmt.Errorf("--rtt: %q is not a site of the configuration", k)
		}
		out[k] = d
	}
	return out, nil
}

func readReports(file string) (map[string]metrics.SiteReport, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("--metrics %s: want a JSON list of site reports: %w", file, err)
	}
	out := map[string]metrics.SiteReport{}
	for i, r := range raw {
		rep, err := metrics.Decode(r)
		if err != nil {
			return nil, fmt.Errorf("--metrics %s: [%d]: %w", file, i, err)
		}
		if rep.Site == "" {
			return nil, fmt.Errorf("--metrics %s: [%d]: no \"site\"", file, i)
		}
		out[rep.Site] = rep
	}
	return out, nil
}

var gslbDemoGeoDBCommand = &cli.Command{
	Name:      "demo-geodb",
	Usage:     "write a tiny MaxMind-format database of documentation prefixes, for trying explain and serve",
	UsageText: "lbc gslb demo-geodb --out demo.mmdb",
	Description: `Writes a City-layout .mmdb that places the documentation prefixes:
   203.0.113.0/24, 2001:db8:1::/48   Tokyo
   198.51.100.0/24, 2001:db8:2::/48  New York
   192.0.2.0/24, 2001:db8:3::/48     Paris
Use a real GeoLite2-City or GeoIP2-City database in production.`,
	Flags: []cli.Flag{&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "output `FILE`"}},
	Action: func(c *cli.Context) error {
		b, err := geo.Build(geo.Demo)
		if err != nil {
			return err
		}
		if err := os.WriteFile(c.String("out"), b, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(c.App.Writer, "wrote %s (%d bytes)\n", c.String("out"), len(b))
		return nil
	},
}
