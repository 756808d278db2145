package policy

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Input is everything one run of the chain looks at.
type Input struct {
	// Sites are the candidates in configuration order (the tie order).
	Sites   []Site
	Metrics map[string]Metrics
	Query   Query
	State   State
}

// Outcome is what a step did to the candidates.
type Outcome string

const (
	Narrowed Outcome = "narrowed" // dropped some, more than one left
	Decided  Outcome = "decided"  // left exactly one
	Passed   Outcome = "passed"   // could not tell the candidates apart
	Skipped  Outcome = "skipped"  // had no data, or one candidate was already left
	Emptied  Outcome = "emptied"  // left none (G-1 with AllDownNone)
)

// StepResult records one step of one run.
type StepResult struct {
	Step    Step     `json:"step"`
	ID      string   `json:"id"`
	In      []string `json:"in"`
	Out     []string `json:"out"`
	Outcome Outcome  `json:"outcome"`
	Reason  string   `json:"reason"`
}

// stepFunc narrows cands; it returns the survivors and the reason. When it
// cannot decide it returns cands unchanged and a reason, and sets skip when
// it had no data at all.
type stepFunc func(c Config, in *Input, cands []Site) (out []Site, reason string, skip bool)

var stepFuncs = map[Step]stepFunc{
	Health:           health,
	Capacity:         capacity,
	NetworkProximity: networkProximity,
	GeoProximity:     geoProximity,
	ConnectionLoad:   connectionLoad,
	Preference:       preference,
	LeastSelected:    leastSelected,
	Static:           static,
}

// RunStep runs one step alone over cands and records what it did.
func RunStep(c Config, s Step, in Input, cands []Site) ([]Site, StepResult) {
	f, ok := stepFuncs[s]
	if !ok {
		return cands, StepResult{Step: s, ID: s.ID(), In: names(cands), Out: names(cands), Outcome: Skipped, Reason: "unknown step"}
	}
	out, reason, skip := f(c, &in, cands)
	r := StepResult{Step: s, ID: s.ID(), In: names(cands), Out: names(out), Reason: reason}
	switch {
	case skip:
		r.Outcome = Skipped
	case len(out) == 0:
		r.Outcome = Emptied
	case len(out) == 1 && len(cands) > 1:
		r.Outcome = Decided
	case len(out) < len(cands):
		r.Outcome = Narrowed
	default:
		r.Outcome = Passed
	}
	return out, r
}

func names(ss []Site) []string {
	if len(ss) == 0 {
		return nil
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Name
	}
	return out
}

func keep(cands []Site, ok func(Site) bool) []Site {
	var out []Site
	for _, s := range cands {
		if ok(s) {
			out = append(out, s)
		}
	}
	return out
}

// G-1: sites whose load balancer reports a healthy backend. Known-healthy
// sites beat sites with unknown health (no report, or too many missed polls),
// which beat known-down sites; so "GSLB only" (no reports at all) keeps
// every site.
func health(c Config, in *Input, cands []Site) ([]Site, string, bool) {
	var up, unknown, down []string
	for _, s := range cands {
		m := in.Metrics[s.Name]
		switch {
		case !m.Known:
			unknown = append(unknown, s.Name)
		case m.HealthyBackends > 0:
			up = append(up, s.Name)
		default:
			down = append(down, s.Name)
		}
	}
	in2 := func(list []string) func(Site) bool {
		return func(s Site) bool {
			for _, n := range list {
				if n == s.Name {
					return true
				}
			}
			return false
		}
	}
	switch {
	case len(up) > 0:
		r := fmt.Sprintf("healthy: %s", strings.Join(up, ", "))
		if len(down) > 0 {
			r += fmt.Sprintf("; no healthy backend: %s", strings.Join(down, ", "))
		}
		if len(unknown) > 0 {
			r += fmt.Sprintf("; health unknown: %s", strings.Join(unknown, ", "))
		}
		return keep(cands, in2(up)), r, false
	case len(unknown) == len(cands):
		return cands, "no site reports health (GSLB only, or metrics missed); all kept", true
	case len(unknown) > 0:
		return keep(cands, in2(unknown)), fmt.Sprintf("no site known healthy; kept those with unknown health: %s; no healthy backend: %s", strings.Join(unknown, ", "), strings.Join(down, ", ")), false
	case c.AllDown == AllDownNone:
		return nil, "every site reports no healthy backend; no answer (allDown: none)", false
	default:
		return cands, "every site reports no healthy backend; all kept (allDown: answer-all)", false
	}
}

