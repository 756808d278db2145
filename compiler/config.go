package compiler

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/lbc-dev/lbc/internal/strictyaml"
	"gopkg.in/yaml.v3"
)

// Config is a whole lb.yaml: the services of one load balancer, in the
// vocabulary of the cloud API that docs/semantics.md restates.
type Config struct {
	// Tunnel holds the outer source addresses of IP-in-IP encapsulation.
	Tunnel Tunnel `yaml:"tunnel" json:"tunnel"`
	// Limits raises the R-LIMIT bounds for deployments that need more.
	Limits   Limits    `yaml:"limits" json:"limits"`
	Services []Service `yaml:"services" json:"services"`
}

// Tunnel is the outer source of IP-in-IP packets sent to backends, and the
// egress MTU they must fit (R-MTU; 0: the datapath's own).
type Tunnel struct {
	SourceIPv4 string `yaml:"sourceIPv4" json:"sourceIPv4,omitempty"`
	SourceIPv6 string `yaml:"sourceIPv6" json:"sourceIPv6,omitempty"`
	MTU        int    `yaml:"mtu" json:"mtu,omitempty"`
}

// Bounds of tunnel.mtu: IPv6's minimum link MTU, and jumbo frames.
const (
	MinMTU = 1280
	MaxMTU = 9216
)

// Limits bounds the size of a configuration and of one service (R-LIMIT).
// Zero means the default.
type Limits struct {
	// MaxConnections is how many connections (conntrack entries) the
	// deployment expects at once; `lbc validate --target` checks it
	// against the datapath's conntrack. Zero: not checked.
	MaxConnections    int `yaml:"maxConnections" json:"maxConnections,omitempty"`
	MaxServices       int `yaml:"maxServices" json:"maxServices,omitempty"`
	MaxEndpoints      int `yaml:"maxEndpoints" json:"maxEndpoints,omitempty"`
	MaxPrimaryGroups  int `yaml:"maxPrimaryGroups" json:"maxPrimaryGroups,omitempty"`
	MaxFailoverGroups int `yaml:"maxFailoverGroups" json:"maxFailoverGroups,omitempty"`
}

// Service is one forwarding rule plus its backend service.
type Service struct {
	Name                     string                    `yaml:"name" json:"name"`
	VIP                      string                    `yaml:"vip" json:"vip"`
	Protocol                 string                    `yaml:"protocol" json:"protocol"`
	Ports                    Ports                     `yaml:"ports" json:"ports"`
	SessionAffinity          string                    `yaml:"sessionAffinity" json:"sessionAffinity,omitempty"`
	ConnectionTrackingPolicy *ConnectionTrackingPolicy `yaml:"connectionTrackingPolicy" json:"connectionTrackingPolicy,omitempty"`
	LocalityLbPolicy         string                    `yaml:"localityLbPolicy" json:"localityLbPolicy,omitempty"`
	FailoverPolicy           *FailoverPolicy           `yaml:"failoverPolicy" json:"failoverPolicy,omitempty"`
	ConnectionDraining       *ConnectionDraining       `yaml:"connectionDraining" json:"connectionDraining,omitempty"`
	HealthCheck              *HealthCheck              `yaml:"healthCheck" json:"healthCheck,omitempty"`
	RingSize                 RingSizeSpec              `yaml:"ringSize" json:"ringSize,omitempty"`
	// RingPrecision bounds each backend's ring share error under ringSize
	// auto (the default): 0.01 means every endpoint's share is within 1 %
	// of its ideal. Zero means DefaultRingPrecision.
	RingPrecision float64  `yaml:"ringPrecision" json:"ringPrecision,omitempty"`
	RingFill      RingFill `yaml:"ringFill" json:"ringFill,omitempty"`
	Encapsulation string   `yaml:"encapsulation" json:"encapsulation,omitempty"`
	// LoadBalancingScheme is EXTERNAL (the default) or INTERNAL; INTERNAL
	// caps persistence outside the eligible set at PersistCap (R-PERSIST-CAP).
	LoadBalancingScheme string         `yaml:"loadBalancingScheme" json:"loadBalancingScheme,omitempty"`
	Backends            []BackendGroup `yaml:"backends" json:"backends"`
}

