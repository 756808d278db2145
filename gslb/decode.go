package gslb

import (
	"reflect"
	"strings"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/strictyaml"
)

// Load parses and validates gslb.yaml strictly (an unknown field is an
// error with its line) and reports every problem at once as
// compiler.Problems, each naming the field and the fix.
func Load(file string, data []byte) (*Config, error) {
	var cfg Config
	root, issues := strictyaml.Decode(data, &cfg, schema)
	if len(issues) > 0 {
		out := make(compiler.Problems, len(issues))
		for i, x := range issues {
			out[i] = compiler.Problem{File: file, Line: x.Line, Msg: x.Msg}
		}
		return nil, out
	}
	if strictyaml.Empty(root) {
		return nil, compiler.Problems{{File: file, Msg: "empty configuration; start from examples/gslb.yaml"}}
	}
	cfg.applyDefaults()
	if is := validate(&cfg); len(is) > 0 {
		out := make(compiler.Problems, len(is))
		for i, x := range is {
			out[i] = compiler.Problem{File: file, Line: strictyaml.LineOf(root, x.keys), Path: x.path, Msg: x.msg}
		}
		return nil, out
	}
	return &cfg, nil
}

var schema = strictyaml.Schema{
	Doc:    "gslb.yaml",
	Types:  configTypes,
	Labels: typeLabels,
	Fields: map[string][]string{"Point": {"lat", "lon"}},
	ValueLabel: func(t string) (string, bool) {
		if strings.HasSuffix(t, "Step") || strings.HasSuffix(t, "Mode") || strings.HasSuffix(t, "AllDown") {
			return "a string", true
		}
		return "", false
	},
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
