package health

import (
	"errors"
	"testing"
)

func TestTrackerThresholds(t *testing.T) {
	ok := Result{OK: true}
	bad := Result{Err: errors.New("refused")}
	for _, tc := range []struct {
		name               string
		healthy, unhealthy int
		seq                []Result
		want               []bool // health after each result
		changes            int
	}{
		{"first result decides", 2, 2, []Result{bad}, []bool{false}, 1},
		{"two failures to go down", 2, 2, []Result{ok, bad, bad}, []bool{true, true, false}, 2},
		{"a success resets the streak", 2, 2, []Result{ok, bad, ok, bad, ok}, []bool{true, true, true, true, true}, 1},
		{"three successes to come back", 3, 1, []Result{ok, bad, ok, ok, ok}, []bool{true, false, false, false, true}, 3},
		{"flapping never crosses 2", 2, 2, []Result{ok, bad, ok, bad, ok, bad, ok, bad}, []bool{true, true, true, true, true, true, true, true}, 1},
		{"threshold 1 follows every probe", 1, 1, []Result{ok, bad, ok, bad}, []bool{true, false, true, false}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr Tracker
			changes := 0
			for i, r := range tc.seq {
				if tr.Observe(r, tc.healthy, tc.unhealthy) {
					changes++
				}
				if tr.Healthy != tc.want[i] {
					t.Fatalf("after result %d: healthy %v, want %v", i, tr.Healthy, tc.want[i])
				}
			}
			if changes != tc.changes {
				t.Fatalf("%d changes, want %d", changes, tc.changes)
			}
		})
	}
}

// Failing counts failed probes in a row from the first one, whatever the
// state: the first failure of a healthy backend is 1 (not the streak 0
// that a threshold of 1 leaves after it turned the backend unhealthy).
func TestTrackerFailing(t *testing.T) {
	ok := Result{OK: true}
	bad := Result{Err: errors.New("refused")}
	for _, tc := range []struct {
		name               string
		healthy, unhealthy int
		seq                []Result
		want               []int
	}{
		{"threshold 1", 1, 1, []Result{ok, bad, bad, ok, bad}, []int{0, 1, 2, 0, 1}},
		{"threshold 3", 2, 3, []Result{ok, bad, bad, bad, bad, ok, ok}, []int{0, 1, 2, 3, 4, 0, 0}},
		{"first probe fails", 2, 2, []Result{bad, bad}, []int{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr Tracker
			for i, r := range tc.seq {
				tr.Observe(r, tc.healthy, tc.unhealthy)
				if tr.Failing != tc.want[i] {
					t.Fatalf("after result %d: failing %d, want %d", i, tr.Failing, tc.want[i])
				}
			}
		})
	}
}

// R-HC-1, R-ELIG-2: a new weight from a good probe is a change at once;
// a failed probe keeps the last weight.
func TestTrackerWeight(t *testing.T) {
	var tr Tracker
	if !tr.Observe(Result{OK: true, Weight: 5, HasWeight: true}, 2, 2) {
		t.Fatal("first probe is a change")
	}
	if tr.Observe(Result{OK: true, Weight: 5, HasWeight: true}, 2, 2) {
		t.Fatal("same weight is no change")
	}
	if !tr.Observe(Result{OK: true, Weight: 7, HasWeight: true}, 2, 2) || tr.Weight != 7 {
		t.Fatalf("weight 5→7 is a change; weight now %d", tr.Weight)
	}
	tr.Observe(Result{Err: errors.New("bad header")}, 2, 2)
	tr.Observe(Result{Err: errors.New("bad header")}, 2, 2)
	if tr.Healthy || tr.Weight != 7 || !tr.HasWeight {
		t.Fatalf("after 2 failures: %+v; want unhealthy with weight 7 kept", tr)
	}
}
