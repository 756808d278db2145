package compiler

import (
	"reflect"
	"strconv"
	"strings"

	"github.com/lbc-dev/lbc/internal/strictyaml"
	"gopkg.in/yaml.v3"
)

// Problem is one thing wrong with a configuration file: where (line and
// field path), and what to do about it.
type Problem struct {
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	Path string `json:"path,omitempty"`
	Msg  string `json:"message"`
}

func (p Problem) String() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		b.WriteByte(':')
	}
	if p.Line > 0 {
		b.WriteString(strconv.Itoa(p.Line))
		b.WriteByte(':')
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Problems is every problem of one file; it is an error when non-empty.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Decoded is a configuration file parsed and validated.
type Decoded struct {
	Config   *Config
	Warnings Problems
}

// Load parses and validates a configuration. It reports every problem of
// the file at once, as Problems, with line numbers where the file has them.
func Load(file string, data []byte) (*Decoded, error) {
	var cfg Config
	root, issues := strictyaml.Decode(data, &cfg, configSchema)
	if len(issues) > 0 {
		return nil, issuesToProblems(file, issues)
	}
	if strictyaml.Empty(root) {
		return nil, Problems{{File: file, Msg: "empty configuration; start from examples/ or run `lbc compile` to see the embedded default"}}
	}
	v := validate(&cfg)
	loc := locator{root: root}
	if len(v.errs) > 0 {
		return nil, v.errs.located(file, loc)
	}
	return &Decoded{Config: &cfg, Warnings: v.warns.located(file, loc)}, nil
}

func issuesToProblems(file string, issues []strictyaml.Issue) Problems {
	ps := make(Problems, len(issues))
	for i, x := range issues {
		ps[i] = Problem{File: file, Line: x.Line, Msg: x.Msg}
	}
	return ps
}

var configSchema = strictyaml.Schema{
	Doc: "lb.yaml",
	Types: map[string]reflect.Type{
		"Config":                   reflect.TypeOf(Config{}),
		"Tunnel":                   reflect.TypeOf(Tunnel{}),
		"Limits":                   reflect.TypeOf(Limits{}),
		"Service":                  reflect.TypeOf(Service{}),
		"ConnectionTrackingPolicy": reflect.TypeOf(ConnectionTrackingPolicy{}),
		"FailoverPolicy":           reflect.TypeOf(FailoverPolicy{}),
		"ConnectionDraining":       reflect.TypeOf(ConnectionDraining{}),
		"HealthCheck":              reflect.TypeOf(HealthCheck{}),
		"BackendGroup":             reflect.TypeOf(BackendGroup{}),
		"Endpoint":                 reflect.TypeOf(Endpoint{}),
		"BackendState":             reflect.TypeOf(BackendState{}),
	},
	Labels: map[string]string{
		"Config":       "the top level",
		"Service":      "a service",
		"BackendGroup": "a backend group",
		"Endpoint":     "an endpoint",
		"BackendState": "an endpoint's state (name: {healthy: true|false, weight: 0..1000})",
	},
}

// locator finds the line of a field path in the parsed YAML tree.
type locator struct{ root *yaml.Node }

func (l locator) line(keys []any) int { return strictyaml.LineOf(l.root, keys) }
