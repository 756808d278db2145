// Package mutation holds the mutation score of lbc's models and P4
// programs (issue 32): a fixed list of small, deliberate bugs
// (mutations.txt), each of which some project test must catch.
//
// A mutation names a file and replaces one run of its lines with others.
// The run is matched line by line with leading and trailing blanks
// ignored, and must occur exactly once, so a mutation cannot silently
// apply somewhere else after the code moves: TestMutationsStillApply
// fails instead, and the list is mended with the code. TestMutationScore
// (behind -mutate; `make mutate`) applies each to a scratch copy of the
// repository, runs the tests of its target and reports which were
// killed, by which test, and which survived.
package mutation

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Targets a mutation may name: the reference datapath shared by all
// models (sim), the register conntrack of sim-p4 (sim-p4), the TNA
// conntrack model (sim-tna), and the two P4 programs.
var Targets = []string{"sim", "sim-p4", "sim-tna", "v1model", "tna"}

// Mutation is one deliberate bug.
type Mutation struct {
	ID     string
	Target string // one of Targets
	File   string // slash path from the repository root
	Why    string // what it breaks, in the spec's terms
	// Equivalent, when set, says why no test can tell the mutant from the
	// program (it changes nothing observable); a survivor with a reason.
	Equivalent string
	// Untestable, when set, says why the mutant, which does change what
	// the program does, cannot be told apart by the tools its target has
	// (and what covers the rule instead); a survivor with a reason.
	Untestable string
	Old, New   []string
	Line       int // where the block starts in the list, for errors
}

// Parse reads a list of mutations. Each starts with a line "mutation ID",
// followed by "target:", "file:", "why:" and optionally "equivalent:"
// or "untestable:" lines, then the lines it removes ("- ") and the lines it puts in their
// place ("+ "; none deletes the run). Blank lines and lines starting with
// "#" outside the "-" and "+" lines are ignored.
func Parse(r io.Reader) ([]Mutation, error) {
	var out []Mutation
	var cur *Mutation
	seen := map[string]int{}
	finish := func() error {
		if cur == nil {
			return nil
		}
		m := cur
		switch {
		case m.Target == "":
			return fmt.Errorf("line %d: mutation %q: no target: line (one of %s)", m.Line, m.ID, strings.Join(Targets, ", "))
		case m.File == "":
			return fmt.Errorf("line %d: mutation %q: no file: line", m.Line, m.ID)
		case m.Why == "":
			return fmt.Errorf("line %d: mutation %q: no why: line (what the bug breaks)", m.Line, m.ID)
		case len(m.Old) == 0:
			return fmt.Errorf("line %d: mutation %q: no \"- \" lines (the lines it replaces)", m.Line, m.ID)
		}
		out = append(out, *m)
		return nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trim := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "mutation "):
			if err := finish(); err != nil {
				return nil, err
			}
			id := strings.TrimSpace(strings.TrimPrefix(line, "mutation "))
			if id == "" || strings.ContainsAny(id, " \t") {
				return nil, fmt.Errorf("line %d: mutation ID %q: want one word", n, id)
			}
			if at, ok := seen[id]; ok {
				return nil, fmt.Errorf("line %d: mutation %q is already defined on line %d", n, id, at)
			}
			seen[id] = n
			cur = &Mutation{ID: id, Line: n}
		case trim == "" || strings.HasPrefix(trim, "#"):
		case cur == nil:
			return nil, fmt.Errorf("line %d: %q before the first \"mutation ID\" line", n, trim)
		case strings.HasPrefix(line, "- ") || line == "-":
			if len(cur.New) > 0 {
				return nil, fmt.Errorf("line %d: mutation %q: a \"- \" line after the \"+ \" lines; write the lines removed first", n, cur.ID)
			}
			cur.Old = append(cur.Old, strings.TrimPrefix(strings.TrimPrefix(line, "-"), " "))
		case strings.HasPrefix(line, "+ ") || line == "+":
			cur.New = append(cur.New, strings.TrimPrefix(strings.TrimPrefix(line, "+"), " "))
		default:
			key, val, ok := strings.Cut(trim, ":")
			if !ok {
				return nil, fmt.Errorf("line %d: mutation %q: %q is neither a field (key: value) nor a \"- \"/\"+ \" line", n, cur.ID, trim)
			}
			val = strings.TrimSpace(val)
			switch key {
			case "target":
				if !known(val) {
					return nil, fmt.Errorf("line %d: mutation %q: target %q: want one of %s", n, cur.ID, val, strings.Join(Targets, ", "))
				}
				cur.Target = val
			case "file":
				cur.File = val
			case "why":
				cur.Why = val
			case "equivalent":
				cur.Equivalent = val
			case "untestable":
				cur.Untestable = val
			default:
				return nil, fmt.Errorf("line %d: mutation %q: unknown field %q (target, file, why, equivalent, untestable)", n, cur.ID, key)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := finish(); err != nil {
		return nil, err
	}
	return out, nil
}

func known(t string) bool {
	for _, k := range Targets {
		if k == t {
			return true
		}
	}
	return false
}

// Apply returns src with m applied: the one run of lines equal to m.Old
// (blanks around each line ignored) replaced by m.New, each new line
// indented as the first line it replaces.
func Apply(src string, m Mutation) (string, error) {
	lines := strings.Split(src, "\n")
	at, count := -1, 0
	for i := 0; i+len(m.Old) <= len(lines); i++ {
		match := true
		for j, o := range m.Old {
			if strings.TrimSpace(lines[i+j]) != strings.TrimSpace(o) {
				match = false
				break
			}
		}
		if match {
			if count == 0 {
				at = i
			}
			count++
		}
	}
	switch {
	case count == 0:
		return "", fmt.Errorf("mutation %q: %s: the lines it replaces are not there (first: %q); mend mutations.txt beside the code", m.ID, m.File, strings.TrimSpace(m.Old[0]))
	case count > 1:
		return "", fmt.Errorf("mutation %q: %s: the lines it replaces occur %d times; add a line of context so they occur once", m.ID, m.File, count)
	}
	first := lines[at]
	indent := first[:len(first)-len(strings.TrimLeft(first, " \t"))]
	repl := make([]string, 0, len(m.New))
	for _, n := range m.New {
		repl = append(repl, indent+strings.TrimSpace(n))
	}
	out := append(append(append([]string{}, lines[:at]...), repl...), lines[at+len(m.Old):]...)
	return strings.Join(out, "\n"), nil
}
