package health

import (
	"net/netip"
	"time"

	"github.com/lbc-dev/lbc/compiler"
)

// Defaults of the cloud API's health checks.
const (
	DefaultInterval  = 5 * time.Second
	DefaultTimeout   = 5 * time.Second
	DefaultThreshold = 2
)

// SpecOf returns a service's check with defaults applied; ok is false
// when the service has no health check (its backends are always healthy).
func SpecOf(s *compiler.Service) (Spec, bool) {
	hc := s.HealthCheck
	if hc == nil {
		return Spec{}, false
	}
	sp := Spec{
		Type:      hc.Type,
		Port:      hc.Port,
		Method:    hc.Method,
		Path:      hc.RequestPath,
		Interval:  time.Duration(hc.CheckIntervalSec) * time.Second,
		Timeout:   time.Duration(hc.TimeoutSec) * time.Second,
		Healthy:   hc.HealthyThreshold,
		Unhealthy: hc.UnhealthyThreshold,
		Weighted:  s.Weighted(),
	}
	if sp.Interval <= 0 {
		sp.Interval = DefaultInterval
	}
	if sp.Timeout <= 0 {
		sp.Timeout = min(DefaultTimeout, sp.Interval)
	}
	if sp.Healthy <= 0 {
		sp.Healthy = DefaultThreshold
	}
	if sp.Unhealthy <= 0 {
		sp.Unhealthy = DefaultThreshold
	}
	if sp.Type == TypeHTTP && sp.Path == "" {
		sp.Path = "/"
	}
	if sp.Type == TypeHTTP && sp.Method == "" {
		sp.Method = "GET"
	}
	return sp, true
}

// TargetsOf lists the probes a configuration asks for, in configuration
// order. The probe goes to the endpoint's IP at the check's port (the
// endpoint's own port when the check gives none).
func TargetsOf(cfg *compiler.Config) []Target {
	var out []Target
	for si := range cfg.Services {
		s := &cfg.Services[si]
		sp, ok := SpecOf(s)
		if !ok {
			continue
		}
		for _, g := range s.Backends {
			for _, e := range g.Endpoints {
				ip, err := netip.ParseAddr(e.IP)
				if err != nil {
					continue // validation rejects it before we get here
				}
				esp := sp
				if esp.Port == 0 {
					esp.Port = e.Port // ICMP: only used by the TCP fallback
				}
				out = append(out, Target{Service: s.Name, Backend: e.Name, IP: ip.Unmap(), Spec: esp})
			}
		}
	}
	return out
}
