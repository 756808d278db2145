package controller_test

import (
	"context"
	"regexp"
	"sort"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/targets"
)

// countingSim is a sim with every datapath counter lbc exports, so that a
// scrape has a series of each family.
type countingSim struct{ *lockedSim }

func (c countingSim) Counters(ctx context.Context) (targets.Counters, error) {
	ir, err := c.Read(ctx)
	if err != nil {
		return targets.Counters{}, err
	}
	out := targets.NewCounters()
	for _, s := range ir.Services {
		out.Services[s.ID] = targets.ServiceCounters{Packets: 1, Sessions: 1, HasSessions: true}
	}
	for _, b := range ir.Backends {
		out.Backends[b.ID] = targets.BackendCounters{Packets: 1}
	}
	out.Drops["malformed"] = 1
	out.CTRefused, out.HasCTRefused = 1, true
	return out, nil
}

// DescribeAll lists every family a scrape of a controller with counters
// has: the dashboard and alert rules under packaging/ are checked against
// DescribeAll (cmd/lbc's TestDashboardAndAlertsUseRealMetrics), so a family
// it missed (a datapath description left out of datapathDescs) would be
// one they could not be checked against.
func TestDescribeAllCoversScrape(t *testing.T) {
	m := controller.NewMetrics()
	r := startRigOpts(t, rigOptions{metrics: m, config: func(port int) string { return seedConfig(port, false, 0, 1, 1) }},
		func(o *controller.Options) { o.Targets = append(o.Targets, countingSim{newLockedSim("xdp lbpl0")}) })
	r.c.ReadCounters(r.ctx)
	described := map[string]bool{}
	ch := make(chan *prometheus.Desc)
	go func() { m.DescribeAll(ch); close(ch) }()
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		described[name.FindStringSubmatch(d.String())[1]] = true
	}
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, f := range fams {
		if !described[f.GetName()] {
			missing = append(missing, f.GetName())
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("scraped but not in DescribeAll (add them to datapathDescs or register them with m.register): %v", missing)
	}
	for _, want := range []string{"lbc_datapath_sessions", "lbc_datapath_ct_refused_total", "lbc_datapath_drops_total", "lbc_target_digest_info"} {
		found := false
		for _, f := range fams {
			found = found || f.GetName() == want
		}
		if !found {
			t.Errorf("the scrape lacks %s: the test's target no longer exercises every family", want)
		}
	}
}
