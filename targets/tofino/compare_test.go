package tofino

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSameCompilerOutputIgnoresRunOrder: the comparison make
// check-generated and TestTofinoCompilerOutputs use accepts the orders the
// compiler varies from run to run (the snapshot extern instances; in
// bf-rt.json the place of tables in the list, depends_on, the snapshot cfg
// table's id) and context.json's date, run ID and compiler version, and
// nothing else: an order that means something (key fields, action
// parameters, stage placements) is kept.
//
// The Snapshot externs are in the P4Info p4c-barefoot writes without
// --p4runtime-force-std-externs (runtime/testdata); with it (the committed
// ones) they are left out.
func TestSameCompilerOutputIgnoresRunOrder(t *testing.T) {
	p4info, err := os.ReadFile("../../runtime/testdata/tofino-barefoot-externs.p4info.txtpb")
	if err != nil {
		t.Fatal(err)
	}
	std, err := os.ReadFile(tnaP4Info)
	if err != nil {
		t.Fatal(err)
	}
	// The Snapshot extern's two instances, swapped as another run writes them.
	s := string(p4info)
	at := strings.Index(s, "  extern_type_name: \"Snapshot\"\n")
	if at < 0 {
		t.Fatal("no Snapshot extern in the P4Info without std externs")
	}
	head, rest := s[:at], s[at:]
	parts := strings.SplitAfter(rest, "\n  instances {\n")
	if len(parts) != 3 {
		t.Fatalf("Snapshot extern with %d instances, want 2", len(parts)-1)
	}
	first := strings.TrimSuffix(parts[1], "  instances {\n")
	end := strings.Index(parts[2], "\n  }\n}\n") + len("\n  }\n")
	swapped := head + parts[0] + parts[2][:end] + "  instances {\n" + first + parts[2][end:]
	if swapped == s {
		t.Fatal("the swap changed nothing")
	}
	for _, tc := range []struct {
		name string
		a, b string
		want bool
	}{
		{"P4Info itself", s, s, true},
		{"P4Info with its snapshots swapped", s, swapped, true},
		{"the same program's P4Info with std externs", s, string(std), false},
		{"bf-rt lists reordered, snapshot id changed", `{"tables":[{"name":"pipe.snapshot.cfg","id":1,"depends_on":[2,3]},{"name":"t","id":9}]}`,
			`{"tables":[{"name":"t","id":9},{"name":"pipe.snapshot.cfg","id":4,"depends_on":[3,2]}]}`, true},
		{"bf-rt another table's id", `{"tables":[{"name":"t","id":9}]}`, `{"tables":[{"name":"t","id":8}]}`, false},
		{"bf-rt another snapshot trigger id", `{"tables":[{"name":"pipe.snapshot.ingress_trigger","id":1}]}`, `{"tables":[{"name":"pipe.snapshot.ingress_trigger","id":2}]}`, false},
		{"bf-rt key fields in another order", `{"tables":[{"name":"t","key":[{"id":1,"name":"a"},{"id":2,"name":"b"}]}]}`,
			`{"tables":[{"name":"t","key":[{"id":2,"name":"b"},{"id":1,"name":"a"}]}]}`, false},
		{"bf-rt action parameters in another order", `{"tables":[{"name":"t","action_specs":[{"id":5,"data":[{"id":1,"name":"port"},{"id":2,"name":"dmac"}]}]}]}`,
			`{"tables":[{"name":"t","action_specs":[{"id":5,"data":[{"id":2,"name":"dmac"},{"id":1,"name":"port"}]}]}]}`, false},
		{"bf-rt action specs in another order", `{"tables":[{"name":"t","action_specs":[{"id":5},{"id":6}]}]}`,
			`{"tables":[{"name":"t","action_specs":[{"id":6},{"id":5}]}]}`, false},
		{"context another compile's date and run", `{"build_date":"Tue Dec  1 02:32:34 2026","run_id":"ce82eb47ab534d45","tables":[{"name":"t","handle":1}]}`,
			`{"build_date":"Tue Dec  1 02:33:13 2026","run_id":"7d702a00766e437c","tables":[{"name":"t","handle":1}]}`, true},
		{"context another handle", `{"run_id":"a","tables":[{"name":"t","handle":1}]}`, `{"run_id":"a","tables":[{"name":"t","handle":2}]}`, false},
		{"context another compiler build", `{"compiler_version":"9.13.4 ()","tables":[]}`, `{"compiler_version":"9.13.4 (abc)","tables":[]}`, true},
		{"context match key fields in another order", `{"tables":[{"name":"t","match_key_fields":[{"name":"a","position":0},{"name":"b","position":1}]}]}`,
			`{"tables":[{"name":"t","match_key_fields":[{"name":"b","position":1},{"name":"a","position":0}]}]}`, false},
		{"context stage tables in another order", `{"tables":[{"name":"ring","match_attributes":{"stage_tables":[{"stage_number":4,"size":92160},{"stage_number":5,"size":40960}]}}]}`,
			`{"tables":[{"name":"ring","match_attributes":{"stage_tables":[{"stage_number":5,"size":40960},{"stage_number":4,"size":92160}]}}]}`, false},
		{"context tables in another order", `{"tables":[{"name":"a"},{"name":"b"}]}`, `{"tables":[{"name":"b"},{"name":"a"}]}`, false},
	} {
		name := "lb.p4info.txtpb"
		if strings.HasPrefix(tc.name, "bf-rt") {
			name = "bf-rt.json"
		}
		if strings.HasPrefix(tc.name, "context") {
			name = "context.json"
		}
		got, err := SameCompilerOutput(name, []byte(tc.a), []byte(tc.b))
		if err != nil || got != tc.want {
			t.Errorf("%s: same %v (%v), want %v", tc.name, got, err, tc.want)
		}
	}
}

