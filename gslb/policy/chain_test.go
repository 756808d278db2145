package policy

import (
	"bytes"
	"os"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

type chainFile struct {
	Cases []struct {
		Name  string `yaml:"name"`
		Steps []Step `yaml:"steps"`
		Sites []struct {
			Name              string   `yaml:"name"`
			Preference        int      `yaml:"preference"`
			Weight            int      `yaml:"weight"`
			Lat               *float64 `yaml:"lat"`
			Lon               *float64 `yaml:"lon"`
			MaxSessions       uint64   `yaml:"maxSessions"`
			MaxConnectionLoad float64  `yaml:"maxConnectionLoad"`
		} `yaml:"sites"`
		Metrics map[string]struct {
			Healthy   int     `yaml:"healthy"`
			Sessions  uint64  `yaml:"sessions"`
			NewPerSec float64 `yaml:"newPerSec"`
		} `yaml:"metrics"`
		RTTMs    map[string]int    `yaml:"rttMs"`
		Client   *Point            `yaml:"client"`
		Selected map[string]uint64 `yaml:"selected"`
		Next     uint64            `yaml:"next"`
		AllDown  AllDown           `yaml:"allDown"`
		Want     struct {
			Site      string `yaml:"site"`
			DecidedBy Step   `yaml:"decidedBy"`
		} `yaml:"want"`
	} `yaml:"cases"`
}

// TestChain runs testdata/chain.yaml: every step deciding inside the full
// chain, the modes of G-MODE, and the edge cases.
func TestChain(t *testing.T) {
	data, err := os.ReadFile("testdata/chain.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f chainFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var raw struct {
		Defaults any       `yaml:"defaults"`
		Cases    yaml.Node `yaml:"cases"`
	}
	if err := dec.Decode(&raw); err != nil {
		t.Fatal(err)
	}
	if err := raw.Cases.Decode(&f.Cases); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Minute)
	for _, tc := range f.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			c := allSteps(LeastSelected)
			if tc.Steps != nil {
				c.Steps = tc.Steps
			}
			if tc.AllDown != "" {
				c.AllDown = tc.AllDown
			}
			if err := c.Check(); err != nil {
				t.Fatal(err)
			}
			in := Input{Metrics: map[string]Metrics{}, Query: Query{Now: now, Client: tc.Client, ClientKey: "test"}, State: State{Selected: tc.Selected, Next: tc.Next}}
			for _, s := range tc.Sites {
				site := Site{Name: s.Name, Preference: s.Preference, Weight: s.Weight, MaxSessions: s.MaxSessions, MaxConnectionLoad: s.MaxConnectionLoad}
				if s.Lat != nil {
					site.Location = &Point{*s.Lat, *s.Lon}
				}
				in.Sites = append(in.Sites, site)
			}
			for n, m := range tc.Metrics {
				x := Metrics{Known: true, HealthyBackends: m.Healthy, Backends: 4, Sessions: m.Sessions}
				for i := 0; i < 5; i++ {
					x.Conn = append(x.Conn, ConnSample{At: now.Add(-time.Duration(i) * time.Second), Span: time.Second, New: m.NewPerSec})
				}
				in.Metrics[n] = x
			}
			if tc.RTTMs != nil {
				in.Query.RTT = map[string]time.Duration{}
				for n, ms := range tc.RTTMs {
					in.Query.RTT[n] = time.Duration(ms) * time.Millisecond
				}
			}
			d := Run(c, in)
			if d.Site != tc.Want.Site || d.DecidedBy != tc.Want.DecidedBy {
				t.Errorf("chose %q decided by %q (%s), want %q by %q", d.Site, d.DecidedBy, d.Reason, tc.Want.Site, tc.Want.DecidedBy)
				for _, r := range d.Trace {
					t.Logf("  %s %-17s %-8s %v -> %v: %s", r.ID, r.Step, r.Outcome, r.In, r.Out, r.Reason)
				}
			}
			if len(d.Trace) != len(c.Steps) {
				t.Errorf("trace has %d entries, want one per step (%d)", len(d.Trace), len(c.Steps))
			}
			// The state moves only by the choice made.
			if d.Site != "" && d.Next.Selected[d.Site] != tc.Selected[d.Site]+1 {
				t.Errorf("selection count of %s not advanced", d.Site)
			}
			if in.State.Selected != nil && in.State.Selected[d.Site] != tc.Selected[d.Site] {
				t.Error("Run changed its input state")
			}
		})
	}
}