// G-2: drop sites over their session or bandwidth limits.
func capacity(c Config, in *Input, cands []Site) ([]Site, string, bool) {
	var over []string
	limited, known := false, false
	out := keep(cands, func(s Site) bool {
		m := in.Metrics[s.Name]
		if s.MaxSessions > 0 || s.MaxBitsPerSec > 0 {
			limited = true
		}
		if !m.Known {
			return true
		}
		known = true
		if s.MaxSessions > 0 && m.Sessions > s.MaxSessions {
			over = append(over, fmt.Sprintf("%s (%d sessions > %d)", s.Name, m.Sessions, s.MaxSessions))
			return false
		}
		if s.MaxBitsPerSec > 0 && m.BitsPerSec > s.MaxBitsPerSec {
			over = append(over, fmt.Sprintf("%s (%s > %s)", s.Name, bps(m.BitsPerSec), bps(s.MaxBitsPerSec)))
			return false
		}
		return true
	})
	switch {
	case !limited:
		return cands, "no session or bandwidth limit configured", true
	case !known:
		return cands, "no site reports its load", true
	case len(over) == 0:
		return cands, "every site under its limits", false
	case len(out) == 0:
		return cands, "every site over its limits: " + strings.Join(over, ", ") + "; all kept", false
	}
	return out, "over limit: " + strings.Join(over, ", "), false
}

func bps(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.3g Gbit/s", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.3g Mbit/s", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.3g kbit/s", v/1e3)
	}
	return fmt.Sprintf("%.3g bit/s", v)
}

// G-3: the lowest RTT to the resolver, within the tolerance. Every
// candidate must have been measured; otherwise the resolver "cannot be
// measured" and the step is skipped, as the seed says.
func networkProximity(c Config, in *Input, cands []Site) ([]Site, string, bool) {
	var missing []string
	best := time.Duration(math.MaxInt64)
	for _, s := range cands {
		rtt, ok := in.Query.RTT[s.Name]
		if !ok {
			missing = append(missing, s.Name)
			continue
		}
		best = min(best, rtt)
	}
	if len(missing) > 0 {
		note := in.Query.RTTNote
		if note == "" {
			note = "no measurement"
		}
		return cands, fmt.Sprintf("resolver not measured from %s (%s)", strings.Join(missing, ", "), note), true
	}
	var parts []string
	out := keep(cands, func(s Site) bool {
		rtt := in.Query.RTT[s.Name]
		parts = append(parts, fmt.Sprintf("%s %s", s.Name, rtt.Round(10*time.Microsecond)))
		return rtt <= best+c.RTTTolerance
	})
	return out, fmt.Sprintf("RTT %s; tolerance %s", strings.Join(parts, ", "), c.RTTTolerance), false
}

// G-4: the nearest site to the client by great-circle distance, within the
// tolerance.
func geoProximity(c Config, in *Input, cands []Site) ([]Site, string, bool) {
	if in.Query.Client == nil {
		key := in.Query.ClientKey
		if key == "" {
			key = "no client address"
		}
		return cands, "client not located (" + key + ")", true
	}
	var missing []string
	dist := map[string]float64{}
	best := math.Inf(1)
	for _, s := range cands {
		if s.Location == nil {
			missing = append(missing, s.Name)
			continue
		}
		d := DistanceKm(*in.Query.Client, *s.Location)
		dist[s.Name] = d
		best = math.Min(best, d)
	}
	if len(missing) > 0 {
		return cands, "no location configured for " + strings.Join(missing, ", "), true
	}
	var parts []string
	out := keep(cands, func(s Site) bool {
		parts = append(parts, fmt.Sprintf("%s %.0f km", s.Name, dist[s.Name]))
		return dist[s.Name] <= best+c.GeoToleranceKm
	})
	return out, fmt.Sprintf("client at %.2f,%.2f (%s): %s; tolerance %.0f km", in.Query.Client.Lat, in.Query.Client.Lon, in.Query.ClientKey, strings.Join(parts, ", "), c.GeoToleranceKm), false
}

const earthRadiusKm = 6371.0088 // mean radius (IUGG)

// DistanceKm is the great-circle distance between a and b (haversine).
func DistanceKm(a, b Point) float64 {
	rad := math.Pi / 180
	dLat := (b.Lat - a.Lat) * rad
	dLon := (b.Lon - a.Lon) * rad
	h := math.Sin(dLat/2)*math.Sin(dLat/2) + math.Cos(a.Lat*rad)*math.Cos(b.Lat*rad)*math.Sin(dLon/2)*math.Sin(dLon/2)
	return 2 * earthRadiusKm * math.Asin(math.Min(1, math.Sqrt(h)))
}

