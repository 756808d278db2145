package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"

	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/controller/bgp"
	"github.com/lbc-dev/lbc/fleet"
)

// TestSystemdUnitRunsLbcRun: packaging/systemd/lbc.service starts lbc run
// with flags that exist, each given a value where it takes one, so a copy
// of the unit does not fail at its first start.
func TestSystemdUnitRunsLbcRun(t *testing.T) {
	data, err := os.ReadFile("../../packaging/systemd/lbc.service")
	if err != nil {
		t.Fatal(err)
	}
	var exec []string
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			exec = strings.Fields(v)
		}
	}
	if len(exec) < 2 || !strings.HasSuffix(exec[0], "/lbc") || exec[1] != "run" {
		t.Fatalf("ExecStart is not lbc run: %q", exec)
	}
	byName := map[string]cli.Flag{}
	for _, f := range runCommand.Flags {
		for _, n := range f.Names() {
			byName[n] = f
		}
	}
	hasC := false
	for i := 2; i < len(exec); i++ {
		name := strings.TrimLeft(exec[i], "-")
		if !strings.HasPrefix(exec[i], "-") {
			t.Fatalf("ExecStart argument %q is no flag (flags only: the file is -c)", exec[i])
		}
		f, ok := byName[name]
		if !ok {
			t.Fatalf("ExecStart flag %s: lbc run has no such flag", exec[i])
		}
		hasC = hasC || f == configFlag
		if _, isBool := f.(*cli.BoolFlag); !isBool {
			if i+1 >= len(exec) || strings.HasPrefix(exec[i+1], "-") {
				t.Fatalf("ExecStart flag %s has no value", exec[i])
			}
			i++
		}
	}
	if !hasC {
		t.Fatal("ExecStart has no -c: lbc run refuses to start without its configuration")
	}
	if !strings.Contains(string(data), "ExecReload=/bin/kill -HUP $MAINPID") {
		t.Error("no ExecReload sending SIGHUP, which makes lbc run re-read lb.yaml")
	}
}

// lbcFamilies returns every metric family lbc run can register, by name:
// the controller's (with the Go runtime's and the process's), BGP's and
// the fleet's, vectors without series included (a scrape would leave
// those out).
func lbcFamilies(t *testing.T) map[string]bool {
	t.Helper()
	d := describer{}
	ch := make(chan *prometheus.Desc)
	go func() { controller.NewMetrics().DescribeAll(ch); close(ch) }()
	for x := range ch {
		d.add(x)
	}
	bgp.NewMetrics(d)
	fleet.RegisterMetrics(d)
	if len(d) < 40 {
		t.Fatalf("only %d metric families registered: %v", len(d), d)
	}
	return d
}

// describer is a prometheus.Registerer that records the names of what is
// registered in it.
type describer map[string]bool

var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d describer) add(x *prometheus.Desc) {
	if m := descName.FindStringSubmatch(x.String()); m != nil {
		d[m[1]] = true
	}
}

func (d describer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for x := range ch {
		d.add(x)
	}
	return nil
}

func (d describer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		d.Register(c)
	}
}

func (d describer) Unregister(prometheus.Collector) bool { return false }

// notInDashboard are the families the dashboard leaves out on purpose.
// Empty: every lbc_ family has a panel. (The Go runtime's and the
// process's go_* and process_* families are not required; the dashboard
// shows a few.)
var notInDashboard = map[string]string{}

// fromPrometheus are names a rule or panel may query that lbc does not
// export: Prometheus makes them for every scrape.
var fromPrometheus = map[string]bool{"up": true}

// metricRefs returns the metric names a PromQL expression queries. It is
// no PromQL parser: it takes every identifier that starts with lbc_, go_
// or process_, or is a name Prometheus makes, and is not a label name
// (followed by =, !=, =~ or !~, where == is a comparison) nor a function.
func metricRefs(expr string) []string {
	var out []string
	for _, m := range promIdent.FindAllStringSubmatchIndex(expr, -1) {
		name := expr[m[2]:m[3]]
		rest := strings.TrimLeft(expr[m[3]:], " ")
		if strings.HasPrefix(rest, "=") && !strings.HasPrefix(rest, "==") || strings.HasPrefix(rest, "!=") || strings.HasPrefix(rest, "!~") {
			continue
		}
		if strings.HasPrefix(name, "lbc_") || strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") || fromPrometheus[name] {
			out = append(out, name)
		}
	}
	return out
}

var promIdent = regexp.MustCompile(`(?:^|[^a-zA-Z0-9_:$"])([a-zA-Z_:][a-zA-Z0-9_:]*)`)

// family maps a series name to its family: a histogram's _bucket, _sum
// and _count series belong to it.
func family(name string, families map[string]bool) string {
	if families[name] {
		return name
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if f, ok := strings.CutSuffix(name, suf); ok && families[f] {
			return f
		}
	}
	return name
}

type grafanaPanel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a collapsed row's
}

