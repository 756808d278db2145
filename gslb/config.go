package gslb

import (
	"fmt"
	"strings"
	"time"

	"github.com/lbc-dev/lbc/gslb/policy"
	"gopkg.in/yaml.v3"
)

// Config is a whole gslb.yaml.
type Config struct {
	Zones   []Zone        `yaml:"zones"`
	Sites   []SiteConfig  `yaml:"sites"`
	Names   []NameConfig  `yaml:"names"`
	Policy  PolicyConfig  `yaml:"policy"`
	Metrics MetricsConfig `yaml:"metrics"`
	Server  ServerConfig  `yaml:"server"`
}

// Zone is a zone this server is authoritative for.
type Zone struct {
	Name string `yaml:"name"`
	// NegativeTTL is the SOA minimum: how long NXDOMAIN/NODATA are cached.
	NegativeTTL *uint32 `yaml:"negativeTTL"`
	// Nameservers answer the apex NS query; Hostmaster is the SOA RNAME.
	Nameservers []string `yaml:"nameservers"`
	Hostmaster  string   `yaml:"hostmaster"`
}

// SiteConfig is one site: a load balancer run by `lbc run`.
type SiteConfig struct {
	Name string `yaml:"name"`
	// Metrics is the URL of the site's metrics endpoint (gslb/metrics.Path).
	Metrics string `yaml:"metrics"`
	// RTT is the URL of its RTT endpoint; default: the metrics URL's host
	// with gslb/proximity.Path.
	RTT      string        `yaml:"rtt"`
	Location *policy.Point `yaml:"location"`
}

// NameConfig is one DNS name answered with a site's addresses.
type NameConfig struct {
	Name string `yaml:"name"`
	// Service is the service's name in the sites' metrics (lb.yaml's name).
	Service string  `yaml:"service"`
	TTL     *uint32 `yaml:"ttl"`
	// Answers is the most addresses in one answer: the chosen site's
	// first, then the next choices'.
	Answers int           `yaml:"answers"`
	Sites   []NameSiteRef `yaml:"sites"`
}

// NameSiteRef is a site serving a name, with its per-name policy values.
type NameSiteRef struct {
	Site              string   `yaml:"site"`
	Addresses         []string `yaml:"addresses"`
	Preference        int      `yaml:"preference"`
	Weight            *int     `yaml:"weight"`
	MaxSessions       uint64   `yaml:"maxSessions"`
	MaxBitsPerSec     float64  `yaml:"maxBitsPerSec"`
	MaxConnectionLoad float64  `yaml:"maxConnectionLoad"`
}

// Mode is G-MODE: which data the GSLB has.
type Mode string

const (
	ModeGSLBSLB  Mode = "gslb+slb"  // every step; sites report load
	ModeGSLBOnly Mode = "gslb-only" // no site load balancer: G-1, G-4, G-6..G-8
	ModeDNS      Mode = "dns"       // plain DNS: G-8 round robin only
)

// modeSteps are the steps each mode may run, and runs by default.
var modeSteps = map[Mode][]policy.Step{
	ModeGSLBSLB:  {policy.Health, policy.Capacity, policy.NetworkProximity, policy.GeoProximity, policy.ConnectionLoad, policy.Preference},
	ModeGSLBOnly: {policy.Health, policy.GeoProximity, policy.Preference},
	ModeDNS:      {},
}

// PolicyConfig selects and tunes the chain.
type PolicyConfig struct {
	Mode Mode `yaml:"mode"`
	// Steps, when given, is the exact list to run (in the spec's order,
	// ending with least-selected or static); otherwise the mode's steps
	// followed by Final.
	Steps []policy.Step `yaml:"steps"`
	Final policy.Step   `yaml:"final"`
	// Weighted makes static weighted round robin (the sites' weights).
	Weighted         *bool                  `yaml:"weighted"`
	AllDown          policy.AllDown         `yaml:"allDown"`
	NetworkProximity NetworkProximityConfig `yaml:"networkProximity"`
	GeoProximity     GeoProximityConfig     `yaml:"geoProximity"`
	ConnectionLoad   ConnectionLoadConfig   `yaml:"connectionLoad"`
}

// NetworkProximityConfig tunes G-3.
type NetworkProximityConfig struct {
	Method    string   `yaml:"method"`
	TCPPort   int      `yaml:"tcpPort"`
	Budget    Duration `yaml:"budget"`
	Timeout   Duration `yaml:"timeout"`
	CacheTTL  Duration `yaml:"cacheTTL"`
	Tolerance Duration `yaml:"tolerance"`
	IPv4Bits  int      `yaml:"ipv4PrefixLength"`
	IPv6Bits  int      `yaml:"ipv6PrefixLength"`
}

// GeoProximityConfig tunes G-4.
type GeoProximityConfig struct {
	Database    string  `yaml:"database"`
	ToleranceKm float64 `yaml:"toleranceKm"`
}

// ConnectionLoadConfig tunes G-5.
type ConnectionLoadConfig struct {
	Period Duration `yaml:"period"`
}

// MetricsConfig tunes the polling of site metrics.
type MetricsConfig struct {
	Interval     Duration `yaml:"interval"`
	Timeout      Duration `yaml:"timeout"`
	UnknownAfter int      `yaml:"unknownAfter"`
}

