package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const td = "../../testbench/testdata/"

// TestReplayTestdata: the seed-001 walk-through replays through the CLI with
// every expectation met, one JSON line per packet and event, and a summary.
func TestReplayTestdata(t *testing.T) {
	out, _, err := runLBC(t, "replay", "-c", td+"seed001.yaml", "--trace", td+"r-elig-5-seed001.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var pk, ev int
	for _, l := range lines[:len(lines)-1] {
		var o map[string]any
		if err := json.Unmarshal([]byte(l), &o); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		switch {
		case o["event"] != nil:
			ev++
		case o["action"] == "forward" && o["backend"] != nil && o["ct"] != nil && o["rule"] != nil:
			pk++
		default:
			t.Errorf("unexpected line %s", l)
		}
	}
	if pk != 60 || ev != 5 {
		t.Errorf("%d packet lines, %d event lines; want 60 and 5", pk, ev)
	}
	var s struct {
		Summary struct {
			Packets, Expected, Mismatches int
			New                           map[string]int
		}
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil || s.Summary.Packets != 60 || s.Summary.Mismatches != 0 || s.Summary.Expected != 64 {
		t.Fatalf("summary %s: %+v %v", lines[len(lines)-1], s, err)
	}
	// New connections went to failover backends only while failed over.
	if s.Summary.New["vm-b1"]+s.Summary.New["vm-b2"]+s.Summary.New["vm-c1"]+s.Summary.New["vm-c2"] != 6 {
		t.Errorf("new connections on failover backends: %v, want 6", s.Summary.New)
	}
}

// TestReplayMismatchFails: an expectation the datapath does not meet makes
// replay print a mismatch and exit with an error.
func TestReplayMismatchFails(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.jsonl")
	os.WriteFile(tr, []byte(`{"t":1,"src":"198.51.100.7","dst":"203.0.113.10","proto":"tcp","sport":1,"dport":80,"flags":"S","expect":{"backend":"vm-b1"}}`+"\n"), 0o644)
	out, _, err := runLBC(t, "replay", "-c", td+"seed001.yaml", "--trace", tr)
	if err == nil || !strings.Contains(err.Error(), "1 of 1 expectations not met") || !strings.Contains(out, `"mismatch":"got forward`) {
		t.Fatalf("err %v, out %s", err, out)
	}
}

func TestReplayMalformedLine(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.jsonl")
	os.WriteFile(tr, []byte("# ok\n{\"t\":1,\"event\":\"health\",\"backend\":\"vm-a1\",\"healthy\":false}\n{\"t\":2,\"src\":\"198.51.100.7\"}\n"), 0o644)
	_, _, err := runLBC(t, "replay", "-c", td+"seed001.yaml", "--trace", tr)
	if err == nil || !strings.Contains(err.Error(), "t.jsonl:3: ") {
		t.Fatalf("err %v, want the file and line 3", err)
	}
	os.WriteFile(tr, []byte("{\"t\":1,\"event\":\"health\",\"backend\":\"vm-zz\",\"healthy\":false}\n"), 0o644)
	_, _, err = runLBC(t, "replay", "-c", td+"seed001.yaml", "--trace", tr)
	if err == nil || !strings.Contains(err.Error(), `t.jsonl:1: health: no endpoint "vm-zz"`) {
		t.Fatalf("err %v, want the unknown backend named with its line", err)
	}
}

func TestReplayGeneratedTrace(t *testing.T) {
	tr := filepath.Join(t.TempDir(), "g.jsonl")
	if _, _, err := runLBC(t, "gen-trace", "-c", td+"ct.yaml", "--seed", "3", "--packets", "2000", "--events", "-o", tr); err != nil {
		t.Fatal(err)
	}
	out, _, err := runLBC(t, "replay", "-c", td+"ct.yaml", "--trace", tr, "--summary-only")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, `{"summary":{"packets":2000,`) {
		t.Fatalf("out %s", out)
	}
}

func TestExplain(t *testing.T) {
	out, _, err := runLBC(t, "explain", "-c", td+"seed001.yaml", "--packet", "tcp 198.51.100.7:4242 > 203.0.113.10:80 S")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`LOOKUP`, `service "web"`, "R-CT-1", "R-AFF", "5-tuple (CLIENT_IP_PORT_PROTO) c6336407cb00710a0610920050", "R-HASH", "R-ELIG-3d", "R-MAGLEV-1", "slot ", "ENCAP", "IP-in-IP: outer 192.0.2.1", "verdict forward to vm-"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain lacks %q:\n%s", want, out)
		}
	}
	out, _, err = runLBC(t, "explain", "-c", td+"seed001.yaml", "--trace", td+"r-elig-5-seed001.jsonl", "--json",
		"--packet", "tcp 198.51.100.10:40000 > 203.0.113.10:80 A")
	if err != nil {
		t.Fatal(err)
	}
	var j explainJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatal(err)
	}
	if j.CT != "hit" || j.T != 41 || j.Detail.TrackTuple != "5-tuple" || !j.Detail.EntryValid || j.Backend == "" {
		t.Errorf("after the trace the flow hits its entry: %s", out)
	}
	if _, _, err := runLBC(t, "explain", "-c", td+"seed001.yaml", "--packet", "tcp 198.51.100.7 > 203.0.113.10:80"); err == nil || !strings.Contains(err.Error(), "--packet") {
		t.Errorf("bad packet: %v", err)
	}
}

