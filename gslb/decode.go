package gslb

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

	"github.com/lbc-dev/lbc/compiler"
	"gopkg.in/yaml.v3"
)

// Load parses and validates gslb.yaml strictly (an unknown field is an
// error with its line) and reports every problem at once as
// compiler.Problems, each naming the field and the fix.
func Load(file string, data []byte) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, compiler.Problems{{File: file, Line: errLine(err.Error()), Msg: cleanErr(err.Error())}}
	}
	if len(root.Content) == 0 {
		return nil, compiler.Problems{{File: file, Msg: "empty configuration; start from examples/gslb.yaml"}}
	}
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var probs compiler.Problems
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, compiler.Problems{{File: file, Line: errLine(err.Error()), Msg: cleanErr(err.Error())}}
		}
		for _, e := range te.Errors {
			probs = append(probs, typeProblem(file, e))
		}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		probs = append(probs, compiler.Problem{File: file, Line: extra.Line, Msg: "a second YAML document follows; gslb.yaml holds one document"})
	}
	if len(probs) > 0 {
		return nil, probs
	}
	cfg.applyDefaults()
	if is := validate(&cfg); len(is) > 0 {
		out := make(compiler.Problems, len(is))
		for i, x := range is {
			out[i] = compiler.Problem{File: file, Line: lineOf(&root, x.keys), Path: x.path, Msg: x.msg}
		}
		return nil, out
	}
	return &cfg, nil
}

var (
	lineRe     = regexp.MustCompile(`line (\d+)`)
	notFoundRe = regexp.MustCompile(`^line (\d+): field (\S+) not found in type (?:gslb|policy)\.(\w+)$`)
	unmarshRe  = regexp.MustCompile(`^line (\d+): cannot unmarshal !!(\w+) ` + "`" + `?([^` + "`" + `]*)` + "`" + `? into (\S+)$`)
)

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

var configTypes = map[string]reflect.Type{
	"Config": reflect.TypeOf(Config{}), "Zone": reflect.TypeOf(Zone{}), "SiteConfig": reflect.TypeOf(SiteConfig{}),
	"NameConfig": reflect.TypeOf(NameConfig{}), "NameSiteRef": reflect.TypeOf(NameSiteRef{}), "PolicyConfig": reflect.TypeOf(PolicyConfig{}),
	"NetworkProximityConfig": reflect.TypeOf(NetworkProximityConfig{}), "GeoProximityConfig": reflect.TypeOf(GeoProximityConfig{}),
	"ConnectionLoadConfig": reflect.TypeOf(ConnectionLoadConfig{}), "MetricsConfig": reflect.TypeOf(MetricsConfig{}),
	"ServerConfig": reflect.TypeOf(ServerConfig{}), "RateLimitConfig": reflect.TypeOf(RateLimitConfig{}),
}

var typeLabels = map[string]string{
	"Config": "the top level", "Zone": "a zone", "SiteConfig": "a site", "NameConfig": "a name",
	"NameSiteRef": "a name's site", "PolicyConfig": "policy", "NetworkProximityConfig": "policy.networkProximity",
	"GeoProximityConfig": "policy.geoProximity", "ConnectionLoadConfig": "policy.connectionLoad",
	"MetricsConfig": "metrics", "ServerConfig": "server", "RateLimitConfig": "server.rateLimit", "Point": "a location",
}

func typeProblem(file, e string) compiler.Problem {
	if m := notFoundRe.FindStringSubmatch(e); m != nil {
		n, _ := strconv.Atoi(m[1])
		known := knownFields(m[3])
		return compiler.Problem{File: file, Line: n, Msg: fmt.Sprintf("unknown field %q in %s; known fields: %s", m[2], typeLabels[m[3]], strings.Join(known, ", "))}
	}
	if m := unmarshRe.FindStringSubmatch(e); m != nil {
		n, _ := strconv.Atoi(m[1])
		return compiler.Problem{File: file, Line: n, Msg: fmt.Sprintf("value %q is a %s, but this field wants %s", m[3], m[2], goTypeLabel(m[4]))}
	}
	return compiler.Problem{File: file, Line: errLine(e), Msg: cleanErr(e)}
}

func goTypeLabel(t string) string {
	switch {
	case strings.Contains(t, "uint"):
		return "a whole number >= 0"
	case strings.Contains(t, "int"):
		return "a whole number"
	case strings.Contains(t, "float"):
		return "a number"
	case t == "bool" || t == "*bool":
		return "true or false"
	case strings.HasSuffix(t, "string") || strings.HasSuffix(t, "Step") || strings.HasSuffix(t, "Mode") || strings.HasSuffix(t, "AllDown"):
		return "a string"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	}
	return "a mapping"
}

func knownFields(goName string) []string {
	t, ok := configTypes[goName]
	if goName == "Point" {
		return []string{"lat", "lon"}
	}
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

// lineOf finds the line of the deepest node of keys that exists.
func lineOf(root *yaml.Node, keys []any) int {
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