// ServerConfig tunes the DNS server.
type ServerConfig struct {
	// UDPSize is the largest UDP answer offered to EDNS clients.
	UDPSize   int             `yaml:"udpSize"`
	RateLimit RateLimitConfig `yaml:"rateLimit"`
}

// RateLimitConfig is the per-source limit of UDP answers.
type RateLimitConfig struct {
	// PerSecond answers per source prefix; 0 turns the limit off.
	PerSecond float64 `yaml:"perSecond"`
	Burst     int     `yaml:"burst"`
	// Slip: every Slip-th limited query gets an empty truncated answer (so
	// a real client retries over TCP); the others are dropped. 0 drops all.
	Slip     *int `yaml:"slip"`
	IPv4Bits int  `yaml:"ipv4PrefixLength"`
	IPv6Bits int  `yaml:"ipv6PrefixLength"`
}

// Duration is a time.Duration written as "50ms", "2s", "5m".
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	// A *yaml.TypeError lets the decoder go on and report every problem.
	if err := n.Decode(&s); err != nil || n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a duration such as 500ms or 2s", n.Line)}}
	}
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || v < 0 {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %q is not a duration; write e.g. 500ms, 2s or 5m", n.Line, s)}}
	}
	*d = Duration(v)
	return nil
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Defaults applied by Load.
const (
	DefaultTTL          = 30
	DefaultNegativeTTL  = 60
	DefaultInterval     = 2 * time.Second
	DefaultUnknownAfter = 3
	DefaultUDPSize      = 1232
)

// applyDefaults fills in what the file left out.
func (c *Config) applyDefaults() {
	p := &c.Policy
	if p.Mode == "" {
		p.Mode = ModeGSLBSLB
	}
	if p.Final == "" && len(p.Steps) == 0 {
		p.Final = policy.LeastSelected
		if p.Mode == ModeDNS {
			p.Final = policy.Static
		}
	}
	if p.AllDown == "" {
		p.AllDown = policy.AllDownAnswerAll
	}
	np := &p.NetworkProximity
	if np.Method == "" {
		np.Method = "auto"
	}
	if np.TCPPort == 0 {
		np.TCPPort = 53
	}
	if np.Budget == 0 {
		np.Budget = Duration(50 * time.Millisecond)
	}
	if np.Timeout == 0 {
		np.Timeout = Duration(time.Second)
	}
	if np.CacheTTL == 0 {
		np.CacheTTL = Duration(10 * time.Minute)
	}
	if np.Tolerance == 0 {
		np.Tolerance = Duration(5 * time.Millisecond)
	}
	if np.IPv4Bits == 0 {
		np.IPv4Bits = 24
	}
	if np.IPv6Bits == 0 {
		np.IPv6Bits = 56
	}
	if p.ConnectionLoad.Period == 0 {
		p.ConnectionLoad.Period = Duration(5 * time.Second)
	}
	m := &c.Metrics
	if m.Interval == 0 {
		m.Interval = Duration(DefaultInterval)
	}
	if m.Timeout == 0 {
		m.Timeout = Duration(min(m.Interval.D(), time.Second))
	}
	if m.UnknownAfter == 0 {
		m.UnknownAfter = DefaultUnknownAfter
	}
	if c.Server.UDPSize == 0 {
		c.Server.UDPSize = DefaultUDPSize
	}
	rl := &c.Server.RateLimit
	if rl.Burst == 0 {
		rl.Burst = int(2 * rl.PerSecond)
	}
	if rl.Slip == nil {
		two := 2
		rl.Slip = &two
	}
	if rl.IPv4Bits == 0 {
		rl.IPv4Bits = 32
	}
	if rl.IPv6Bits == 0 {
		rl.IPv6Bits = 56
	}
	for i := range c.Zones {
		if c.Zones[i].NegativeTTL == nil {
			v := uint32(DefaultNegativeTTL)
			c.Zones[i].NegativeTTL = &v
		}
	}
	for i := range c.Names {
		n := &c.Names[i]
		if n.TTL == nil {
			v := uint32(DefaultTTL)
			n.TTL = &v
		}
		if n.Answers == 0 {
			n.Answers = 1
		}
		for j := range n.Sites {
			if n.Sites[j].Weight == nil {
				one := 1
				n.Sites[j].Weight = &one
			}
		}
	}
}

// Steps returns the chain this configuration runs.
func (c *Config) Steps() []policy.Step {
	if len(c.Policy.Steps) > 0 {
		return c.Policy.Steps
	}
	return append(append([]policy.Step(nil), modeSteps[c.Policy.Mode]...), c.Policy.Final)
}

// PolicyConfig returns the chain's configuration.
func (c *Config) PolicyConfig() policy.Config {
	weighted := c.Policy.Weighted == nil || *c.Policy.Weighted
	return policy.Config{
		Steps:          c.Steps(),
		AllDown:        c.Policy.AllDown,
		RTTTolerance:   c.Policy.NetworkProximity.Tolerance.D(),
		GeoToleranceKm: c.Policy.GeoProximity.ToleranceKm,
		ConnPeriod:     c.Policy.ConnectionLoad.Period.D(),
		Weighted:       weighted,
	}
}
