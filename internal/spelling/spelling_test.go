package spelling

import (
	"fmt"
	"testing"
)

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"abc", "", 3},
		{"", "abc", 3},
		{"target", "target", 0},
		{"tagret", "target", 2},      // two substitutions
		{"valdate", "validate", 1},   // an insertion
		{"validatee", "validate", 1}, // a deletion
		{"kitten", "sitting", 3},
	} {
		if got := Distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := Distance(tc.b, tc.a); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestNearest(t *testing.T) {
	cmds := []string{"compile", "detach", "explain", "push", "run", "status", "validate"}
	for _, tc := range []struct {
		name, want string
	}{
		{"valdate", "validate"},
		{"VALIDATE", "validate"}, // case alone
		{"stauts", "status"},
		{"pusj", "push"},
		{"deploy", ""}, // nothing within two edits
		{"r", "run"},   // two insertions
		{"x", ""},      // three edits from "run" and "push"
	} {
		if got := Nearest(cmds, tc.name); got != tc.want {
			t.Errorf("Nearest(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func ExampleNearest() {
	fmt.Println(Nearest([]string{"sessionAffinity", "ringSize"}, "sesionAffinity"))
	// Output: sessionAffinity
}

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 peers"}, {1, "1 peer"}, {2, "2 peers"}, {1000, "1000 peers"}} {
		if got := Count(tc.n, "peer"); got != tc.want {
			t.Errorf("Count(%d, peer) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
