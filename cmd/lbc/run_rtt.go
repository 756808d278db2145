package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/lbc-dev/lbc/gslb/proximity"
	"github.com/urfave/cli/v2"
)

// lbc run serves the GSLB's network proximity (G-3) on --metrics: the
// GSLB asks each site for its RTT to the querying resolver
// (proximity.Path), and the site probes it. Whoever can reach --metrics
// can ask, so the site probes only what --rtt-allow allows, on the ports
// of --rtt-ports, at most --rtt-rate probes a second (32 at once, one per
// target a second, timeouts up to 2 s): it cannot be made a scanner or a
// reflector (docs/gslb.md#site-endpoints-the-contract-with-lbc-run).

var (
	runRTTAllowFlag = &cli.StringSliceFlag{Name: "rtt-allow", Value: cli.NewStringSlice("public"),
		Usage: "addresses `LIST` this site may probe when the GSLB asks for its RTT to a resolver (" + proximity.Path + " on --metrics, G-3): public (global unicast, not private or special-purpose), prefixes such as 10.0.0.0/8, addresses, or none; repeat the flag or separate with commas"}
	runRTTPortsFlag = &cli.StringSliceFlag{Name: "rtt-ports", Value: cli.NewStringSlice("53"),
		Usage: "TCP `PORTS` a G-3 probe may connect to (the GSLB's policy.networkProximity.tcpPort); repeat the flag or separate with commas"}
	runRTTRateFlag = &cli.Float64Flag{Name: "rtt-rate", Value: 100,
		Usage: "G-3 probes this site starts a second at most (`N`, as many in a burst, 32 at once); over it the GSLB is answered 429 and nothing is sent"}
)

// siteRTTHandler is /v1/gslb/rtt of lbc run, within the --rtt-* flags;
// it fails on a bad flag, or on --rtt-* without --metrics.
func siteRTTHandler(c *cli.Context, log *slog.Logger) (http.Handler, error) {
	if c.String(runMetricsFlag.Name) == "" {
		for _, f := range []string{runRTTAllowFlag.Name, runRTTPortsFlag.Name, runRTTRateFlag.Name} {
			if c.IsSet(f) {
				return nil, fmt.Errorf("--%s limits what %s on --metrics probes: give --metrics ADDR too", f, proximity.Path)
			}
		}
		return nil, nil
	}
	allow, err := proximity.ParseAllow(c.StringSlice(runRTTAllowFlag.Name))
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", runRTTAllowFlag.Name, err)
	}
	l := proximity.DefaultLimits()
	l.Ports = nil
	for _, e := range c.StringSlice(runRTTPortsFlag.Name) {
		for _, f := range strings.Split(e, ",") {
			p, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || p < 1 || p > 65535 {
				return nil, fmt.Errorf("--%s: %q: want ports 1..65535, e.g. 53", runRTTPortsFlag.Name, f)
			}
			l.Ports = append(l.Ports, p)
		}
	}
	if len(l.Ports) == 0 {
		return nil, fmt.Errorf("--%s: give at least one port, e.g. 53", runRTTPortsFlag.Name)
	}
	rate := c.Float64(runRTTRateFlag.Name)
	if !(rate > 0) || rate > 1e6 {
		return nil, fmt.Errorf("--%s %g: give a rate in (0, 1e6]; --%s none turns probing off", runRTTRateFlag.Name, rate, runRTTAllowFlag.Name)
	}
	l.Rate, l.Burst = rate, max(int(rate), 1)
	if allow.Empty() {
		log.Info("GSLB RTT probes off (--rtt-allow none): "+proximity.Path+" refuses every target", "path", proximity.Path)
	} else {
		log.Info("serving GSLB RTT probes", "path", proximity.Path, "allow", allow.String(), "limits", l.String())
	}
	return proximity.NewHandler(proximity.NetProber{}, allow.Contains, l), nil
}