// TestReplayComposedSystem: --fallback-target chains the fallback's model
// behind sim-p4: the fragments and port-less sessions of r-frag, which the
// switch sends to its fallback port, end at a backend, every expectation
// of the trace is met, and their lines report both hops.
func TestReplayComposedSystem(t *testing.T) {
	out, _, err := runLBC(t, "replay", "-c", td+"ct.yaml", "--trace", td+"r-frag.jsonl", "--target", "sim-p4", "--fallback-target", "sim")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	twoHops := 0
	for _, l := range lines[:len(lines)-1] {
		var o struct {
			Action, Backend string
			Hops            []struct{ Target, Action, Backend string }
		}
		if err := json.Unmarshal([]byte(l), &o); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if len(o.Hops) == 2 {
			twoHops++
			if o.Hops[0].Target != "sim-p4" || o.Hops[0].Action != "fallback" || o.Hops[1].Target != "sim" || o.Hops[1].Action != o.Action || o.Hops[1].Backend != o.Backend {
				t.Errorf("hops of %s", l)
			}
		}
	}
	if twoHops < 10 || !strings.Contains(lines[len(lines)-1], `"fallback":0`) || !strings.Contains(lines[len(lines)-1], `"mismatches":0`) {
		t.Errorf("%d lines through two hops; summary %s", twoHops, lines[len(lines)-1])
	}
	if _, _, err := runLBC(t, "replay", "-c", td+"ct.yaml", "--trace", td+"r-frag.jsonl", "--target", "sim", "--fallback-target", "sim"); err == nil || !strings.Contains(err.Error(), "use it with --target bmv2, sim-p4, not sim") {
		t.Errorf("--target sim --fallback-target sim: %v", err)
	}
}

// replaySummary is the last line of lbc replay's output.
func replaySummary(t *testing.T, out string) (packets, expected, mismatches int) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var s struct {
		Summary struct{ Packets, Expected, Mismatches int }
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		t.Fatalf("summary %q: %v", lines[len(lines)-1], err)
	}
	return s.Summary.Packets, s.Summary.Expected, s.Summary.Mismatches
}