// ConnectionTrackingPolicy selects how connections are tracked (R-CT, R-TRK,
// R-PERSIST, R-AGE).
type ConnectionTrackingPolicy struct {
	TrackingMode                             string `yaml:"trackingMode" json:"trackingMode,omitempty"`
	ConnectionPersistenceOnUnhealthyBackends string `yaml:"connectionPersistenceOnUnhealthyBackends" json:"connectionPersistenceOnUnhealthyBackends,omitempty"`
	IdleTimeoutSec                           *int   `yaml:"idleTimeoutSec" json:"idleTimeoutSec,omitempty"`
}

// FailoverPolicy enables failover groups (R-ELIG-3/4, R-EPOCH).
type FailoverPolicy struct {
	FailoverRatio                    *float64 `yaml:"failoverRatio" json:"failoverRatio,omitempty"`
	DropTrafficIfUnhealthy           bool     `yaml:"dropTrafficIfUnhealthy" json:"dropTrafficIfUnhealthy,omitempty"`
	DisableConnectionDrainOnFailover bool     `yaml:"disableConnectionDrainOnFailover" json:"disableConnectionDrainOnFailover,omitempty"`
}

// ConnectionDraining keeps removed backends' connections alive (R-DRAIN).
type ConnectionDraining struct {
	DrainingTimeoutSec int `yaml:"drainingTimeoutSec" json:"drainingTimeoutSec"`
}

// HealthCheck describes the probes `lbc run` sends. The compiler only
// validates it; weighted services need an HTTP check (R-HC-1).
type HealthCheck struct {
	Type               string `yaml:"type" json:"type"`
	Port               int    `yaml:"port" json:"port,omitempty"`
	RequestPath        string `yaml:"requestPath" json:"requestPath,omitempty"`
	Method             string `yaml:"method" json:"method,omitempty"`
	CheckIntervalSec   int    `yaml:"checkIntervalSec" json:"checkIntervalSec,omitempty"`
	TimeoutSec         int    `yaml:"timeoutSec" json:"timeoutSec,omitempty"`
	HealthyThreshold   int    `yaml:"healthyThreshold" json:"healthyThreshold,omitempty"`
	UnhealthyThreshold int    `yaml:"unhealthyThreshold" json:"unhealthyThreshold,omitempty"`
}

// BackendGroup is an instance group; failover groups only serve under a
// failover policy.
type BackendGroup struct {
	Name      string     `yaml:"name" json:"name"`
	Failover  bool       `yaml:"failover" json:"failover,omitempty"`
	Endpoints []Endpoint `yaml:"endpoints" json:"endpoints"`
}

// Endpoint is one backend machine.
type Endpoint struct {
	Name string `yaml:"name" json:"name"`
	IP   string `yaml:"ip" json:"ip"`
	MAC  string `yaml:"mac" json:"mac,omitempty"`
	Port int    `yaml:"port" json:"port,omitempty"`
}

// Ports is either ALL or a list of ports and ranges ("8000-8080").
type Ports struct {
	All  bool
	List []uint16
}

// UnmarshalYAML accepts `ALL`, a single port, or a list of ports and
// ranges. Every bad item is an error with its line and value.
func (p *Ports) UnmarshalYAML(n *yaml.Node) error {
	const want = `write ALL or a list of ports and ranges like [80, "8000-8080"]`
	switch n.Kind {
	case yaml.ScalarNode:
		if strings.EqualFold(n.Value, "ALL") {
			p.All = true
			return nil
		}
		if !plainScalar(n) {
			return fmt.Errorf("line %d: %s is not a port list; %s", n.Line, n.ShortTag(), want)
		}
		if err := p.add(n.Value); err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		return nil
	case yaml.SequenceNode:
		var errs []error
		for _, c := range n.Content {
			switch {
			case c.Kind != yaml.ScalarNode || !plainScalar(c):
				errs = append(errs, fmt.Errorf("line %d: each item must be a port or a range like 8000-8080", c.Line))
			case strings.EqualFold(c.Value, "ALL"):
				errs = append(errs, fmt.Errorf("line %d: ALL cannot be mixed with a list; write ports: ALL", c.Line))
			default:
				if err := p.add(c.Value); err != nil {
					errs = append(errs, fmt.Errorf("line %d: %w", c.Line, err))
				}
			}
		}
		return errors.Join(errs...)
	}
	return fmt.Errorf("line %d: a mapping is not a port list; %s", n.Line, want)
}

