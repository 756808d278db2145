package policy

import "fmt"

// Decision is the outcome of one run of the chain.
type Decision struct {
	// Site is the chosen site; empty when there is none.
	Site string `json:"site"`
	// DecidedBy is the step that left one candidate; empty when there was
	// only one candidate to begin with, or none.
	DecidedBy Step   `json:"decidedBy,omitempty"`
	Reason    string `json:"reason"`
	// Trace has one entry per configured step, in order.
	Trace []StepResult `json:"trace"`
	// Next is the state after this choice; the caller keeps it only when
	// the choice is used (a second-choice run for extra answers does not).
	Next State `json:"-"`
}

// Run runs the configured steps over in.Sites. c must pass Check.
func Run(c Config, in Input) Decision {
	var d Decision
	cands := in.Sites
	staticRan := false
	for _, s := range c.Steps {
		if len(cands) <= 1 {
			r := StepResult{Step: s, ID: s.ID(), In: names(cands), Out: names(cands), Outcome: Skipped, Reason: "one candidate left"}
			if len(cands) == 0 {
				r.Reason = "no candidate left"
			}
			d.Trace = append(d.Trace, r)
			continue
		}
		out, r := RunStep(c, s, in, cands)
		d.Trace = append(d.Trace, r)
		if s == Static {
			staticRan = true
		}
		if r.Outcome == Decided && d.DecidedBy == "" {
			d.DecidedBy = s
			d.Reason = fmt.Sprintf("%s %s: %s", s.ID(), s, r.Reason)
		}
		if r.Outcome == Emptied {
			d.Reason = fmt.Sprintf("%s %s: %s", s.ID(), s, r.Reason)
		}
		cands = out
	}
	d.Next = in.State.Clone()
	switch len(cands) {
	case 0:
		if d.Reason == "" {
			d.Reason = "no site configured for the name"
		}
		return d
	case 1:
		d.Site = cands[0].Name
		if d.DecidedBy == "" {
			d.Reason = "only one site: " + d.Site
		}
	default: // unreachable with a final step; keep the first for safety
		d.Site = cands[0].Name
		d.Reason = "no step decided; first candidate"
	}
	d.Next.Selected[d.Site]++
	if staticRan {
		d.Next.Next++
	}
	return d
}
