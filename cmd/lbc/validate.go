package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/targets/sim"
	"github.com/lbc-dev/lbc/targets/tofino"
	"github.com/lbc-dev/lbc/targets/xdp"
	"github.com/urfave/cli/v2"
)

// capacities are the datapaths `lbc validate --target` knows the tables
// of, each read from where its program defines them.
var capacities = map[string]func() (compiler.Capacity, error){
	"bmv2":   bmv2.Capacity,
	"tofino": tofino.Capacity,
	"xdp":    xdp.Capacity,
}

func capacityNames() string {
	var names []string
	for n := range capacities {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

var validateTargetFlag = &cli.StringFlag{Name: "target", Usage: "also check that the configuration fits the tables of datapath `KIND`: " + capacityNames()}

var validateCommand = &cli.Command{
	Name:      "validate",
	Usage:     "check a configuration and report every problem at once",
	UsageText: "lbc validate -c lb.yaml [--health health.yaml] [--target bmv2|tofino|xdp]",
	Description: `Decodes lb.yaml strictly (an unknown field or a value of the wrong type is
an error with its line and field path) and checks every value against the
allowed ranges and the rules of the semantics (ALWAYS_PERSIST with
PER_SESSION, overlapping VIP/protocol/port, R-LIMIT, ring size); a field it
cannot decode does not stop the other checks. Exits 1 with all problems
listed, one per line, in line order:

   lb.yaml:14: service "web": group "ig-a": endpoint "vm-a1": ip: "10.0.1" is not an IP address

With --target, it also checks that the configuration fits that datapath's
tables, as its program sizes them (BPF map sizes for xdp, the P4Info and the
P4 source for bmv2 and tofino): services, VIP rows, ring entries (both halves
of every ring), backends, idle timeouts (tofino), and limits.maxConnections
against the conntrack. A table that is too small is named with its size and
how to raise it. A ring that does not fit (on tofino: both halves of every
ring in the ring table, each ringSize a power of two) is reported at its
service's ringSize line with the size to set, so that all rings fit:

   lb.yaml:9: service "web": ringSize: 65537 (the default) is not a power of two: ...; set ringSize: 65536 (the rings then take 131072 of 131072 entries)`,
	Flags: []cli.Flag{configFlag, healthFlag, validateTargetFlag},
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
		name := c.String(validateTargetFlag.Name)
		if name == "" {
			fmt.Fprintf(c.App.Writer, "%s: ok (%d services, %d endpoints)\n", l.Name, len(l.Config.Services), n)
			return nil
		}
		capOf, ok := capacities[name]
		if !ok {
			return fmt.Errorf("--target %q: known targets are %s", name, capacityNames())
		}
		cp, err := capOf()
		if err != nil {
			return err
		}
		// CheckCapacity applies the target's ring rule (CheckTarget's) and
		// the ring table's size together: one ringSize to set per service.
		ps := l.Decoded.CheckCapacity(cp)
		if len(ps) > 0 {
			return problemsError(l.Name, ps)
		}
		fmt.Fprintf(c.App.Writer, "%s: ok for --target %s (%d services, %d endpoints)\n", l.Name, name, len(l.Config.Services), n)
		u := compiler.Usage(l.Config)
		for _, t := range cp.Tables {
			line := fmt.Sprintf("  %-22s %d of %d %s", t.Table, u[t.Holds], t.Size, t.Holds)
			if t.Holds == compiler.HoldsConnections {
				line = fmt.Sprintf("  %-22s %d %s", t.Table, t.Size, t.Holds)
				if want := u[t.Holds]; want > 0 {
					line += fmt.Sprintf(" (limits.maxConnections %d)%s", want, connLoss(name, t.Size, want))
				}
			}
			fmt.Fprintln(c.App.Writer, line)
		}
		return nil
	},
}

// connLoss is the share of live connections that a register conntrack
// loses to collisions at the given number of live connections, as
// targets/sim predicts it: a 4-way set per bucket on bmv2 (size is its
// slots), the TNA program's ways on tofino (size is the flows it holds at
// 1 %; the model measures the loss at conns flows); an LRU map loses none
// before it is full.
func connLoss(target string, size, conns int) string {
	var loss float64
	var err error
	switch target {
	case "bmv2":
		if size < sim.P4Ways {
			return ""
		}
		loss, err = sim.LossAt(size/sim.P4Ways, sim.P4Ways, float64(conns)/float64(size), 1)
	case "tofino":
		if conns > sim.TNATofino1.Slots() {
			return ""
		}
		loss, err = sim.TNALossAt(sim.TNATofino1, conns, 1)
	default:
		return ""
	}
	if err != nil {
		return ""
	}
	return fmt.Sprintf("; at that occupancy %.2f%% of them collide and are re-selected (one sample of the model's geometry)", 100*loss)
}
