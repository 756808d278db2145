package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

var validateCommand = &cli.Command{
	Name:      "validate",
	Usage:     "check a configuration and report every problem at once",
	UsageText: "lbc validate -c lb.yaml [--health health.yaml]",
	Description: `Decodes lb.yaml strictly (an unknown field or a value of the wrong type is
an error with its line and field path) and checks every value against the
allowed ranges and the rules of the semantics (ALWAYS_PERSIST with
PER_SESSION, overlapping VIP/protocol/port, R-LIMIT, ring size); a field it
cannot decode does not stop the other checks. Exits 1 with all problems
listed, one per line, in line order:

   lb.yaml:14: service "web": group "ig-a": endpoint "vm-a1": ip: "10.0.1" is not an IP address`,
	Flags: []cli.Flag{configFlag, healthFlag},
	Action: func(c *cli.Context) error {
		l, err := loadConfig(c, c.App.ErrWriter)
		if err != nil {
			return err
		}
		n := 0
		for _, s := range l.Config.Services {
			for _, g := range s.Backends {
				n += len(g.Endpoints)
			}
		}
		fmt.Fprintf(c.App.Writer, "%s: ok (%d services, %d endpoints)\n", l.Name, len(l.Config.Services), n)
		return nil
	},
}
