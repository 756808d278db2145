package controller

import (
	"context"
	"sync"
	"time"

	"github.com/lbc-dev/lbc/gslb/metrics"
)

// SiteReporter builds the GSLB's site report (gslb/metrics) from the
// controller's health view and the first target's counters: healthy and
// configured backends, live sessions, bits/s and new connections/s. Rates
// are the counter differences since the previous report (at least MinGap
// apart, so that two close polls do not divide by almost nothing).
type SiteReporter struct {
	C      *Controller
	Site   string
	MinGap time.Duration

	mu   sync.Mutex
	last map[string]sample
}

type sample struct {
	at             time.Time
	bytes, newConn uint64
	bps, cps       float64
}

// Report implements the source of metrics.Handler.
func (r *SiteReporter) Report() metrics.SiteReport {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st := r.C.Status(ctx)
	now := r.C.clock.Now()
	at := st.CountersAt // the counters' own time: rates between two reads
	gap := r.MinGap
	if gap <= 0 {
		gap = time.Second
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]sample{}
	}
	rep := metrics.SiteReport{Site: r.Site, At: now.UTC()}
	for _, s := range st.Services {
		sr := metrics.ServiceReport{Name: s.Name}
		for _, b := range s.Backends {
			if b.Draining {
				continue // removed from the configuration
			}
			sr.Backends++
			if b.Healthy {
				sr.HealthyBackends++
			}
		}
		if c := s.Counters; c != nil {
			sr.Sessions = c.Sessions
			total := c.NewConnections
			sr.NewConnectionsTotal = &total
			prev, ok := r.last[s.Name]
			switch {
			case !ok || c.Bytes < prev.bytes || c.NewConnections < prev.newConn:
				// First sample, or the datapath was reloaded: no rate yet.
				r.last[s.Name] = sample{at: at, bytes: c.Bytes, newConn: c.NewConnections}
			case at.Sub(prev.at) >= gap:
				dt := at.Sub(prev.at).Seconds()
				cur := sample{at: at, bytes: c.Bytes, newConn: c.NewConnections,
					bps: float64(c.Bytes-prev.bytes) * 8 / dt, cps: float64(c.NewConnections-prev.newConn) / dt}
				r.last[s.Name] = cur
				sr.BitsPerSec, sr.NewConnectionsPerSec = cur.bps, cur.cps
			default:
				sr.BitsPerSec, sr.NewConnectionsPerSec = prev.bps, prev.cps
			}
		}
		rep.Services = append(rep.Services, sr)
	}
	return rep
}
