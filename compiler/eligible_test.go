package compiler

import (
	"reflect"
	"sort"
	"testing"
)

// mem builds members from a compact notation: "P+" healthy primary, "P-"
// unhealthy primary, "F+"/"F-" failover; an optional weight follows ("P+4").
func mem(specs ...string) []Member {
	out := make([]Member, len(specs))
	for i, s := range specs {
		out[i] = Member{Primary: s[0] == 'P', Healthy: s[1] == '+'}
		for _, c := range s[2:] {
			out[i].Weight = out[i].Weight*10 + int(c-'0')
		}
	}
	return out
}

func TestEligible(t *testing.T) {
	unweighted := Policy{}
	weighted := Policy{Weighted: true}
	fo := func(ratio float64, drop bool) Policy {
		return Policy{Failover: true, FailoverRatio: ratio, DropTrafficIfUnhealthy: drop}
	}
	wfo := func(ratio float64, drop bool) Policy {
		p := fo(ratio, drop)
		p.Weighted = true
		return p
	}
	tests := []struct {
		name    string
		pol     Policy
		members []Member
		kind    string
		rule    string
		want    []int
	}{
		{"R-ELIG-1 healthy only", unweighted, mem("P+", "P-", "P+"), DecisionPrimary, "R-ELIG-1", []int{0, 2}},
		{"R-ELIG-1 none healthy: all", unweighted, mem("P-", "P-"), DecisionLastResort, "R-ELIG-1", []int{0, 1}},
		{"R-ELIG-2 healthy w>0", weighted, mem("P+0", "P+3", "P-5"), DecisionPrimary, "R-ELIG-2", []int{1}},
		{"R-ELIG-2 unhealthy w>0 next", weighted, mem("P+0", "P-3", "P-0"), DecisionLastResort, "R-ELIG-2", []int{1}},
		{"R-ELIG-2 healthy w=0 next", weighted, mem("P+0", "P-0", "P+0"), DecisionLastResort, "R-ELIG-2", []int{0, 2}},
		{"R-ELIG-2 unhealthy w=0 last", weighted, mem("P-0", "P-0"), DecisionLastResort, "R-ELIG-2", []int{0, 1}},
		{"R-ELIG-3a no healthy primary", fo(0.5, false), mem("P-", "F+", "F-", "F+"), DecisionFailover, "R-ELIG-3a", []int{1, 3}},
		{"R-ELIG-3b no healthy failover", fo(0.9, false), mem("P+", "P-", "F-"), DecisionPrimary, "R-ELIG-3b", []int{0}},
		{"R-ELIG-3c ratio zero", fo(0, false), mem("P+", "P-", "P-", "F+"), DecisionPrimary, "R-ELIG-3c", []int{0}},
		{"R-ELIG-3d ratio met exactly", fo(0.5, false), mem("P+", "P-", "F+"), DecisionPrimary, "R-ELIG-3d", []int{0}},
		{"R-ELIG-3d 3/10 meets 0.3", fo(0.3, false), mem("P+", "P+", "P+", "P-", "P-", "P-", "P-", "P-", "P-", "P-", "F+"), DecisionPrimary, "R-ELIG-3d", []int{0, 1, 2}},
		{"R-ELIG-3e under ratio", fo(0.6, false), mem("P+", "P-", "F+", "F+"), DecisionFailover, "R-ELIG-3e", []int{2, 3}},
		{"R-ELIG-3 none healthy, drop", fo(0.5, true), mem("P-", "F-"), DecisionDrop, "R-ELIG-3", nil},
		{"R-ELIG-3 none healthy, all primaries never failover", fo(0.5, false), mem("P-", "F-", "P-"), DecisionLastResort, "R-ELIG-3", []int{0, 2}},
		{"R-ELIG-4a healthy w>0 failover only", wfo(0.5, false), mem("P+0", "F+2"), DecisionFailover, "R-ELIG-4a", []int{1}},
		{"R-ELIG-4b", wfo(0.5, false), mem("P+2", "F+0", "F-3"), DecisionPrimary, "R-ELIG-4b", []int{0}},
		{"R-ELIG-4c", wfo(0, false), mem("P+2", "P+0", "F+3"), DecisionPrimary, "R-ELIG-4c", []int{0}},
		{"R-ELIG-4d w=0 counts as not good", wfo(0.5, false), mem("P+2", "P+0", "F+3"), DecisionPrimary, "R-ELIG-4d", []int{0}},
		{"R-ELIG-4e", wfo(0.75, false), mem("P+2", "P+0", "F+3"), DecisionFailover, "R-ELIG-4e", []int{2}},
		{"R-ELIG-4 drop", wfo(0.5, true), mem("P+0", "F-2"), DecisionDrop, "R-ELIG-4", nil},
		{"R-ELIG-4 unhealthy w>0 primaries", wfo(0.5, false), mem("P-2", "F-2", "P+0"), DecisionLastResort, "R-ELIG-4", []int{0}},
		{"R-ELIG-4 unhealthy w>0 failover", wfo(0.5, false), mem("P-0", "F-2", "P+0"), DecisionLastResort, "R-ELIG-4", []int{1}},
		{"R-ELIG-4 healthy w=0 primaries", wfo(0.5, false), mem("P-0", "F+0", "P+0"), DecisionLastResort, "R-ELIG-4", []int{2}},
		{"R-ELIG-4 healthy w=0 failover", wfo(0.5, false), mem("P-0", "F+0", "F-0"), DecisionLastResort, "R-ELIG-4", []int{1}},
		{"R-ELIG-4 unhealthy w=0 primaries", wfo(0.5, false), mem("P-0", "F-0", "P-0"), DecisionLastResort, "R-ELIG-4", []int{0, 2}},
		{"R-ELIG-4 unhealthy w=0 failover", wfo(0.5, false), mem("F-0", "F-0"), DecisionLastResort, "R-ELIG-4", []int{0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Eligible(tt.pol, tt.members)
			if d.Kind != tt.kind || d.Rule != tt.rule || !reflect.DeepEqual(d.Members, tt.want) {
				t.Fatalf("got %s %s %v, want %s %s %v", d.Kind, d.Rule, d.Members, tt.kind, tt.rule, tt.want)
			}
		})
	}
}

