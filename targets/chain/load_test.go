package chain_test

import (
	"os"
	"strings"

	"github.com/lbc-dev/lbc/compiler"
)

// loadCfg reads a testdata configuration and its -health.yaml, if any;
// health files and configurations the compiler rejects by design are
// errors.
func loadCfg(file string) (*compiler.Config, compiler.State, error) {
	if strings.HasSuffix(file, "-health.yaml") {
		return nil, nil, os.ErrInvalid
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, err
	}
	d, err := compiler.Load(file, data)
	if err != nil {
		return nil, nil, err
	}
	st := compiler.State{}
	if h, err := os.ReadFile(strings.TrimSuffix(file, ".yaml") + "-health.yaml"); err == nil {
		if st, err = compiler.LoadState(file, h, d.Config); err != nil {
			return nil, nil, err
		}
	}
	return d.Config, st, nil
}
