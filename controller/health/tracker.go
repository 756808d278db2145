package health

// Tracker turns a sequence of probe results into health, the way
// thresholds do: a healthy backend becomes unhealthy after Unhealthy
// consecutive failures, an unhealthy one healthy after Healthy consecutive
// successes. The first result decides the initial state, so that a
// controller that starts (or restarts) programs the health it sees at once.
// Tracker is a value type with no I/O.
type Tracker struct {
	Known     bool // at least one probe has completed
	Healthy   bool
	Weight    int
	HasWeight bool
	// Consecutive results against the current state (reset when they
	// change it).
	Streak int
	// Failing is the number of consecutive failed probes, the last one
	// included; 0 after a success. It is what a log line about a failed
	// probe reports.
	Failing int
}

// Observe records one result with thresholds (healthy, unhealthy) and
// reports whether the health or the weight changed.
func (t *Tracker) Observe(r Result, healthyThreshold, unhealthyThreshold int) bool {
	if r.OK {
		t.Failing = 0
	} else {
		t.Failing++
	}
	changed := false
	if r.OK && r.HasWeight && (!t.HasWeight || r.Weight != t.Weight) {
		// A weight read from a good probe applies at once: it is what the
		// backend asks for, not a symptom that needs confirming.
		t.Weight, t.HasWeight = r.Weight, true
		changed = true
	}
	if !t.Known {
		t.Known, t.Healthy, t.Streak = true, r.OK, 0
		return true
	}
	if r.OK == t.Healthy {
		t.Streak = 0
		return changed
	}
	t.Streak++
	need := unhealthyThreshold
	if r.OK {
		need = healthyThreshold
	}
	if t.Streak >= max(need, 1) {
		t.Healthy, t.Streak = r.OK, 0
		return true
	}
	return changed
}
