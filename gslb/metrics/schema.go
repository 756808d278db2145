package metrics

import (
	"encoding/json"
	"fmt"
	"time"
)

// Path is where a site mounts Handler; the GSLB's site URLs end with it.
const Path = "/v1/gslb/metrics"

// Schema names the version of the report format; a reader rejects others.
const Schema = "lbc.gslb.metrics/v1"

// SiteReport is the whole answer of GET Path: one site's view of its
// services, taken from the datapath counters and the health checker.
//
//	{"schema": "lbc.gslb.metrics/v1", "site": "seoul", "at": "2025-01-01T00:00:00Z",
//	 "services": [{"name": "web", "healthyBackends": 3, "backends": 4,
//	   "sessions": 1200, "bitsPerSec": 8.5e8, "newConnectionsPerSec": 120,
//	   "newConnectionsTotal": 98765}]}
type SiteReport struct {
	Schema   string          `json:"schema"`
	Site     string          `json:"site"`
	At       time.Time       `json:"at"`
	Services []ServiceReport `json:"services"`
}

// ServiceReport is one service (one VIP of lb.yaml) at the site.
type ServiceReport struct {
	// Name is the service's name in lb.yaml; gslb.yaml refers to it.
	Name string `json:"name"`
	// HealthyBackends counts backends that pass their L3/L4/L7 check and
	// receive traffic; Backends counts all configured ones (G-1).
	HealthyBackends int `json:"healthyBackends"`
	Backends        int `json:"backends"`
	// Sessions is the number of tracked TCP/UDP connections now (G-2).
	Sessions uint64 `json:"sessions"`
	// BitsPerSec is the traffic through the service, both directions (G-2).
	BitsPerSec float64 `json:"bitsPerSec"`
	// NewConnectionsPerSec is the rate of new connections over the site's
	// last counter interval (G-5).
	NewConnectionsPerSec float64 `json:"newConnectionsPerSec"`
	// NewConnectionsTotal, when present, is a counter of all new
	// connections since the site started; the poller prefers its
	// differences to the rate, since they lose nothing between polls.
	NewConnectionsTotal *uint64 `json:"newConnectionsTotal,omitempty"`
}

// Service returns the report of the named service.
func (r *SiteReport) Service(name string) (ServiceReport, bool) {
	for _, s := range r.Services {
		if s.Name == name {
			return s, true
		}
	}
	return ServiceReport{}, false
}

// Decode parses and checks a report.
func Decode(data []byte) (SiteReport, error) {
	var r SiteReport
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("site metrics: %w", err)
	}
	if r.Schema != Schema {
		return r, fmt.Errorf("site metrics: schema %q, want %q", r.Schema, Schema)
	}
	for i, s := range r.Services {
		switch {
		case s.Name == "":
			return r, fmt.Errorf("site metrics: services[%d]: no name", i)
		case s.HealthyBackends < 0 || s.Backends < 0 || s.HealthyBackends > s.Backends:
			return r, fmt.Errorf("site metrics: service %q: healthyBackends %d, backends %d: want 0 <= healthy <= backends", s.Name, s.HealthyBackends, s.Backends)
		case s.BitsPerSec < 0 || s.NewConnectionsPerSec < 0 || s.BitsPerSec != s.BitsPerSec || s.NewConnectionsPerSec != s.NewConnectionsPerSec:
			return r, fmt.Errorf("site metrics: service %q: negative or NaN rate", s.Name)
		}
	}
	return r, nil
}
