package main

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/lbc-dev/lbc/compiler"
)

// TestReadmeListsEveryField (issue 36, round three): every field lb.yaml
// accepts at the top level, in tunnel, limits and a service is in the
// README's configuration table, so that no field validate knows
// (loadBalancingScheme, limits.maxConnections were missing) is a secret.
func TestReadmeListsEveryField(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "### Configuration (`lb.yaml`)")
	end := strings.Index(s, "### Health and weights")
	if start < 0 || end < start {
		t.Fatal("README has no configuration section")
	}
	table := s[start:end]
	for _, typ := range []any{compiler.Config{}, compiler.Tunnel{}, compiler.Limits{}, compiler.Service{}} {
		rt := reflect.TypeOf(typ)
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			// In backticks, alone or in a path: `vip`, `tunnel.mtu`, `services[].name`.
			re := regexp.MustCompile("`[^`\n]*\\b" + regexp.QuoteMeta(name) + "\\b[^`\n]*`")
			if !re.MatchString(table) {
				t.Errorf("%s field %s is not in README's configuration table", rt.Name(), name)
			}
		}
	}
}
