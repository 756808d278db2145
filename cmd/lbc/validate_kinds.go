package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/lbc-dev/lbc/controller/bgp"
	"github.com/lbc-dev/lbc/fleet"
	"github.com/lbc-dev/lbc/gslb"
	"github.com/lbc-dev/lbc/internal/spelling"
	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"
)

// The kinds of file lbc validate checks: lb.yaml, and the files lbc run
// --bgp, lbc run --fleet and lbc gslb serve read, each with the loader the
// command itself uses, so that a file is checked offline exactly as it
// will be read.
const (
	kindLB    = "lb"
	kindBGP   = "bgp"
	kindFleet = "fleet"
	kindGSLB  = "gslb"
)

var validateKindFlag = &cli.StringFlag{Name: "kind", Usage: "what `KIND` of file to check: lb (lb.yaml), bgp (lbc run --bgp), fleet (lbc run --fleet: also its CA, certificate and key), gslb (lbc gslb serve); default: told from the file's top-level fields"}

// fileKind is --kind, or the kind the file's top-level fields name.
func fileKind(c *cli.Context) (string, error) {
	if k := c.String(validateKindFlag.Name); k != "" {
		switch k {
		case kindLB, kindBGP, kindFleet, kindGSLB:
			return k, nil
		}
		return "", fmt.Errorf("--kind %q: one of lb, bgp, fleet, gslb", k)
	}
	file := c.String(configFlag.Name)
	if file == "" {
		return kindLB, nil // the embedded example
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	var top map[string]yaml.Node
	if yaml.Unmarshal(data, &top) != nil {
		return kindLB, nil // lb.yaml's decoder says what is wrong
	}
	has := func(k string) bool { _, ok := top[k]; return ok }
	switch {
	case has("services"):
		return kindLB, nil
	case has("sites"):
		return kindGSLB, nil
	case has("localASN") || has("routerID"):
		return kindBGP, nil
	case has("node") && has("listen"):
		return kindFleet, nil
	}
	return kindLB, nil
}

// validateOther checks a bgp, fleet or gslb file.
func validateOther(c *cli.Context, kind string) error {
	file := c.String(configFlag.Name)
	if file == "" {
		return fmt.Errorf("--kind %s: name the file: lbc validate --kind %s FILE", kind, kind)
	}
	for _, f := range []string{healthFlag.Name, validateTargetFlag.Name} {
		if c.String(f) != "" {
			return fmt.Errorf("--%s is for lb.yaml; %s is a %s file", f, file, kind)
		}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var what string
	switch kind {
	case kindBGP:
		cfg, err := bgp.Load(file, data)
		if err != nil {
			return problemsError(file, err)
		}
		what = fmt.Sprintf("bgp.yaml: AS %d, %s", cfg.LocalASN, spelling.Count(len(cfg.Peers), "peer"))
	case kindFleet:
		cfg, err := fleet.Load(file, data)
		if err != nil {
			return problemsError(file, err)
		}
		if err := fleet.CheckFiles(cfg); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		what = fmt.Sprintf("fleet.yaml: node %s, %s, its certificate is the CA's for %s", cfg.Node, spelling.Count(len(cfg.Peers), "peer"), cfg.Node)
	case kindGSLB:
		cfg, err := gslb.Load(file, data)
		if err != nil {
			return problemsError(file, err)
		}
		what = "gslb.yaml: " + spelling.Count(len(cfg.Sites), "site")
	}
	fmt.Fprintf(c.App.Writer, "%s: ok (%s)\n", file, strings.TrimSpace(what))
	return nil
}
