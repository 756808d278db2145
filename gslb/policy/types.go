package policy

import (
	"fmt"
	"time"
)

// Step names one policy of the chain. The spelling is the one gslb.yaml uses.
type Step string

// The steps, in the order they run (docs/gslb.md).
const (
	Health           Step = "health"            // G-1
	Capacity         Step = "capacity"          // G-2
	NetworkProximity Step = "network-proximity" // G-3
	GeoProximity     Step = "geo-proximity"     // G-4
	ConnectionLoad   Step = "connection-load"   // G-5
	Preference       Step = "preference"        // G-6
	LeastSelected    Step = "least-selected"    // G-7 (final, or G-8)
	Static           Step = "static"            // G-8 (final, or G-7)
)

// Order is every step in the order the chain runs them.
var Order = []Step{Health, Capacity, NetworkProximity, GeoProximity, ConnectionLoad, Preference, LeastSelected, Static}

// ID returns the spec's rule ID of s ("G-1" … "G-8").
func (s Step) ID() string {
	for i, x := range Order {
		if x == s {
			return fmt.Sprintf("G-%d", i+1)
		}
	}
	return "G-?"
}

// Final reports whether s is one of the two alternative final steps.
func (s Step) Final() bool { return s == LeastSelected || s == Static }

// Point is a place on Earth in degrees.
type Point struct {
	Lat float64 `json:"lat"`
	Lon float64 `json:"lon"`
}

// Site is one candidate: a load balancer that can serve the name.
type Site struct {
	Name string
	// Preference is the operator's preference (G-6); higher wins, like BGP
	// local preference.
	Preference int
	// Weight is the share of G-8 weighted round robin; 0 is never chosen
	// by G-8 while a site with weight > 0 is a candidate.
	Weight int
	// Location is where the site is (G-4); nil when not configured.
	Location *Point
	// Limits of G-2 and G-5; zero means no limit.
	MaxSessions       uint64
	MaxBitsPerSec     float64
	MaxConnectionLoad float64
}

// Metrics is what a site's load balancer last reported for the service.
type Metrics struct {
	// Known is false when the site has never answered, or missed too many
	// polls: then nothing below is trusted.
	Known bool
	// HealthyBackends and Backends count the service's backends (G-1).
	HealthyBackends int
	Backends        int
	// Sessions is the number of current connections (G-2).
	Sessions uint64
	// BitsPerSec is the network usage, both directions (G-2).
	BitsPerSec float64
	// Conn holds the new-connection counts of the recent past (G-5).
	Conn []ConnSample
}

// ConnSample is the number of new TCP/UDP connections a site saw during the
// Span that ended At.
type ConnSample struct {
	At   time.Time
	Span time.Duration
	New  float64
}

// Query is what is known about the question being answered.
type Query struct {
	Name string
	// Now is the time of the query; G-5 averages over the period before it.
	Now time.Time
	// RTT holds each site's measured round-trip time to the resolver (G-3);
	// a site missing from the map could not measure it.
	RTT map[string]time.Duration
	// RTTNote says why RTTs are missing (probe blocked, over budget, off).
	RTTNote string
	// Client is the located client (G-4): from the EDNS Client Subnet when
	// the query has one, else the resolver's address; nil when unknown.
	Client *Point
	// ClientKey says what Client was looked up from, for the record.
	ClientKey string
}

// State is the memory of the final steps: how often this GSLB chose each
// site (G-7) and the position in the round-robin sequence (G-8).
type State struct {
	Selected map[string]uint64
	Next     uint64
}

// Clone returns a deep copy of s.
func (s State) Clone() State {
	c := State{Next: s.Next, Selected: make(map[string]uint64, len(s.Selected))}
	for k, v := range s.Selected {
		c.Selected[k] = v
	}
	return c
}

// AllDown says what G-1 does when every site is known to be down.
type AllDown string

const (
	// AllDownAnswerAll keeps every site (fail open): an address that may
	// work beats no answer.
	AllDownAnswerAll AllDown = "answer-all"
	// AllDownNone leaves no candidate; the DNS server answers SERVFAIL.
	AllDownNone AllDown = "none"
)

// Config is which steps run and their tolerances.
type Config struct {
	// Steps run in Order; exactly one of LeastSelected and Static is last.
	Steps []Step
	// AllDown is G-1's action when every site is known down.
	AllDown AllDown
	// RTTTolerance: RTTs within it of the best count as equal (G-3).
	RTTTolerance time.Duration
	// GeoToleranceKm: distances within it of the nearest count as equal (G-4).
	GeoToleranceKm float64
	// ConnPeriod is the averaging period of the connection load (G-5).
	ConnPeriod time.Duration
	// Weighted makes G-8 weighted round robin; otherwise plain round robin.
	Weighted bool
}

// Has reports whether step s runs.
func (c Config) Has(s Step) bool {
	for _, x := range c.Steps {
		if x == s {
			return true
		}
	}
	return false
}

// Check reports what is wrong with c: steps out of order, unknown or
// repeated, or not exactly one final step, last.
func (c Config) Check() error {
	if c.Has(LeastSelected) && c.Has(Static) {
		return fmt.Errorf("%q (G-7) and %q (G-8) are alternative final steps, not both: keep exactly one, last", LeastSelected, Static)
	}
	last := -1
	finals := 0
	for i, s := range c.Steps {
		pos := -1
		for j, x := range Order {
			if x == s {
				pos = j
			}
		}
		if pos < 0 {
			return fmt.Errorf("unknown step %q; steps are %v", s, Order)
		}
		if pos <= last {
			return fmt.Errorf("step %q (%s) is out of order or repeated; steps run in the order %v", s, s.ID(), Order)
		}
		last = pos
		if s.Final() {
			finals++
			if i != len(c.Steps)-1 {
				return fmt.Errorf("final step %q must be the last step", s)
			}
		}
	}
	if finals != 1 {
		return fmt.Errorf("exactly one final step is needed, %q (G-7) or %q (G-8), not both and not neither", LeastSelected, Static)
	}
	return nil
}
