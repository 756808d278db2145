// Package examples holds the example configurations that the README uses,
// embedded so that `lbc compile` without -c runs on the default one.
package examples

import "embed"

// Files holds every example file.
//
//go:embed *.yaml
var Files embed.FS

// DefaultName is the configuration `lbc` uses when -c is not given.
const DefaultName = "failover.yaml"

// Default returns the default configuration's bytes.
func Default() []byte {
	b, err := Files.ReadFile(DefaultName)
	if err != nil {
		panic(err) // embedded at build time; cannot fail
	}
	return b
}
