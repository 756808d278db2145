package gslb

import (
	"net/http"
	"net/netip"

	"github.com/lbc-dev/lbc/gslb/metrics"
	"github.com/lbc-dev/lbc/gslb/proximity"
)

// SiteHandler is what a site's `lbc run` serves to the GSLB: its metrics at
// metrics.Path and RTT probes at proximity.Path. source must be safe for
// concurrent calls; prober nil means probes from this host
// (proximity.NetProber); allow limits probe targets (nil allows all). The
// probes have no rate limits here (proximity.Handler): where others can
// reach the endpoint, mount proximity.NewHandler with limits instead, as
// `lbc run` does (proximity.DefaultLimits).
func SiteHandler(source func() metrics.SiteReport, prober proximity.Prober, allow func(netip.Addr) bool) http.Handler {
	if prober == nil {
		prober = proximity.NetProber{}
	}
	mux := http.NewServeMux()
	mux.Handle(metrics.Path, metrics.Handler(source))
	mux.Handle(proximity.Path, proximity.Handler(prober, allow))
	return mux
}