// TestSameCompilerOutputOnCommittedBfrt: on the committed bf-rt.json, what
// another run of p4c-barefoot writes (the snapshot tables in the other
// order, the cfg table with the other snapshot's id, its depends_on
// reversed) is the same output; the ring's key fields swapped is not.
func TestSameCompilerOutputOnCommittedBfrt(t *testing.T) {
	for _, c := range Compiles {
		b, err := os.ReadFile(filepath.Join("../../p4/tna/build", c.Sub, "bf-rt.json"))
		if err != nil {
			t.Fatal(err)
		}
		rerun := jsonEdit(t, b, func(m map[string]any) {
			ts := m["tables"].([]any)
			var snaps, rest []any
			for _, x := range ts {
				tm := x.(map[string]any)
				if strings.Contains(tm["name"].(string), ".snapshot.") {
					if strings.HasSuffix(tm["name"].(string), ".cfg") {
						tm["id"] = 12345
						deps := tm["depends_on"].([]any)
						for i, j := 0, len(deps)-1; i < j; i, j = i+1, j-1 {
							deps[i], deps[j] = deps[j], deps[i]
						}
					}
					snaps = append([]any{x}, snaps...)
					continue
				}
				rest = append(rest, x)
			}
			if len(snaps) < 2 {
				t.Fatalf("%s: %d snapshot tables", c.Target, len(snaps))
			}
			m["tables"] = append(snaps, rest...)
		})
		swapped := jsonEdit(t, b, func(m map[string]any) {
			for _, x := range m["tables"].([]any) {
				if tm := x.(map[string]any); tm["name"] == "pipe.LbIngress.vip_port" {
					k := tm["key"].([]any)
					k[1], k[2] = k[2], k[1]
				}
			}
		})
		for _, tc := range []struct {
			name  string
			other []byte
			want  bool
		}{{"another run's order", rerun, true}, {"VIP key swapped", swapped, false}} {
			if got, err := SameCompilerOutput("bf-rt.json", b, tc.other); err != nil || got != tc.want {
				t.Errorf("%s: %s: same %v (%v), want %v", c.Target, tc.name, got, err, tc.want)
			}
		}
	}
}

func jsonEdit(t *testing.T, b []byte, edit func(map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
