package gslb

import (
	"os"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/gslb/policy"
)

func TestLoadExample(t *testing.T) {
	data, err := os.ReadFile("../examples/gslb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load("gslb.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	want := []policy.Step{policy.Health, policy.Capacity, policy.NetworkProximity, policy.GeoProximity, policy.ConnectionLoad, policy.Preference, policy.LeastSelected}
	if got := c.Steps(); len(got) != len(want) {
		t.Fatalf("steps %v", got)
	}
	if *c.Names[0].Sites[0].Weight != 2 || c.Metrics.Interval.D().String() != "2s" {
		t.Fatalf("decoded %+v", c)
	}
}

const minimal = `
zones: [{name: example.com}]
sites:
  - {name: a, metrics: "http://127.0.0.1:1/v1/gslb/metrics"}
names:
  - name: www.example.com
    service: web
    sites: [{site: a, addresses: [192.0.2.1]}]
policy: {mode: gslb+slb, steps: [health, capacity, static]}
`

// TestGMODE_Modes: the three modes of G-MODE are configurations of the
// same code, each with its own default chain.
func TestGMODE_Modes(t *testing.T) {
	cases := map[string]string{
		"mode: gslb+slb":  "health capacity network-proximity geo-proximity connection-load preference least-selected",
		"mode: gslb-only": "health geo-proximity preference least-selected",
		"mode: dns":       "static",
	}
	for mode, want := range cases {
		y := strings.Replace(minimal, "{mode: gslb+slb, steps: [health, capacity, static]}", "{"+mode+", geoProximity: {database: x.mmdb}}", 1)
		y = strings.Replace(y, "metrics:", "location: {lat: 1, lon: 2}, metrics:", 1)
		c, err := Load("gslb.yaml", []byte(y))
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, y)
		}
		var got []string
		for _, s := range c.Steps() {
			got = append(got, string(s))
		}
		if strings.Join(got, " ") != want {
			t.Errorf("%s: steps %v, want %s", mode, got, want)
		}
	}
}

func TestLoadErrorsNameFieldAndFix(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       []string // substrings, one problem each, all reported at once
	}{
		{"unknown field with its line", strings.Replace(minimal, "service: web", "service: web\n    tll: 30", 1),
			[]string{`gslb.yaml:8: name "www.example.com".tll: unknown field (did you mean "ttl"?); known fields of a name: answers, name, service, sites, ttl`}},
		{"both final steps", strings.Replace(minimal, "[health, capacity, static]", "[health, least-selected, static]", 1),
			[]string{"policy.steps: ", "not both"}},
		{"step the mode cannot run", strings.Replace(minimal, "mode: gslb+slb", "mode: gslb-only", 1),
			[]string{"capacity (G-2) needs data that mode gslb-only does not have"}},
		{"several problems at once", strings.NewReplacer("192.0.2.1", "192.0.2", "www.example.com", "www.example.org", "site: a,", "site: b,").Replace(minimal),
			[]string{`"192.0.2" is not a unicast IP address`, "www.example.org is in none of the zones (example.com)", `"b" is not a site; sites are: a`}},
		{"missing metrics in gslb+slb", strings.Replace(minimal, `metrics: "http://127.0.0.1:1/v1/gslb/metrics"`, `location: {lat: 1, lon: 2}`, 1),
			[]string{"metrics: missing; mode gslb+slb polls every site"}},
		{"bad duration", minimal + "metrics: {interval: soon}\n",
			[]string{`"soon" is not a duration`}},
		{"several problems at once: decoding hides no check", strings.NewReplacer("service: web", "service: web\n    tll: 30\n    answers: many", "192.0.2.1", "192.0.2").Replace(minimal),
			[]string{`tll: unknown field`, `answers: "many" is text`, `"192.0.2" is not a unicast IP address`}},
		{"wrong type", strings.Replace(minimal, "service: web", "service: web\n    answers: many", 1),
			[]string{`gslb.yaml:8: name "www.example.com".answers: "many" is text, but this field wants a whole number`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load("gslb.yaml", []byte(tc.yaml))
			ps, ok := err.(compiler.Problems)
			if !ok {
				t.Fatalf("error %T %v, want compiler.Problems", err, err)
			}
			all := ps.Error()
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("problems:\n%s\nlack %q", all, w)
				}
			}
			if strings.HasPrefix(tc.name, "several") && len(ps) < 3 {
				t.Errorf("want every problem at once, got %d", len(ps))
			}
		})
	}
}

// A huge value is echoed by its start and size, never whole.
func TestLoadClipsEchoedValues(t *testing.T) {
	huge := strings.Repeat("z", 1<<20)
	y := strings.NewReplacer("site: a,", "site: "+huge+",", "192.0.2.1", huge, "service: web", "service: web\n    ttl: "+huge).Replace(minimal)
	_, err := Load("gslb.yaml", []byte(y))
	ps, ok := err.(compiler.Problems)
	if !ok || len(ps) < 3 {
		t.Fatalf("want the problems of the site reference, the address and the ttl, got %.2000v", err)
	}
	for _, p := range ps {
		if s := p.String(); len(s) > 600 {
			t.Errorf("problem of %d bytes: %.300s", len(s), s)
		}
	}
}
