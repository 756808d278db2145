package compiler

// Decision kinds: which branch of R-ELIG chose the eligible set.
const (
	DecisionPrimary    = "primary"
	DecisionFailover   = "failover"
	DecisionLastResort = "last-resort"
	DecisionDrop       = "drop"
)

// Member is one endpoint as the eligible-set rules see it.
type Member struct {
	Primary bool // its group is not a failover group
	Healthy bool
	Weight  int // only read when the policy is weighted
}

// Policy is the part of a service that the eligible-set rules read.
type Policy struct {
	Failover               bool // a failoverPolicy is configured
	FailoverRatio          float64
	DropTrafficIfUnhealthy bool
	Weighted               bool // localityLbPolicy WEIGHTED_MAGLEV
}

// Decision is an eligible set and the rule that chose it.
type Decision struct {
	Kind string `json:"decision"`
	Rule string `json:"rule"`
	// Members indexes the input members that may take new connections.
	Members []int `json:"-"`
	// Unweighted is set when the members are served as if unweighted: the
	// policy is not weighted, or every member has weight 0 (R-MAGLEV-2).
	Unweighted bool `json:"-"`
}

// Side reports the side the decision puts the service on: failover when
// true. Only the rules that pick healthy backends decide a side
// (R-ELIG-3a–e, R-ELIG-4a–e; without a failover policy every decision of
// R-ELIG-1/2 that picks healthy backends is the primary side). The
// last-resort sets and the drop set decide none (decided is false): the
// service keeps the side it was on, so entering or leaving them is no
// failover or failback (R-ELIG-5) and flushes nothing (R-EPOCH).
func (d Decision) Side() (failover, decided bool) {
	switch d.Kind {
	case DecisionPrimary:
		return false, true
	case DecisionFailover:
		return true, true
	}
	return false, false
}

// Eligible computes the set of endpoints that may take a new connection,
// exactly per R-ELIG-1..4.
func Eligible(p Policy, ms []Member) Decision {
	// "good" is healthy under R-ELIG-1/3 and healthy with w>0 under R-ELIG-2/4.
	good := func(m Member) bool { return m.Healthy && (!p.Weighted || m.Weight > 0) }
	pick := func(f func(Member) bool) []int {
		var out []int
		for i, m := range ms {
			if f(m) {
				out = append(out, i)
			}
		}
		return out
	}
	d := func(kind, rule string, set []int) Decision {
		uw := !p.Weighted
		if !uw && len(set) > 0 {
			uw = true
			for _, i := range set {
				if ms[i].Weight > 0 {
					uw = false
					break
				}
			}
		}
		return Decision{Kind: kind, Rule: rule, Members: set, Unweighted: uw}
	}
	firstNonEmpty := func(kind, rule string, tiers ...func(Member) bool) Decision {
		for _, t := range tiers {
			if set := pick(t); len(set) > 0 {
				return d(kind, rule, set)
			}
		}
		return d(DecisionDrop, rule, nil)
	}

	if !p.Failover {
		if !p.Weighted {
			if set := pick(good); len(set) > 0 {
				return d(DecisionPrimary, "R-ELIG-1", set)
			}
			return d(DecisionLastResort, "R-ELIG-1", pick(func(Member) bool { return true }))
		}
		if set := pick(good); len(set) > 0 {
			return d(DecisionPrimary, "R-ELIG-2", set)
		}
		return firstNonEmpty(DecisionLastResort, "R-ELIG-2",
			func(m Member) bool { return !m.Healthy && m.Weight > 0 },
			func(m Member) bool { return m.Healthy && m.Weight == 0 },
			func(m Member) bool { return !m.Healthy && m.Weight == 0 },
		)
	}

	rule := "R-ELIG-3"
	if p.Weighted {
		rule = "R-ELIG-4"
	}
	goodPrimary := pick(func(m Member) bool { return m.Primary && good(m) })
	goodFailover := pick(func(m Member) bool { return !m.Primary && good(m) })
	if len(goodPrimary)+len(goodFailover) > 0 {
		switch {
		case len(goodPrimary) == 0:
			return d(DecisionFailover, rule+"a", goodFailover)
		case len(goodFailover) == 0:
			return d(DecisionPrimary, rule+"b", goodPrimary)
		case p.FailoverRatio == 0:
			return d(DecisionPrimary, rule+"c", goodPrimary)
		}
		allPrimary := len(pick(func(m Member) bool { return m.Primary }))
		// hp/ap ≥ ratio, divided as the spec writes it so that 3/10 ≥ 0.3 holds.
		if float64(len(goodPrimary))/float64(allPrimary) >= p.FailoverRatio {
			return d(DecisionPrimary, rule+"d", goodPrimary)
		}
		return d(DecisionFailover, rule+"e", goodFailover)
	}
	if p.DropTrafficIfUnhealthy {
		return d(DecisionDrop, rule, nil)
	}
	if !p.Weighted {
		return d(DecisionLastResort, rule, pick(func(m Member) bool { return m.Primary }))
	}
	return firstNonEmpty(DecisionLastResort, rule,
		func(m Member) bool { return m.Primary && !m.Healthy && m.Weight > 0 },
		func(m Member) bool { return !m.Primary && !m.Healthy && m.Weight > 0 },
		func(m Member) bool { return m.Primary && m.Healthy && m.Weight == 0 },
		func(m Member) bool { return !m.Primary && m.Healthy && m.Weight == 0 },
		func(m Member) bool { return m.Primary && !m.Healthy && m.Weight == 0 },
		func(m Member) bool { return !m.Primary && !m.Healthy && m.Weight == 0 },
	)
}
