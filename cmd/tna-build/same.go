package main

import (
	"os"

	"github.com/lbc-dev/lbc/targets/tofino"
)

// sameOutput compares two files the Tofino back end wrote
// (tofino.SameCompilerOutput).
func sameOutput(a, b string) (bool, error) {
	da, err := os.ReadFile(a)
	if err != nil {
		return false, err
	}
	db, err := os.ReadFile(b)
	if err != nil {
		return false, err
	}
	return tofino.SameCompilerOutput(a, da, db)
}
