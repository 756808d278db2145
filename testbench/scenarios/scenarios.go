// Package scenarios holds the shipped testbench scenarios (YAML files in
// this folder, embedded): `lbc-testbench run NAME` runs one by name.
package scenarios

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

//go:embed *.yaml
var files embed.FS

// Names lists the shipped scenarios (file names without .yaml).
func Names() []string {
	ents, _ := fs.ReadDir(files, ".")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(out)
	return out
}

// Get returns a shipped scenario's file by name (with or without .yaml).
func Get(name string) ([]byte, bool) {
	data, err := files.ReadFile(strings.TrimSuffix(name, ".yaml") + ".yaml")
	return data, err == nil
}
