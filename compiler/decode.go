package compiler

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/lbc-dev/lbc/internal/spelling"
	"github.com/lbc-dev/lbc/internal/strictyaml"
	"gopkg.in/yaml.v3"
)

// Problem is one thing wrong with a configuration file: where (line and
// field path), and what to do about it.
type Problem struct {
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	Path string `json:"path,omitempty"`
	Msg  string `json:"message"`
}

func (p Problem) String() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		b.WriteByte(':')
	}
	if p.Line > 0 {
		b.WriteString(strconv.Itoa(p.Line))
		b.WriteByte(':')
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Problems is every problem of one file; it is an error when non-empty.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Report is the problems as one message about subject (a file, a target):
// "lb.yaml: 2 problems:" and then one per line.
func (ps Problems) Report(subject string) string {
	return fmt.Sprintf("%s: %s:\n%s", subject, spelling.Count(len(ps), "problem"), ps.Error())
}

// Decoded is a configuration file parsed and validated.
type Decoded struct {
	Config   *Config
	Warnings Problems
	// file and loc place the problems found later (CheckTarget,
	// CheckCapacity) at their line.
	file string
	loc  locator
}

// Load parses and validates a configuration. It reports every problem of
// the file at once, as Problems in line order, with line numbers and field
// paths: fields it cannot decode (unknown, or of the wrong type) next to
// what validation finds in the rest.
func Load(file string, data []byte) (*Decoded, error) {
	var cfg Config
	root, issues := strictyaml.Decode(data, &cfg, configSchema)
	if root == nil { // not YAML: nothing to check
		return nil, decodeProblems(file, root, issues)
	}
	if len(issues) == 0 && strictyaml.Empty(root) {
		return nil, Problems{{File: file, Msg: "empty configuration; start from examples/ or run `lbc compile` to see the embedded default"}}
	}
	if line, ok := looksLikeHealth(root); ok {
		return nil, Problems{{File: file, Line: line, Msg: healthNotConfig}}
	}
	v := validate(&cfg)
	loc := locator{root: root, unset: strictyaml.UnsetPaths(issues)}
	ps := append(decodeProblems(file, root, issues), v.errs.located(file, loc)...)
	if len(ps) > 0 {
		ps.sortByLine()
		return nil, ps
	}
	return &Decoded{Config: &cfg, Warnings: v.warns.located(file, loc), file: file, loc: loc}, nil
}

// decodeProblems turns the decoder's issues into Problems with the field
// path written as validate writes it.
func decodeProblems(file string, root *yaml.Node, issues []strictyaml.Issue) Problems {
	ps := make(Problems, len(issues))
	for i, x := range issues {
		ps[i] = Problem{File: file, Line: x.Line, Path: pathOf(root, x.Keys).label, Msg: x.Msg}
	}
	return ps
}

// YAMLProblems are strictyaml's issues as problems of file, each with its
// line and the field path as strictyaml.KeyPath writes it: for the YAML
// files beside lb.yaml (bgp.yaml, fleet.yaml), whose lists have no named
// items to label a path with.
func YAMLProblems(file string, issues []strictyaml.Issue) Problems {
	ps := make(Problems, len(issues))
	for i, x := range issues {
		ps[i] = Problem{File: file, Line: x.Line, Path: strictyaml.KeyPath(x.Keys), Msg: x.Msg}
	}
	return ps
}

// itemKinds names the items of lb.yaml's lists in paths, as validate does.
var itemKinds = map[string]string{"services": "service", "backends": "group", "endpoints": "endpoint"}

// pathOf rebuilds the position of a field path in the tree, naming list
// items by their name field.
func pathOf(root *yaml.Node, keys []any) at {
	a := at{}
	for i := 0; i < len(keys); i++ {
		k := fmt.Sprint(keys[i])
		if i+1 < len(keys) {
			if idx, ok := keys[i+1].(int); ok {
				name := ""
				if kind := itemKinds[k]; kind != "" {
					name = strictyaml.Name(root, keys[:i+2])
				}
				a = a.item(k, idx, itemKinds[k], name)
				i++
				continue
			}
		}
		a = a.field(k)
	}
	return a
}

// sortByLine orders problems by line (stable: the order of the checks on
// one line stays); problems without a line go last.
func (ps Problems) sortByLine() {
	sort.SliceStable(ps, func(i, j int) bool {
		li, lj := ps[i].Line, ps[j].Line
		if li == 0 || lj == 0 {
			return li != 0 && lj == 0
		}
		return li < lj
	})
}

// Summary returns the problems as lines for people, at most max of them:
// problems with the same message (one warning for each of many services)
// are one line that names how many more there are and the first few.
func (ps Problems) Summary(max int) []string {
	var order []string
	groups := map[string][]Problem{}
	for _, p := range ps {
		if _, ok := groups[p.Msg]; !ok {
			order = append(order, p.Msg)
		}
		groups[p.Msg] = append(groups[p.Msg], p)
	}
	var out []string
	shown := 0
	for i, msg := range order {
		if i == max {
			out = append(out, fmt.Sprintf("… %d more not shown (%d in all)", len(ps)-shown, len(ps)))
			break
		}
		shown += len(groups[msg])
		g := groups[msg]
		line := g[0].String()
		if len(g) > 1 {
			var more []string
			for _, p := range g[1:min(len(g), 4)] {
				w := p.Path
				if p.Line > 0 {
					w += fmt.Sprintf(" (line %d)", p.Line)
				}
				more = append(more, w)
			}
			if len(g) > 4 {
				more = append(more, "…")
			}
			line += fmt.Sprintf(" [the same for %d more: %s]", len(g)-1, strings.Join(more, ", "))
		}
		out = append(out, line)
	}
	return out
}

var configSchema = strictyaml.Schema{
	Doc:      "lb.yaml",
	SizeHint: "the largest configuration a datapath holds (16384 services, 65536 endpoints) is 4 to 8 MiB",
	Labels: map[string]string{
		"Config":       "the top level",
		"Service":      "a service",
		"BackendGroup": "a backend group",
		"Endpoint":     "an endpoint",
		"BackendState": "an endpoint's state (name: {healthy: true|false, weight: 0..1000})",
		"Ports":        "ports",
	},
}

// place gives problems found after Load their file and line, in line order.
func (d *Decoded) place(is issueList) Problems {
	ps := is.located(d.file, d.loc)
	ps.sortByLine()
	return ps
}

// locator finds the line of a field path in the parsed YAML tree, and
// knows which paths the decoder left unset.
type locator struct {
	root  *yaml.Node
	unset strictyaml.Unset
}

func (l locator) line(keys []any) int { return strictyaml.LineOf(l.root, keys) }