// TestRELIG2_AllZeroServedUnweighted: an all-zero-weight set is served as
// if unweighted (R-MAGLEV-2).
func TestRELIG2_AllZeroServedUnweighted(t *testing.T) {
	d := Eligible(Policy{Weighted: true}, mem("P+0", "P+0"))
	if !d.Unweighted {
		t.Fatal("all-zero weighted set not marked unweighted")
	}
	if d := Eligible(Policy{Weighted: true}, mem("P+1", "P+0")); d.Unweighted {
		t.Fatal("set with a positive weight marked unweighted")
	}
}

// TestRELIG5_SeedWalkthrough reproduces the worked example of seed 001 step
// by step: primaries a1, a2 (ig-a), d1, d2 (ig-d); failover b1, b2 (ig-b),
// c1, c2 (ig-c); failoverRatio 0.5.
func TestRELIG5_SeedWalkthrough(t *testing.T) {
	names := []string{"vm-a1", "vm-a2", "vm-d1", "vm-d2", "vm-b1", "vm-b2", "vm-c1", "vm-c2"}
	primary := map[string]bool{"vm-a1": true, "vm-a2": true, "vm-d1": true, "vm-d2": true}
	healthy := map[string]bool{}
	for _, n := range names {
		healthy[n] = true
	}
	pol := Policy{Failover: true, FailoverRatio: 0.5}
	set := func() (Decision, []string) {
		ms := make([]Member, len(names))
		for i, n := range names {
			ms[i] = Member{Primary: primary[n], Healthy: healthy[n]}
		}
		d := Eligible(pol, ms)
		var out []string
		for _, i := range d.Members {
			out = append(out, names[i])
		}
		sort.Strings(out)
		return d, out
	}
	steps := []struct {
		what   string
		change func()
		kind   string
		want   []string
	}{
		{"all healthy", func() {}, DecisionPrimary, []string{"vm-a1", "vm-a2", "vm-d1", "vm-d2"}},
		{"a1, d1 fail", func() { healthy["vm-a1"], healthy["vm-d1"] = false, false }, DecisionPrimary, []string{"vm-a2", "vm-d2"}},
		{"a2 fails: failover (d2 healthy but excluded)", func() { healthy["vm-a2"] = false }, DecisionFailover, []string{"vm-b1", "vm-b2", "vm-c1", "vm-c2"}},
		{"a2 recovers: failback", func() { healthy["vm-a2"] = true }, DecisionPrimary, []string{"vm-a2", "vm-d2"}},
		{"a1 recovers", func() { healthy["vm-a1"] = true }, DecisionPrimary, []string{"vm-a1", "vm-a2", "vm-d2"}},
	}
	for _, s := range steps {
		s.change()
		d, got := set()
		if d.Kind != s.kind || !reflect.DeepEqual(got, s.want) {
			t.Fatalf("%s: got %s %v, want %s %v", s.what, d.Kind, got, s.kind, s.want)
		}
	}
}