// plainScalar: a port is written as a number or a string, not as binary
// data, a date or the like.
func plainScalar(n *yaml.Node) bool {
	t := n.ShortTag()
	return t == "!!int" || t == "!!str"
}

func (p *Ports) add(s string) error {
	s = strings.TrimSpace(s)
	a, b := 0, 0
	if v, err := strconv.Atoi(s); err == nil {
		if v < 1 || v > 65535 {
			return fmt.Errorf("%d is not a port; ports are 1..65535", v)
		}
		a, b = v, v
	} else {
		lo, hi, isRange := strings.Cut(s, "-")
		if !isRange {
			return fmt.Errorf("%q is not a port; write a number in 1..65535 or a range like 8000-8080", strictyaml.Clip(s))
		}
		var errA, errB error
		a, errA = parsePort(lo)
		b, errB = parsePort(hi)
		if errA != nil || errB != nil {
			return fmt.Errorf("%q is not a port range; write two ports in 1..65535 like 8000-8080", strictyaml.Clip(s))
		}
		if b < a {
			return fmt.Errorf("range %q is backwards; write %d-%d", s, b, a)
		}
	}
	if len(p.List)+b-a+1 > 65535 {
		return fmt.Errorf("%q: more than 65535 ports in the list, so some are listed twice; write ALL or list each port once", strictyaml.Clip(s))
	}
	for v := a; ; v++ {
		p.List = append(p.List, uint16(v))
		if v == b {
			break
		}
	}
	return nil
}

func parsePort(s string) (int, error) {
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || v < 1 || v > 65535 {
		return 0, fmt.Errorf("%q is not a port in range 1..65535", s)
	}
	return v, nil
}

// MarshalYAML writes ports back in the form they are read.
func (p Ports) MarshalYAML() (any, error) {
	if p.All {
		return "ALL", nil
	}
	return p.List, nil
}

// MarshalJSON writes ALL or the list.
func (p Ports) MarshalJSON() ([]byte, error) {
	if p.All {
		return []byte(`"ALL"`), nil
	}
	var b strings.Builder
	b.WriteByte('[')
	for i, v := range p.List {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(v)))
	}
	b.WriteByte(']')
	return []byte(b.String()), nil
}

// Enumerations of the configuration vocabulary.
const (
	AffinityNone              = "NONE"
	AffinityClientIP          = "CLIENT_IP"
	AffinityClientIPProto     = "CLIENT_IP_PROTO"
	AffinityClientIPPortProto = "CLIENT_IP_PORT_PROTO"

	TrackPerConnection = "PER_CONNECTION"
	TrackPerSession    = "PER_SESSION"

	PersistDefault = "DEFAULT_FOR_PROTOCOL"
	PersistNever   = "NEVER_PERSIST"
	PersistAlways  = "ALWAYS_PERSIST"

	LbMaglev         = "MAGLEV"
	LbWeightedMaglev = "WEIGHTED_MAGLEV"

	ProtoTCP       = "TCP"
	ProtoUDP       = "UDP"
	ProtoL3Default = "L3_DEFAULT"

	EncapIPIP  = "IPIP"
	EncapL2DSR = "L2_DSR"

	SchemeExternal = "EXTERNAL"
	SchemeInternal = "INTERNAL"
)

// Rules that set a backend's deadline (BackendRow.DeadlineRule).
const (
	RuleDrain      = "R-DRAIN"
	RulePersistCap = "R-PERSIST-CAP"
)

// PersistCap is how long, under loadBalancingScheme INTERNAL, an entry may
// persist on a backend outside the eligible set (R-PERSIST-CAP, seed 001).
const PersistCap = 300 * time.Second