// ConnLoad is the connection load of G-5: the new connections counted in
// the period before now, divided by the time those counts cover (the period
// itself once the samples fill it; less while a site's history is short or
// has gaps, so a missed poll does not read as a quiet second). The seed's
// example: 100, 110, 120, 130 and 140 new connections in the five seconds
// of a 5 s period give 120/s. ok is false when no sample falls in the period.
func ConnLoad(samples []ConnSample, now time.Time, period time.Duration) (load float64, ok bool) {
	if period <= 0 {
		return 0, false
	}
	from := now.Add(-period)
	sum, span := 0.0, time.Duration(0)
	for _, s := range samples {
		if s.At.After(from) && !s.At.After(now) {
			sum += s.New
			span += s.Span
		}
	}
	if span <= 0 {
		return 0, false
	}
	return sum / span.Seconds(), true
}

// G-5: drop sites whose connection load is over their threshold.
func connectionLoad(c Config, in *Input, cands []Site) ([]Site, string, bool) {
	var over, parts []string
	limited, measured := false, false
	out := keep(cands, func(s Site) bool {
		m := in.Metrics[s.Name]
		if s.MaxConnectionLoad > 0 {
			limited = true
		}
		if !m.Known {
			return true
		}
		load, ok := ConnLoad(m.Conn, in.Query.Now, c.ConnPeriod)
		if !ok {
			return true
		}
		measured = true
		parts = append(parts, fmt.Sprintf("%s %.4g/s", s.Name, load))
		if s.MaxConnectionLoad > 0 && load > s.MaxConnectionLoad {
			over = append(over, fmt.Sprintf("%s (%.4g/s > %.4g/s)", s.Name, load, s.MaxConnectionLoad))
			return false
		}
		return true
	})
	switch {
	case !limited:
		return cands, "no connection-load limit configured", true
	case !measured:
		return cands, fmt.Sprintf("no new-connection samples in the last %s", c.ConnPeriod), true
	case len(over) == 0:
		return cands, fmt.Sprintf("load over %s: %s; every site under its limit", c.ConnPeriod, strings.Join(parts, ", ")), false
	case len(out) == 0:
		return cands, "every site over its limit: " + strings.Join(over, ", ") + "; all kept", false
	}
	return out, "over limit: " + strings.Join(over, ", "), false
}

// G-6: the sites with the highest operator preference.
func preference(c Config, in *Input, cands []Site) ([]Site, string, bool) {
	best := math.MinInt
	for _, s := range cands {
		best = max(best, s.Preference)
	}
	out := keep(cands, func(s Site) bool { return s.Preference == best })
	return out, fmt.Sprintf("highest preference %d", best), false
}

// G-7: the site this GSLB selected least often; ties go to the first in
// configuration order.
func leastSelected(c Config, in *Input, cands []Site) ([]Site, string, bool) {
	if len(cands) == 0 {
		return cands, "no candidate", true
	}
	bestI := 0
	var parts []string
	for i, s := range cands {
		n := in.State.Selected[s.Name]
		parts = append(parts, fmt.Sprintf("%s %d", s.Name, n))
		if n < in.State.Selected[cands[bestI].Name] {
			bestI = i
		}
	}
	return cands[bestI : bestI+1], "times selected: " + strings.Join(parts, ", "), false
}

// G-8: round robin, or weighted round robin in configuration order: with
// weights 2:1 the sequence is A, A, B, A, A, B (the seed's Korea/USA
// example). The position State.Next indexes the sequence of the current
// candidates.
func static(c Config, in *Input, cands []Site) ([]Site, string, bool) {
	if len(cands) == 0 {
		return cands, "no candidate", true
	}
	w := make([]uint64, len(cands))
	total := uint64(0)
	for i, s := range cands {
		w[i] = 1
		if c.Weighted {
			w[i] = uint64(max(s.Weight, 0))
		}
		total += w[i]
	}
	mode := "round robin"
	if c.Weighted {
		mode = "weighted round robin"
		if total == 0 { // every weight 0: fall back to plain round robin
			for i := range w {
				w[i] = 1
			}
			total = uint64(len(w))
			mode = "round robin (every weight 0)"
		}
	}
	k := in.State.Next % total
	for i := range cands {
		if k < w[i] {
			return cands[i : i+1], fmt.Sprintf("%s, position %d of %d", mode, in.State.Next%total+1, total), false
		}
		k -= w[i]
	}
	return cands[:1], mode, false // unreachable: k < total
}
