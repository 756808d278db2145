package compiler

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

// Decoded is a configuration file parsed and validated.
type Decoded struct {
	Config   *Config
	Warnings Problems
}

// Load parses and validates a configuration. It reports every problem of
// the file at once, as Problems, with line numbers where the file has them.
func Load(file string, data []byte) (*Decoded, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, Problems{{File: file, Line: yamlErrLine(err), Msg: cleanYAMLErr(err)}}
	}
	if len(root.Content) == 0 {
		return nil, Problems{{File: file, Msg: "empty configuration; start from examples/ or run `lbc compile` to see the embedded default"}}
	}
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var probs Problems
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, Problems{{File: file, Line: yamlErrLine(err), Msg: cleanYAMLErr(err)}}
		}
		for _, e := range te.Errors {
			probs = append(probs, typeErrProblem(file, e))
		}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		probs = append(probs, Problem{File: file, Line: extra.Line, Msg: "a second YAML document follows; lb.yaml holds one document"})
	}
	if len(probs) > 0 {
		return nil, probs
	}
	v := validate(&cfg)
	loc := locator{root: &root}
	if len(v.errs) > 0 {
		return nil, v.errs.located(file, loc)
	}
	return &Decoded{Config: &cfg, Warnings: v.warns.located(file, loc)}, nil
}

var (
	lineRe     = regexp.MustCompile(`line (\d+)`)
	notFoundRe = regexp.MustCompile(`^line (\d+): field (\S+) not found in type compiler\.(\w+)$`)
	unmarshRe  = regexp.MustCompile(`^line (\d+): cannot unmarshal !!(\w+) ` + "`" + `?([^` + "`" + `]*)` + "`" + `? into (\S+)$`)
)

func yamlErrLine(err error) int {
	if m := lineRe.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

func cleanYAMLErr(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	return lineRe.ReplaceAllString(strings.TrimPrefix(s, "unmarshal errors:\n  "), "")
}

// typeErrProblem turns yaml.v3's type errors into messages that name the
// field and say what is allowed.
func typeErrProblem(file, e string) Problem {
	if m := notFoundRe.FindStringSubmatch(e); m != nil {
		n, _ := strconv.Atoi(m[1])
		return Problem{File: file, Line: n, Msg: fmt.Sprintf("unknown field %q in %s; known fields: %s", m[2], typeLabel(m[3]), strings.Join(knownFields(m[3]), ", "))}
	}
	if m := unmarshRe.FindStringSubmatch(e); m != nil {
		n, _ := strconv.Atoi(m[1])
		return Problem{File: file, Line: n, Msg: fmt.Sprintf("value %q is a %s, but this field wants %s", m[3], m[2], goTypeLabel(m[4]))}
	}
	n := yamlErrLine(errors.New(e))
	return Problem{File: file, Line: n, Msg: strings.TrimSpace(lineRe.ReplaceAllString(e, ""))}
}

var configTypes = map[string]reflect.Type{
	"Config":                   reflect.TypeOf(Config{}),
	"Tunnel":                   reflect.TypeOf(Tunnel{}),
	"Limits":                   reflect.TypeOf(Limits{}),
	"Service":                  reflect.TypeOf(Service{}),
	"ConnectionTrackingPolicy": reflect.TypeOf(ConnectionTrackingPolicy{}),
	"FailoverPolicy":           reflect.TypeOf(FailoverPolicy{}),
	"ConnectionDraining":       reflect.TypeOf(ConnectionDraining{}),
	"HealthCheck":              reflect.TypeOf(HealthCheck{}),
	"BackendGroup":             reflect.TypeOf(BackendGroup{}),
	"Endpoint":                 reflect.TypeOf(Endpoint{}),
}

func typeLabel(goName string) string {
	switch goName {
	case "Config":
		return "the top level"
	case "Service":
		return "a service"
	case "BackendGroup":
		return "a backend group"
	case "Endpoint":
		return "an endpoint"
	}
	return lowerFirst(goName)
}

func goTypeLabel(t string) string {
	switch {
	case strings.Contains(t, "int"):
		return "a whole number"
	case strings.Contains(t, "float"):
		return "a number"
	case t == "bool":
		return "true or false"
	case t == "string":
		return "a string"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	}
	return "a " + strings.TrimPrefix(t, "compiler.") + " mapping"
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

func knownFields(goName string) []string {
	t, ok := configTypes[goName]
	if !ok {
		return nil
	}
	var out []string
	for i := 0; i < t.NumField(); i++ {
		tag := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
		if tag != "" && tag != "-" {
			out = append(out, tag)
		}
	}
	sort.Strings(out)
	return out
}

// locator finds the line of a field path in the parsed YAML tree.
type locator struct{ root *yaml.Node }

// line returns the line of the deepest node of keys that exists.
func (l locator) line(keys []any) int {
	n := l.root
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
						best = n.Content[i].Line
						next = n.Content[i+1]
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