// Defaults applied when a field is absent.
const (
	// OldDefaultRingSize was the default ringSize before auto (the
	// capacity tables compare against it).
	OldDefaultRingSize    = 65537
	DefaultRingPrecision  = 0.01
	MinRingPrecision      = 0.0001
	MaxRingPrecision      = 0.25
	DefaultIdleTimeoutSec = 60
	DefaultMaxServices    = 4096 // lb.p4's service table; XDP holds 16384
	DefaultMaxEndpoints   = 250
	DefaultMaxGroups      = 50
	MaxWeight             = 1000
	MaxRingSize           = 1 << 22
)

// Weighted reports whether the service uses WEIGHTED_MAGLEV.
func (s *Service) Weighted() bool { return s.LocalityLbPolicy == LbWeightedMaglev }

// Affinity returns sessionAffinity with its default.
func (s *Service) Affinity() string {
	if s.SessionAffinity == "" {
		return AffinityNone
	}
	return s.SessionAffinity
}

// TrackingMode returns the tracking mode with its default.
func (s *Service) TrackingMode() string {
	if s.ConnectionTrackingPolicy == nil || s.ConnectionTrackingPolicy.TrackingMode == "" {
		return TrackPerConnection
	}
	return s.ConnectionTrackingPolicy.TrackingMode
}

// Persistence returns connectionPersistenceOnUnhealthyBackends with its default.
func (s *Service) Persistence() string {
	if s.ConnectionTrackingPolicy == nil || s.ConnectionTrackingPolicy.ConnectionPersistenceOnUnhealthyBackends == "" {
		return PersistDefault
	}
	return s.ConnectionTrackingPolicy.ConnectionPersistenceOnUnhealthyBackends
}

// IdleTimeout returns idleTimeoutSec with its default (R-AGE).
func (s *Service) IdleTimeout() int {
	if s.ConnectionTrackingPolicy == nil || s.ConnectionTrackingPolicy.IdleTimeoutSec == nil {
		return DefaultIdleTimeoutSec
	}
	return *s.ConnectionTrackingPolicy.IdleTimeoutSec
}

// Ring returns the ring size: ringSize, or under auto (the default) the
// size AutoRingSize picks for the service's endpoints and precision.
func (s *Service) Ring() int {
	if s.RingSize == 0 {
		return AutoRingSize(s.EndpointCount(), s.Precision())
	}
	return int(s.RingSize)
}

// RingAuto reports whether the service's ring size is chosen by auto.
func (s *Service) RingAuto() bool { return s.RingSize == 0 }

// Precision returns ringPrecision with its default.
func (s *Service) Precision() float64 {
	if s.RingPrecision == 0 {
		return DefaultRingPrecision
	}
	return s.RingPrecision
}

// EndpointCount is the number of endpoints in all of the service's groups.
func (s *Service) EndpointCount() int {
	n := 0
	for _, g := range s.Backends {
		n += len(g.Endpoints)
	}
	return n
}

// DrainingTimeout returns connectionDraining.drainingTimeoutSec (0 = off).
func (s *Service) DrainingTimeout() int {
	if s.ConnectionDraining == nil {
		return 0
	}
	return s.ConnectionDraining.DrainingTimeoutSec
}

// FailoverRatio returns failoverRatio with its default of 0.
func (s *Service) FailoverRatio() float64 {
	if s.FailoverPolicy == nil || s.FailoverPolicy.FailoverRatio == nil {
		return 0
	}
	return *s.FailoverPolicy.FailoverRatio
}

// Scheme returns loadBalancingScheme with its default, EXTERNAL.
func (s *Service) Scheme() string {
	if s.LoadBalancingScheme == "" {
		return SchemeExternal
	}
	return s.LoadBalancingScheme
}

// Encap returns the encapsulation with its default.
func (s *Service) Encap() string {
	if s.Encapsulation == "" {
		return EncapIPIP
	}
	return s.Encapsulation
}

// VIPAddr parses the VIP; Validate has already rejected bad ones.
func (s *Service) VIPAddr() netip.Addr {
	a, _ := netip.ParseAddr(s.VIP)
	return a.Unmap()
}
