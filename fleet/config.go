package fleet

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/strictyaml"
)

// Config is fleet.yaml, beside bgp.yaml: this node's name and listening
// address, the fleet's CA and this node's certificate, its peers, and the
// bounds on what a peer may send.
type Config struct {
	// Node is this node's name: its certificate's common name, and the
	// name its peers list it under.
	Node string `yaml:"node"`
	// Listen is the address peers dial (host:port).
	Listen string `yaml:"listen"`
	// CA, Cert and Key are PEM files (relative to fleet.yaml's
	// directory): the fleet's CA certificate, which signed every node's;
	// this node's certificate and its private key.
	CA   string `yaml:"ca"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// Peers are the fleet's other nodes.
	Peers []Peer `yaml:"peers"`
	// Refresh is how often exceptions are recomputed and resent even
	// without a push (default 5s); it must be well inside every service's
	// idle timeout (lbc run warns past a quarter of the shortest).
	Refresh string `yaml:"refresh"`
	// MaxExceptions bounds the exceptions one peer's snapshot may hold
	// (default 262144, the XDP conntrack's size): a larger snapshot is
	// refused whole. A peer has one Sync stream at a time, so this also
	// bounds what its snapshot in transit holds here.
	MaxExceptions int `yaml:"maxExceptions"`
	// MaxSnapshotsPerSecond bounds how often one peer may send a snapshot
	// (default 20); one over the rate is refused whole.
	MaxSnapshotsPerSecond int `yaml:"maxSnapshotsPerSecond"`

	refresh time.Duration
}

// Peer is another node of the fleet.
type Peer struct {
	// Name is the peer's certificate's common name.
	Name string `yaml:"name"`
	// Address is where it listens (host:port).
	Address string `yaml:"address"`
}

// Defaults of the bounds.
const (
	DefaultRefresh               = 5 * time.Second
	DefaultMaxExceptions         = 262144
	DefaultMaxSnapshotsPerSecond = 20
)

// RefreshInterval is Refresh parsed, or its default.
func (c *Config) RefreshInterval() time.Duration { return c.refresh }

var schema = strictyaml.Schema{
	Doc:    "fleet.yaml",
	Labels: map[string]string{"Config": "the top level", "Peer": "a peer"},
}

// Load parses and validates fleet.yaml strictly: an unknown field is an
// error with its line, and every problem is reported at once with its
// line and field path. Relative file names are made relative to file's
// directory.
func Load(file string, data []byte) (*Config, error) {
	var cfg Config
	root, issues := strictyaml.Decode(data, &cfg, schema)
	if len(issues) > 0 {
		return nil, compiler.YAMLProblems(file, issues)
	}
	if strictyaml.Empty(root) {
		return nil, compiler.Problems{{File: file, Msg: "empty configuration; it needs node, listen, ca, cert, key and peers (see docs/fleet.md)"}}
	}
	var ps compiler.Problems
	for _, x := range cfg.validate() {
		ps = append(ps, compiler.Problem{File: file, Line: strictyaml.LineOf(root, x.keys), Path: strictyaml.KeyPath(x.keys), Msg: x.msg})
	}
	if len(ps) > 0 {
		return nil, ps
	}
	dir := filepath.Dir(file)
	for _, p := range []*string{&cfg.CA, &cfg.Cert, &cfg.Key} {
		if !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	return &cfg, nil
}

type problem struct {
	keys []any
	msg  string
}

func validAddress(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return err
	}
	if host == "" {
		return fmt.Errorf("no host")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port %q out of range 1..65535", port)
	}
	return nil
}

func (c *Config) validate() []problem {
	var ps []problem
	bad := func(keys []any, format string, a ...any) {
		ps = append(ps, problem{keys: keys, msg: fmt.Sprintf(format, a...)})
	}
	if c.Node == "" {
		bad([]any{"node"}, "node is missing: this node's name, the common name of its certificate (e.g. n1)")
	}
	if c.Listen == "" {
		bad([]any{"listen"}, "listen is missing: the address peers dial, such as 10.0.0.2:7946")
	} else if err := validAddress(c.Listen); err != nil {
		bad([]any{"listen"}, "listen %q: %v: want host:port such as 10.0.0.2:7946", c.Listen, err)
	}
	for _, f := range []struct{ name, v, what string }{
		{"ca", c.CA, "the fleet CA's certificate (PEM), which signed every node's"},
		{"cert", c.Cert, "this node's certificate (PEM), signed by the fleet CA"},
		{"key", c.Key, "this node's private key (PEM)"},
	} {
		if f.v == "" {
			bad([]any{f.name}, "%s is missing: %s; `lbc fleet certs` makes a CA and node certificates", f.name, f.what)
		}
	}
	if len(c.Peers) == 0 {
		bad([]any{"peers"}, "no peers: list the fleet's other nodes (name and address)")
	}
	names := map[string]int{}
	addrs := map[string]int{}
	for i, p := range c.Peers {
		at := func(f string) []any { return []any{"peers", i, f} }
		switch {
		case p.Name == "":
			bad(at("name"), "name is missing: the peer's certificate's common name")
		case p.Name == c.Node:
			bad(at("name"), "name %q is this node's own (node): list only the other nodes", p.Name)
		default:
			if j, dup := names[p.Name]; dup {
				bad(at("name"), "name %q is also peers[%d]", p.Name, j)
			}
			names[p.Name] = i
		}
		if p.Address == "" {
			bad(at("address"), "address is missing: where the peer listens, host:port")
		} else if err := validAddress(p.Address); err != nil {
			bad(at("address"), "address %q: %v: want host:port such as 10.0.0.3:7946", p.Address, err)
		} else {
			if j, dup := addrs[p.Address]; dup {
				bad(at("address"), "address %s is also peers[%d]", p.Address, j)
			}
			addrs[p.Address] = i
		}
	}
	c.refresh = DefaultRefresh
	if c.Refresh != "" {
		d, err := time.ParseDuration(c.Refresh)
		if err != nil || d < 100*time.Millisecond || d > 10*time.Minute {
			bad([]any{"refresh"}, "refresh %q: want a duration from 100ms to 10m, well inside the services' idle timeouts (e.g. 5s)", c.Refresh)
		} else {
			c.refresh = d
		}
	}
	if c.MaxExceptions == 0 {
		c.MaxExceptions = DefaultMaxExceptions
	}
	if c.MaxExceptions < 1 || c.MaxExceptions > 16<<20 {
		bad([]any{"maxExceptions"}, "maxExceptions %d out of range 1..16777216", c.MaxExceptions)
	}
	if c.MaxSnapshotsPerSecond == 0 {
		c.MaxSnapshotsPerSecond = DefaultMaxSnapshotsPerSecond
	}
	if c.MaxSnapshotsPerSecond < 1 || c.MaxSnapshotsPerSecond > 1000 {
		bad([]any{"maxSnapshotsPerSecond"}, "maxSnapshotsPerSecond %d out of range 1..1000", c.MaxSnapshotsPerSecond)
	}
	return ps
}
