// Package strictyaml decodes configuration files strictly — an unknown
// field is an error — and turns yaml.v3's messages into ones that name the
// field and say what is allowed, with line numbers. lb.yaml, health.yaml
// and gslb.yaml share it.
package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Issue is one problem of a file: its line (0 when unknown) and message.
type Issue struct {
	Line int
	Msg  string
}

// Schema names a configuration's Go types for messages.
type Schema struct {
	// Doc is the file's usual name, e.g. "lb.yaml".
	Doc string
	// Types maps Go type names (as yaml.v3 prints them, without package)
	// to their types, whose yaml tags list the known fields.
	Types map[string]reflect.Type
	// Labels names a type for people ("a service"); default: its name.
	Labels map[string]string
	// Fields overrides the known fields of a type (custom unmarshalers).
	Fields map[string][]string
	// ValueLabel names what a Go type wants, for types the default does not
	// know ("a string" for an enum type); optional.
	ValueLabel func(goType string) (string, bool)
}

var (
	lineRe     = regexp.MustCompile(`line (\d+)`)
	notFoundRe = regexp.MustCompile(`^line (\d+): field (\S+) not found in type \w+\.(\w+)$`)
	unmarshRe  = regexp.MustCompile(`^line (\d+): cannot unmarshal !!(\w+) ` + "`" + `?([^` + "`" + `]*)` + "`" + `? into (\S+)$`)
)

// Decode parses data into out. It returns the YAML tree, for LineOf, and
// every problem of the file at once; out is only meaningful without issues.
// An empty file has no issues and leaves out alone (see Empty).
func Decode(data []byte, out any, s Schema) (*yaml.Node, []Issue) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, []Issue{{Line: errLine(err.Error()), Msg: cleanErr(err.Error())}}
	}
	if len(root.Content) == 0 {
		return &root, nil // empty: the caller decides (see Empty)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var issues []Issue
	if err := dec.Decode(out); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, []Issue{{Line: errLine(err.Error()), Msg: cleanErr(err.Error())}}
		}
		for _, e := range te.Errors {
			issues = append(issues, s.typeIssue(e))
		}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		issues = append(issues, Issue{Line: extra.Line, Msg: fmt.Sprintf("a second YAML document follows; %s holds one document", s.Doc)})
	}
	return &root, issues
}

// Empty reports whether a decoded tree holds no document (an empty file or
// only comments).
func Empty(root *yaml.Node) bool { return root == nil || len(root.Content) == 0 }

func errLine(s string) int {
	if m := lineRe.FindStringSubmatch(s); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

func cleanErr(s string) string {
	s = strings.TrimPrefix(s, "yaml: ")
	s = strings.TrimPrefix(s, "unmarshal errors:\n  ")
	return strings.TrimSpace(strings.TrimPrefix(lineRe.ReplaceAllString(s, ""), ":"))
}

func (s Schema) typeIssue(e string) Issue {
	if m := notFoundRe.FindStringSubmatch(e); m != nil {
		n, _ := strconv.Atoi(m[1])
		return Issue{Line: n, Msg: fmt.Sprintf("unknown field %q in %s; known fields: %s", m[2], s.label(m[3]), strings.Join(s.known(m[3]), ", "))}
	}
	if m := unmarshRe.FindStringSubmatch(e); m != nil {
		n, _ := strconv.Atoi(m[1])
		return Issue{Line: n, Msg: fmt.Sprintf("value %q is a %s, but this field wants %s", m[3], m[2], s.valueLabel(m[4]))}
	}
	return Issue{Line: errLine(e), Msg: cleanErr(e)}
}

func (s Schema) label(goName string) string {
	if l, ok := s.Labels[goName]; ok {
		return l
	}
	if goName == "" {
		return goName
	}
	return strings.ToLower(goName[:1]) + goName[1:]
}

func (s Schema) known(goName string) []string {
	if f, ok := s.Fields[goName]; ok {
		return f
	}
	t, ok := s.Types[goName]
	if !ok {
		return nil
	}
	var out []string
	for i := 0; i < t.NumField(); i++ {
		if tag := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]; tag != "" && tag != "-" {
			out = append(out, tag)
		}
	}
	sort.Strings(out)
	return out
}

func (s Schema) valueLabel(t string) string {
	if s.ValueLabel != nil {
		if l, ok := s.ValueLabel(t); ok {
			return l
		}
	}
	switch {
	case strings.Contains(t, "uint"):
		return "a whole number >= 0"
	case strings.Contains(t, "int"):
		return "a whole number"
	case strings.Contains(t, "float"):
		return "a number"
	case t == "bool" || t == "*bool":
		return "true or false"
	case strings.HasSuffix(t, "string"):
		return "a string"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	}
	return "a mapping"
}

// LineOf returns the line of the deepest node of a field path (map keys
// and list indexes) that exists in the tree.
func LineOf(root *yaml.Node, keys []any) int {
	if root == nil {
		return 0
	}
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	best := n.Line
	for _, k := range keys {
		var next *yaml.Node
		switch k := k.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == k {
						best, next = n.Content[i].Line, n.Content[i+1]
						break
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && k < len(n.Content) {
				next = n.Content[k]
				best = next.Line
			}
		}
		if next == nil {
			return best
		}
		n = next
	}
	return best
}
