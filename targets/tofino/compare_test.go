package tofino

import (
	"os"
	"strings"
	"testing"
)

// TestSameCompilerOutputIgnoresRunOrder: the comparison make
// check-generated and TestTofinoCompilerOutputs use accepts the orders the
// compiler varies from run to run (extern instances, bf-rt.json lists, the
// snapshot table's id) and context.json's date and run ID, and nothing else.
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
		{"context another compile's date and run", `{"build_date":"Tue Dec  1 02:32:34 2026","run_id":"ce82eb47ab534d45","tables":[{"name":"t","handle":1}]}`,
			`{"build_date":"Tue Dec  1 02:33:13 2026","run_id":"7d702a00766e437c","tables":[{"name":"t","handle":1}]}`, true},
		{"context another handle", `{"run_id":"a","tables":[{"name":"t","handle":1}]}`, `{"run_id":"a","tables":[{"name":"t","handle":2}]}`, false},
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