type grafanaDashboard struct {
	SchemaVersion int            `json:"schemaVersion"`
	UID           string         `json:"uid"`
	Title         string         `json:"title"`
	Panels        []grafanaPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []struct {
			Expr string `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
}

// readDashboard parses packaging/grafana/lbc-dashboard.json and returns
// it with every PromQL expression in it (panels, variables, annotations),
// each with where it is.
func readDashboard(t *testing.T) (grafanaDashboard, map[string]string) {
	t.Helper()
	data, err := os.ReadFile("../../packaging/grafana/lbc-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("packaging/grafana/lbc-dashboard.json: %v", err)
	}
	exprs := map[string]string{}
	var walk func(ps []grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			for i, tg := range p.Targets {
				exprs[fmt.Sprintf("panel %d %q target %d", p.ID, p.Title, i)] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue // the data source variable's query is a plugin type
		}
		switch q := v.Query.(type) {
		case string:
			exprs["variable "+v.Name] = q
		case map[string]any:
			if s, ok := q["query"].(string); ok {
				exprs["variable "+v.Name] = s
			}
		}
	}
	for i, a := range d.Annotations.List {
		if a.Expr != "" {
			exprs[fmt.Sprintf("annotation %d", i)] = a.Expr
		}
	}
	return d, exprs
}

// TestDashboardIsAGrafanaDashboard: the dashboard parses, has unique panel
// IDs, asks for its Prometheus data source and queries it everywhere.
func TestDashboardIsAGrafanaDashboard(t *testing.T) {
	d, exprs := readDashboard(t)
	if d.SchemaVersion < 36 || d.UID == "" || d.Title == "" {
		t.Errorf("schemaVersion %d, uid %q, title %q: want a Grafana 9+ model with a uid and a title", d.SchemaVersion, d.UID, d.Title)
	}
	ids := map[int]string{}
	var walk func(ps []grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup || p.ID == 0 {
				t.Errorf("panel %q: id %d is not unique (also %q) or is 0", p.Title, p.ID, prev)
			}
			ids[p.ID] = p.Title
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %d %q queries nothing", p.ID, p.Title)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	hasDS := false
	for _, v := range d.Templating.List {
		hasDS = hasDS || v.Type == "datasource" && v.Name == "DS_PROMETHEUS"
	}
	if !hasDS {
		t.Error("no datasource variable DS_PROMETHEUS: the panels' ${DS_PROMETHEUS} resolves to nothing")
	}
	data, _ := os.ReadFile("../../packaging/grafana/lbc-dashboard.json")
	if n := strings.Count(string(data), `"uid": "${DS_PROMETHEUS}"`); n < len(exprs) {
		t.Errorf("%d queries but %d references to ${DS_PROMETHEUS}: a panel or target has a fixed data source", len(exprs), n)
	}
}

// promRule is one rule of a Prometheus rule file.
type promRule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func readAlerts(t *testing.T) []promRule {
	t.Helper()
	data, err := os.ReadFile("../../packaging/prometheus/lbc-alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string     `yaml:"name"`
			Rules []promRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true) // a misspelt key (annotation:) is an error, as for promtool
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("packaging/prometheus/lbc-alerts.yaml: %v", err)
	}
	if len(f.Groups) == 0 {
		t.Fatal("packaging/prometheus/lbc-alerts.yaml: no groups")
	}
	var out []promRule
	for _, g := range f.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: want a name and rules", g.Name)
		}
		out = append(out, g.Rules...)
	}
	return out
}

// TestAlertRulesShape: every rule of the alert file is an alert with an
// expression, a for: duration, a severity and annotations saying what is
// wrong and what to check.
func TestAlertRulesShape(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range readAlerts(t) {
		if r.Alert == "" || r.Record != "" {
			t.Errorf("rule %q/%q: want alert rules only", r.Alert, r.Record)
			continue
		}
		if seen[r.Alert] {
			t.Errorf("alert %s twice", r.Alert)
		}
		seen[r.Alert] = true
		if strings.TrimSpace(r.Expr) == "" {
			t.Errorf("%s: no expr", r.Alert)
		}
		if _, err := model.ParseDuration(r.For); err != nil {
			t.Errorf("%s: for: %q: %v (write e.g. 5m)", r.Alert, r.For, err)
		}
		if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
			t.Errorf("%s: labels.severity %q: want critical, warning or info", r.Alert, s)
		}
		if r.Annotations["summary"] == "" || len(r.Annotations["description"]) < 40 {
			t.Errorf("%s: want a summary and a description of what to check", r.Alert)
		}
	}
}

// TestDashboardAndAlertsUseRealMetrics: every metric the dashboard and the
// alert rules query is one lbc registers (a renamed metric would leave an
// empty panel or an alert that never fires), and every lbc_ family has a
// panel.
func TestDashboardAndAlertsUseRealMetrics(t *testing.T) {
	families := lbcFamilies(t)
	_, exprs := readDashboard(t)
	for i, r := range readAlerts(t) {
		exprs[fmt.Sprintf("alert %d %s", i, r.Alert)] = r.Expr
	}
	inDashboard := map[string]bool{}
	for where, e := range exprs {
		refs := metricRefs(e)
		if len(refs) == 0 {
			t.Errorf("%s: queries no lbc metric: %s", where, e)
		}
		for _, name := range refs {
			f := family(name, families)
			if !families[f] && !fromPrometheus[f] {
				t.Errorf("%s: %s is no metric lbc registers (expr %s)", where, name, e)
			}
			if strings.HasPrefix(where, "panel ") {
				inDashboard[f] = true
			}
		}
	}
	var missing []string
	for f := range families {
		if strings.HasPrefix(f, "lbc_") && !inDashboard[f] && notInDashboard[f] == "" {
			missing = append(missing, f)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("families without a panel in packaging/grafana/lbc-dashboard.json (add one, or list them in notInDashboard with the reason): %v", missing)
	}
}

// TestAlertRulesPromtool runs promtool check rules on the alert file where
// promtool is installed (apt-get install prometheus).
func TestAlertRulesPromtool(t *testing.T) {
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install prometheus gives it): the rules' PromQL is not checked beyond TestDashboardAndAlertsUseRealMetrics")
	}
	out, err := exec.Command(path, "check", "rules", "../../packaging/prometheus/lbc-alerts.yaml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}
