package compiler

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/lbc-dev/lbc/internal/strictyaml"
)

// BackendState is what health checks know of one endpoint. Absent fields
// mean healthy and no weight reported.
type BackendState struct {
	Healthy *bool `yaml:"healthy" json:"healthy,omitempty"`
	Weight  *int  `yaml:"weight" json:"weight,omitempty"`
	// Since is when the health last changed, on the compile clock
	// (Input.Now): the controller's probe time, a trace's event time. It
	// dates the start of an R-PERSIST-CAP deadline; without it the compile
	// that sees the change dates it. Health files do not carry it.
	Since *time.Duration `yaml:"-" json:"since,omitempty"`
}

// State maps endpoint names to their health and weight. Compile is a pure
// function of (Config, State): without an entry an endpoint is healthy.
type State map[string]BackendState

// IsHealthy reports the endpoint's health, healthy by default.
func (st State) IsHealthy(name string) bool {
	s, ok := st[name]
	return !ok || s.Healthy == nil || *s.Healthy
}

// WeightOf returns the reported weight and whether there is one.
func (st State) WeightOf(name string) (int, bool) {
	s, ok := st[name]
	if !ok || s.Weight == nil {
		return 0, false
	}
	return *s.Weight, true
}

// Clone returns an independent copy.
func (st State) Clone() State {
	out := make(State, len(st))
	for k, v := range st {
		c := BackendState{}
		if v.Healthy != nil {
			h := *v.Healthy
			c.Healthy = &h
		}
		if v.Weight != nil {
			w := *v.Weight
			c.Weight = &w
		}
		if v.Since != nil {
			t := *v.Since
			c.Since = &t
		}
		out[k] = c
	}
	return out
}

// SetHealthy records a health result.
func (st State) SetHealthy(name string, healthy bool) {
	s := st[name]
	s.Healthy = &healthy
	st[name] = s
}

// SinceOf returns when the endpoint's health last changed, if known.
func (st State) SinceOf(name string) (time.Duration, bool) {
	s, ok := st[name]
	if !ok || s.Since == nil {
		return 0, false
	}
	return *s.Since, true
}

// SetSince records when the endpoint's health last changed.
func (st State) SetSince(name string, t time.Duration) {
	s := st[name]
	s.Since = &t
	st[name] = s
}

// SetWeight records a weight.
func (st State) SetWeight(name string, w int) {
	s := st[name]
	s.Weight = &w
	st[name] = s
}

var stateSchema = strictyaml.Schema{Doc: "health.yaml", Labels: configSchema.Labels}

// LoadState parses a health.yaml (endpoint name → {healthy, weight}) and
// checks it against the configuration: unknown names and weights outside
// 0..1000 are errors, all reported at once with what cannot be decoded.
func LoadState(file string, data []byte, cfg *Config) (State, error) {
	st := State{}
	root, issues := strictyaml.Decode(data, &st, stateSchema)
	ps := decodeProblems(file, root, issues)
	for i := range ps {
		if strings.Contains(ps[i].Msg, "but this field wants") && strings.Count(ps[i].Path, ": ") == 0 && !strings.Contains(ps[i].Msg, "{healthy") {
			ps[i].Msg += " (each entry is name: {healthy: true|false, weight: 0..1000})"
		}
	}
	if root == nil {
		return nil, ps
	}
	if line, ok := looksLikeConfig(root); ok {
		return nil, Problems{{File: file, Line: line, Msg: configNotHealth}}
	}
	unset := strictyaml.UnsetPaths(issues)
	loc := locator{root: root, unset: unset}
	known := map[string]bool{}
	if cfg != nil {
		for _, s := range cfg.Services {
			for _, g := range s.Backends {
				for _, e := range g.Endpoints {
					known[e.Name] = true
				}
			}
		}
	}
	names := make([]string, 0, len(st))
	for n := range st {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := st[n]
		if cfg != nil && !known[n] {
			ps = append(ps, Problem{File: file, Line: loc.line([]any{n}), Path: strictyaml.Clip(n), Msg: "no endpoint of that name in the configuration; check the spelling"})
		}
		if s.Weight != nil && (*s.Weight < 0 || *s.Weight > MaxWeight) && !unset.Covers([]any{n, "weight"}) {
			ps = append(ps, Problem{File: file, Line: loc.line([]any{n, "weight"}), Path: strictyaml.Clip(n) + ": weight", Msg: fmt.Sprintf("%d out of range 0..%d", *s.Weight, MaxWeight)})
		}
	}
	if len(ps) > 0 {
		ps.sortByLine()
		return nil, ps
	}
	return st, nil
}
