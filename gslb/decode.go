package gslb

import (
	"fmt"
	"sort"
	"strings"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/strictyaml"
	"gopkg.in/yaml.v3"
)

// Load parses and validates gslb.yaml and reports every problem at once
// as compiler.Problems in line order, each naming the field and the fix:
// fields it cannot decode (unknown, or of the wrong type) next to what
// validation finds in the rest.
func Load(file string, data []byte) (*Config, error) {
	return LoadWith(file, data, LoadOptions{})
}

// LoadOptions replace what the file says before it is validated.
type LoadOptions struct {
	// GeoDatabase, if set, is policy.geoProximity.database, whatever the
	// file names (lbc gslb --geo-db): it satisfies geo-proximity's need of
	// a database when the file names none.
	GeoDatabase string
}

// LoadWith is Load with the file's settings replaced as o says.
func LoadWith(file string, data []byte, o LoadOptions) (*Config, error) {
	var cfg Config
	root, issues := strictyaml.Decode(data, &cfg, schema)
	out := make(compiler.Problems, len(issues))
	for i, x := range issues {
		out[i] = compiler.Problem{File: file, Line: x.Line, Path: pathOf(root, x.Keys).label, Msg: x.Msg}
	}
	if root == nil { // not YAML
		return nil, out
	}
	if len(issues) == 0 && strictyaml.Empty(root) {
		return nil, compiler.Problems{{File: file, Msg: "empty configuration; start from examples/gslb.yaml"}}
	}
	cfg.applyDefaults()
	if o.GeoDatabase != "" {
		cfg.Policy.GeoProximity.Database = o.GeoDatabase
	}
	unset := strictyaml.UnsetPaths(issues)
	for _, x := range validate(&cfg) {
		if !unset.Covers(x.keys) {
			out = append(out, compiler.Problem{File: file, Line: strictyaml.LineOf(root, x.keys), Path: x.path, Msg: x.msg})
		}
	}
	if len(out) > 0 {
		sort.SliceStable(out, func(i, j int) bool {
			li, lj := out[i].Line, out[j].Line
			if li == 0 || lj == 0 {
				return li != 0 && lj == 0
			}
			return li < lj
		})
		return nil, out
	}
	return &cfg, nil
}

// pathOf rebuilds the position of a field path as validate writes it,
// naming list items by their name field.
func pathOf(root *yaml.Node, keys []any) at {
	a := at{}
	for i := 0; i < len(keys); i++ {
		k := fmt.Sprint(keys[i])
		if i+1 < len(keys) {
			if idx, ok := keys[i+1].(int); ok {
				a = a.item(k, idx, strictyaml.Name(root, keys[:i+2]))
				i++
				continue
			}
		}
		if idx, ok := keys[i].(int); ok {
			a = a.index(idx)
			continue
		}
		a = a.field(k)
	}
	return a
}

var schema = strictyaml.Schema{
	Doc:    "gslb.yaml",
	Labels: typeLabels,
	ValueLabel: func(t string) (string, bool) {
		if strings.HasSuffix(t, "Step") || strings.HasSuffix(t, "Mode") || strings.HasSuffix(t, "AllDown") {
			return "a string", true
		}
		return "", false
	},
}

var typeLabels = map[string]string{
	"Config": "the top level", "Zone": "a zone", "SiteConfig": "a site", "NameConfig": "a name",
	"NameSiteRef": "a name's site", "PolicyConfig": "policy", "NetworkProximityConfig": "policy.networkProximity",
	"GeoProximityConfig": "policy.geoProximity", "ConnectionLoadConfig": "policy.connectionLoad",
	"MetricsConfig": "metrics", "ServerConfig": "server", "RateLimitConfig": "server.rateLimit", "Point": "a location",
}
