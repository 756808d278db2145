package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/examples"
	"github.com/urfave/cli/v2"
)

var configFlag = &cli.StringFlag{
	Name:    "config",
	Aliases: []string{"c"},
	Usage:   "load-balancer configuration `FILE` (lb.yaml; the file may also be the command's one argument); without it, compile, validate, explain and gen-trace use the embedded examples/" + examples.DefaultName + ", and push and run refuse unless --example says so",
}

var healthFlag = &cli.StringFlag{
	Name:  "health",
	Usage: "health and weight state `FILE` (endpoint: {healthy: bool, weight: 0..1000}); without it every endpoint is healthy",
}

// maxWarnings bounds the warning lines a command prints; warnings with the
// same message (one per service) are one line already.
const maxWarnings = 20

// loaded is a validated configuration and its health state.
type loaded struct {
	Name    string
	Config  *compiler.Config
	State   compiler.State
	Decoded *compiler.Decoded // places later problems (target, capacity) at their line
}

// loadConfig reads -c (or the embedded default) and --health, printing
// warnings to w. Every problem of a file is reported at once.
func loadConfig(c *cli.Context, w io.Writer) (*loaded, error) {
	return loadConfigFiles(c.String(configFlag.Name), c.String(healthFlag.Name), w)
}

// loadConfigFiles is loadConfig with the files named: configFile "" is
// the embedded default, healthFile "" every endpoint healthy.
func loadConfigFiles(configFile, healthFile string, w io.Writer) (*loaded, error) {
	name := configFile
	var data []byte
	if name == "" {
		name = "examples/" + examples.DefaultName
		data = examples.Default()
	} else {
		var err error
		if data, err = os.ReadFile(name); err != nil {
			return nil, err
		}
	}
	dec, err := compiler.Load(name, data)
	if err != nil {
		return nil, problemsError(name, err)
	}
	for _, line := range dec.Warnings.Summary(maxWarnings) {
		fmt.Fprintln(w, "warning:", line)
	}
	l := &loaded{Name: name, Config: dec.Config, Decoded: dec}
	if hf := healthFile; hf != "" {
		data, err := os.ReadFile(hf)
		if err != nil {
			return nil, err
		}
		if l.State, err = compiler.LoadState(hf, data, dec.Config); err != nil {
			return nil, problemsError(hf, err)
		}
	}
	return l, nil
}

func problemsError(file string, err error) error {
	if ps, ok := err.(compiler.Problems); ok {
		return errors.New(ps.Report(file))
	}
	return err
}
