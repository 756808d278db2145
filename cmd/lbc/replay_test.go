package main

import (
	"encoding/json"
	"os"
	"path/filepath"
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
	for _, want := range []string{`LOOKUP`, `service "web"`, "R-CT-1", "R-AFF", "5-tuple c6336407cb00710a0610920050", "R-HASH", "R-ELIG-3d", "R-MAGLEV-1", "slot ", "ENCAP", "IP-in-IP: outer 192.0.2.1", "verdict forward to vm-"} {
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
	if _, _, err := runLBC(t, "replay", "-c", td+"ct.yaml", "--trace", td+"r-frag.jsonl", "--target", "sim", "--fallback-target", "sim"); err == nil || !strings.Contains(err.Error(), "use it with --target bmv2, sim-p4, tofino") {
		t.Errorf("--target sim --fallback-target sim: %v", err)
	}
}
