package controller_test

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/controller/internal/backendtest"
	"github.com/lbc-dev/lbc/targets"
)

func scrape(t *testing.T, m *controller.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	return string(body)
}

// brokenCounters is a sim whose counters cannot be read.
type brokenCounters struct{ *lockedSim }

func (b brokenCounters) Counters(context.Context) (targets.Counters, error) {
	return targets.Counters{}, errors.New("map gone")
}

// Counters exist at zero from the start; every target has its kind and
// instance as two labels and says whether this controller writes it; a
// failed counter read is a 0 in an up gauge and a counted error.
func TestMetricsFromTheStart(t *testing.T) {
	m := controller.NewMetrics()
	broken := brokenCounters{newLockedSim("xdp lbpl0")}
	r := startRigOpts(t, rigOptions{metrics: m, config: func(port int) string { return seedConfig(port, false, 0, 1, 1) }},
		func(o *controller.Options) { o.Targets = append(o.Targets, broken) })
	r.c.ReadCounters(r.ctx) // what lbc run does every --counter-interval
	body := scrape(t, m)
	for _, want := range []string{
		`lbc_failovers_total{service="web"} 0`,
		`lbc_failbacks_total{service="web"} 0`,
		`lbc_errors_total{kind="compile"} 0`,
		`lbc_errors_total{kind="push"} 0`,
		`lbc_errors_total{kind="config-read"} 0`,
		`lbc_config_reloads_total{result="applied"} 0`,
		`lbc_config_reloads_total{result="rejected"} 0`,
		`lbc_events_total{kind="failover"} 0`,
		`lbc_events_total{kind="draining-start"} 0`,
		`lbc_pushes_total{result="error",target="sim",target_instance=""} 0`,
		`lbc_target_primary{target="sim",target_instance=""} 1`,
		`lbc_target_primary{target="xdp",target_instance="lbpl0"} 1`,
		`lbc_target_diverged{target="xdp",target_instance="lbpl0"} 0`,
		`lbc_datapath_counters_up{target="xdp",target_instance="lbpl0"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The failed read is counted.
	if again := scrape(t, m); !regexp.MustCompile(`lbc_errors_total\{kind="counters"\} [1-9]`).MatchString(again) {
		t.Errorf("failed counter reads not counted:\n%s", grepLines(again, "lbc_errors_total"))
	}
	if regexp.MustCompile(`target="[^"]* `).MatchString(body) {
		t.Errorf("a target label value has a space:\n%s", body)
	}
	if strings.Contains(body, "lbc_datapath_counter_read_errors") {
		t.Error("the old 0/1 gauge named like a counter is still exported")
	}
	// Unweighted service: no weight, neither in metrics nor in status.
	if strings.Contains(body, "lbc_backend_weight{") {
		t.Errorf("an unweighted service's backends have a weight:\n%s", grepLines(body, "lbc_backend_weight"))
	}
	for _, b := range r.c.Status(r.ctx).Services[0].Backends {
		if b.Weight != nil {
			t.Errorf("status: unweighted backend %s has weight %d", b.Name, *b.Weight)
		}
	}
}

// A WEIGHTED_MAGLEV service's backends show their weights, 0 included.
func TestMetricsWeightsOfWeightedServices(t *testing.T) {
	m := controller.NewMetrics()
	f := backendtest.Start(t, "127.0.0.41", "127.0.0.42", "127.0.0.43")
	f.Get("127.0.0.41").SetWeight("0")
	f.Get("127.0.0.42").SetWeight("2")
	f.Get("127.0.0.43").SetWeight("6")
	r := startRig(t, rigOptions{fleet: f, metrics: m, config: weightedConfig})
	body := scrape(t, m)
	for _, want := range []string{`lbc_backend_weight{backend="api-1",service="api"} 0`, `lbc_backend_weight{backend="api-3",service="api"} 6`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	got := map[string]int{}
	for _, b := range r.c.Status(r.ctx).Services[0].Backends {
		if b.Weight == nil {
			t.Fatalf("status: weighted backend %s has no weight", b.Name)
		}
		got[b.Name] = *b.Weight
	}
	if got["api-1"] != 0 || got["api-2"] != 2 || got["api-3"] != 6 {
		t.Errorf("status weights %v, want api-1 0, api-2 2, api-3 6", got)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// refusingCounters is a sim whose counters include the TNA program's
// ct_refused (R-CT-CAP).
type refusingCounters struct{ *lockedSim }

func (r refusingCounters) Counters(context.Context) (targets.Counters, error) {
	return targets.Counters{CTRefused: 9, HasCTRefused: true}, nil
}

// TestMetricsCTRefused (R-CT-CAP): a datapath that counts the flows it
// refused a conntrack entry exports lbc_datapath_ct_refused_total; one
// without the counter exports no such series (not a false 0).
func TestMetricsCTRefused(t *testing.T) {
	m := controller.NewMetrics()
	refusing := refusingCounters{newLockedSim("tofino sw1")}
	r := startRigOpts(t, rigOptions{metrics: m, config: func(port int) string { return seedConfig(port, false, 0, 1, 1) }},
		func(o *controller.Options) { o.Targets = append(o.Targets, refusing) })
	r.c.ReadCounters(r.ctx)
	body := scrape(t, m)
	if want := `lbc_datapath_ct_refused_total{target="tofino",target_instance="sw1"} 9`; !strings.Contains(body, want) {
		t.Errorf("metrics lack %s:\n%s", want, grepLines(body, "lbc_datapath_"))
	}
	if n := strings.Count(body, "lbc_datapath_ct_refused_total{"); n != 1 {
		t.Errorf("%d ct_refused series, want 1 (the target without the counter has none):\n%s", n, grepLines(body, "ct_refused"))
	}
}