// TestReplayReadsTraceHeader (issue 24, item 5): replay takes the files of
// the trace's "# config:" and "# health:" lines (relative to the trace's
// folder) for -c and --health not given, and warns when a given one
// differs. r-persist-matrix.jsonl replayed with -c and without --health
// met 120 of its 168 expectations: its health file was not read.
func TestReplayReadsTraceHeader(t *testing.T) {
	const trace = td + "r-persist-matrix.jsonl"
	// The same bytes under another name is the same configuration.
	data, err := os.ReadFile(td + "persist.yaml")
	if err != nil {
		t.Fatal(err)
	}
	copyOf := filepath.Join(t.TempDir(), "copy.yaml")
	if err := os.WriteFile(copyOf, data, 0o644); err != nil {
		t.Fatal(err)
	}
	allHealthy := filepath.Join(t.TempDir(), "healthy.yaml")
	if err := os.WriteFile(allHealthy, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		args       []string
		mismatches int    // -1: replay fails before its summary
		errWant    string // in the error
		stderr     []string
		notStderr  []string
	}{
		{"-c as the header, health from the header", []string{"-c", td + "persist.yaml"}, 0, "",
			[]string{`note: health from the trace's "# health: persist-health.yaml" (` + td + `persist-health.yaml) line`}, []string{"warning: -c", "note: configuration"}},
		{"both from the header", nil, 0, "",
			[]string{`note: configuration from the trace's "# config: persist.yaml" (` + td + `persist.yaml) line (-c overrides it)`, "note: health from the trace's"}, []string{"warning: -c", "warning: --health"}},
		{"-c a copy of the header's file", []string{"-c", copyOf}, 0, "",
			[]string{"note: health from the trace's"}, []string{"warning: -c"}},
		{"both given as the header", []string{"-c", td + "persist.yaml", "--health", td + "persist-health.yaml"}, 0, "",
			nil, []string{"note:", "warning: -c", "warning: --health"}},
		{"--health differs", []string{"-c", td + "persist.yaml", "--health", allHealthy}, 48, "48 of 168 expectations not met",
			[]string{"warning: --health " + allHealthy + ` differs from the health of the trace's "# health: persist-health.yaml"`}, []string{"note: health"}},
		{"-c differs: the header's health is not used", []string{"-c", td + "ct.yaml"}, -1, `health: no endpoint`,
			[]string{"warning: -c " + td + `ct.yaml differs from the configuration of the trace's "# config: persist.yaml"`,
				`warning: the trace's "# health: persist-health.yaml" (` + td + `persist-health.yaml) line is for the trace's configuration, not -c ` + td + "ct.yaml: not used"}, []string{"note: health"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errw, err := runLBC(t, append([]string{"replay", "--trace", trace, "--summary-only"}, tc.args...)...)
			if tc.errWant == "" && err != nil {
				t.Fatalf("%v\nstderr:\n%s", err, errw)
			}
			if tc.errWant != "" && (err == nil || !strings.Contains(err.Error(), tc.errWant)) {
				t.Errorf("error %v, want %q", err, tc.errWant)
			}
			if tc.mismatches >= 0 {
				if _, expected, mm := replaySummary(t, out); mm != tc.mismatches || expected != 168 {
					t.Errorf("%d of %d expectations not met, want %d of 168", mm, expected, tc.mismatches)
				}
			}
			for _, w := range tc.stderr {
				if !strings.Contains(errw, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errw)
				}
			}
			for _, nw := range tc.notStderr {
				if strings.Contains(errw, nw) {
					t.Errorf("stderr has %q:\n%s", nw, errw)
				}
			}
		})
	}
}

// TestReplayHeaderNamesMissingFile: a header file that is not there is an
// error naming the line and the fix when it would be used, and a warning
// when a flag replaces it.
func TestReplayHeaderNamesMissingFile(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.jsonl")
	pkt := `{"t":1,"src":"198.51.100.7","dst":"203.0.113.10","proto":"tcp","sport":1,"dport":80,"flags":"S"}` + "\n"
	if err := os.WriteFile(tr, []byte("# config: gone.yaml\n# health: gone-health.yaml\n"+pkt), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := runLBC(t, "replay", "--trace", tr)
	if err == nil || !strings.Contains(err.Error(), `the trace's "# config: gone.yaml" (`+filepath.Join(dir, "gone.yaml")+`) line names a configuration that cannot be read`) || !strings.Contains(err.Error(), "give it with -c lb.yaml") {
		t.Errorf("error %v", err)
	}
	_, errw, err := runLBC(t, "replay", "--trace", tr, "-c", td+"seed001.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{`warning: the trace's "# config: gone.yaml"`, "cannot be checked against it; replaying with -c " + td + "seed001.yaml", `warning: the trace's "# health: gone-health.yaml"`} {
		if !strings.Contains(errw, w) {
			t.Errorf("stderr lacks %q:\n%s", w, errw)
		}
	}
	// -c as the header says, a health file that is not there: an error.
	if err := os.WriteFile(tr, []byte("# config: "+filepath.Join(mustAbs(t, td), "seed001.yaml")+"\n# health: gone-health.yaml\n"+pkt), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runLBC(t, "replay", "--trace", tr); err == nil || !strings.Contains(err.Error(), `"# health: gone-health.yaml"`) || !strings.Contains(err.Error(), "give one with --health") {
		t.Errorf("error %v", err)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestGenTraceWritesConfigHeader: gen-trace -c names the configuration in a
// "# config:" line, relative to the trace's folder when the file is in it,
// absolute otherwise; replay without -c reads it.
func TestGenTraceWritesConfigHeader(t *testing.T) {
	data, err := os.ReadFile(td + "ct.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "lb.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, config, out, header string
	}{
		{"config in the trace's folder", filepath.Join(dir, "lb.yaml"), filepath.Join(dir, "t.jsonl"), "# config: lb.yaml\n"},
		{"trace in a sub-folder", filepath.Join(dir, "lb.yaml"), filepath.Join(dir, "sub", "t.jsonl"), "# config: " + filepath.Join(dir, "lb.yaml") + "\n"},
		{"relative -c", td + "ct.yaml", filepath.Join(dir, "u.jsonl"), "# config: " + filepath.Join(mustAbs(t, td), "ct.yaml") + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.MkdirAll(filepath.Dir(tc.out), 0o755)
			if _, _, err := runLBC(t, "gen-trace", "-c", tc.config, "--packets", "50", "-o", tc.out); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(tc.out)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(got), tc.header) {
				t.Errorf("trace starts %q, want %q", string(got)[:min(len(got), 80)], tc.header)
			}
			out, errw, err := runLBC(t, "replay", "--trace", tc.out, "--summary-only")
			if err != nil {
				t.Fatalf("replay without -c: %v\n%s", err, errw)
			}
			if p, _, _ := replaySummary(t, out); p != 50 || !strings.Contains(errw, "note: configuration from the trace's") {
				t.Errorf("replay without -c: %d packets, stderr:\n%s", p, errw)
			}
		})
	}
	// On stdout (no -o), the path is absolute; without -c, no header.
	out, _, err := runLBC(t, "gen-trace", "-c", td+"ct.yaml", "--packets", "5")
	if err != nil || !strings.HasPrefix(out, "# config: "+filepath.Join(mustAbs(t, td), "ct.yaml")+"\n") {
		t.Errorf("gen-trace on stdout: %v, starts %q", err, out[:min(len(out), 80)])
	}
	out, _, err = runLBC(t, "gen-trace", "--packets", "5")
	if err != nil || strings.HasPrefix(out, "#") {
		t.Errorf("gen-trace of the embedded example: %v, starts %q", err, out[:min(len(out), 80)])
	}
}

// TestReplayHelpNamesOnlyReplayTargets (issue 24, item 10): every datapath
// replay --help names after --target is one replay runs, where it named
// tofino, which it rejected; --target tofino says why it is not one.
func TestReplayHelpNamesOnlyReplayTargets(t *testing.T) {
	help, _, err := runLBC(t, "replay", "--help")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToLower(help), "tofino") {
		t.Errorf("replay --help mentions tofino:\n%s", help)
	}
	named := regexp.MustCompile(`--(target|fallback-target) ([a-z0-9-]+(?:\|[a-z0-9-]+)*)`)
	checked := 0
	for _, m := range named.FindAllStringSubmatch(help, -1) {
		if m[2] == "kind" {
			continue
		}
		for _, kind := range strings.Split(m[2], "|") {
			checked++
			_, switchOK := replayTargets[kind]
			_, fallbackOK := fallbackTargets[kind]
			if m[1] == "target" && !switchOK || m[1] == "fallback-target" && !fallbackOK {
				t.Errorf("replay --help names --%s %s, which replay does not run", m[1], kind)
			}
		}
	}
	if list := regexp.MustCompile(`datapath KIND that runs the packets: ([a-z0-9, -]+)`).FindStringSubmatch(help); list == nil {
		t.Errorf("replay --help lists no --target kinds:\n%s", help)
	} else {
		for _, kind := range strings.Split(strings.TrimSpace(list[1]), ", ") {
			checked++
			if _, ok := replayTargets[kind]; !ok {
				t.Errorf("replay --help lists --target %s, which replay does not run", kind)
			}
		}
	}
	if checked < 8 {
		t.Errorf("only %d target names found in replay --help:\n%s", checked, help)
	}
	_, _, err = runLBC(t, "replay", "-c", td+"ct.yaml", "--trace", td+"r-frag.jsonl", "--target", "tofino")
	if err == nil || !strings.Contains(err.Error(), "--target tofino: replay runs packets through a datapath it drives itself") || !strings.Contains(err.Error(), "Replay on sim-p4") {
		t.Errorf("--target tofino: %v", err)
	}
}
