package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/spelling"
	"github.com/lbc-dev/lbc/p4"
	"github.com/lbc-dev/lbc/runtime"
	"github.com/lbc-dev/lbc/targets/bmv2"
	"github.com/lbc-dev/lbc/targets/sim"
	"github.com/lbc-dev/lbc/targets/tofino"
	"github.com/urfave/cli/v2"
)

// capacities are the datapaths `lbc validate --target` knows the tables
// of, each read from where its program defines them.
var capacities = map[string]func(c *cli.Context, cfg *compiler.Config) (compiler.Capacity, error){
	"bmv2": func(c *cli.Context, _ *compiler.Config) (compiler.Capacity, error) {
		cp, err := bmv2.CapacityFor(c.Int(p4RingFlag.Name))
		if err != nil && c.IsSet(p4RingFlag.Name) {
			return cp, fmt.Errorf("--ring-table-size: %w", err)
		}
		return cp, err
	},
	"tofino": func(c *cli.Context, _ *compiler.Config) (compiler.Capacity, error) {
		b, file, err := tnaP4Info(c)
		if err != nil {
			return compiler.Capacity{}, err
		}
		cp, err := tofino.CapacityOf(b, file)
		if err != nil && c.IsSet(validateP4InfoFlag.Name) {
			return cp, fmt.Errorf("--p4info: %w", err)
		}
		return cp, err
	},
	// The sizes lbc push and lbc run create the maps with, from the same
	// flags and defaults.
	"xdp": func(c *cli.Context, cfg *compiler.Config) (compiler.Capacity, error) {
		want, _, err := xdpSizes(c, cfg)
		if err != nil {
			return compiler.Capacity{}, err
		}
		return xdpCapacity(want, cfg, false)
	},
}

func capacityNames() string {
	var names []string
	for n := range capacities {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// validateP4InfoFlag checks --target tofino against another build of the
// TNA program than the embedded Tofino 1 one.
var validateP4InfoFlag = &cli.StringFlag{Name: "p4info", Usage: "tofino: check against the tables of the build whose P4Info is `FILE` (the P4Info the switch runs; Tofino 2's is p4/tna/build/tofino2/lb.p4info.txtpb), not lbc's embedded Tofino 1 build"}

var validateTargetFlag = &cli.StringFlag{Name: "target", Usage: "also check that the configuration fits the tables of datapath `KIND`: " + capacityNames()}

var validateCommand = &cli.Command{
	Name:      "validate",
	Usage:     "check a configuration and report every problem at once",
	UsageText: "lbc validate [-c] lb.yaml [--health health.yaml] [--target bmv2|tofino|xdp [--ring-table-size N | --p4info FILE | --ring-entries N ...]]\n   lbc validate [--kind bgp|fleet|gslb] FILE",
	Description: `Decodes lb.yaml strictly (an unknown field or a value of the wrong type is
an error with its line and field path) and checks every value against the
allowed ranges and the rules of the semantics (ALWAYS_PERSIST with
PER_SESSION, overlapping VIP/protocol/port, R-LIMIT, ring size); a field it
cannot decode does not stop the other checks. Exits 1 with all problems
listed, one per line, in line order:

   lb.yaml:14: service "web": group "ig-a": endpoint "vm-a1": ip: "10.0.1" is not an IP address

With --target, it also checks that the configuration fits that datapath's
tables, as its program sizes them (BPF map sizes for xdp, the P4Info and the
P4 source for bmv2 and tofino): services, VIP rows, ring entries (every
service's ring, plus room for the largest to change beside it), backends,
idle timeouts (tofino), and limits.maxConnections against the flows the
conntrack holds at ≤ 1 % loss in steady state (R-CT-CAP). A table that is
too small is named with its size and how to raise it. Rings that do not fit
the ring table are one problem: by how much, the largest rings, and the finest
ringPrecision at which the services with ringSize auto (the default) fit:

   lb.yaml:3: --target tofino: the rings need 1230848 entries (...), 182272 more than its LbIngress.ring holds (1048576); the largest rings: ...; the finest precision that fits is ringPrecision: 0.016 on the 600 services with ringSize auto (...)

On tofino an explicit ringSize must be a power of two; one that is not is
reported at its line with the size to set. The tables are those of lbc's
embedded build for Tofino 1 (p4/tna/build); --p4info FILE checks against
another build's, such as Tofino 2's (p4/tna/build/tofino2/lb.p4info.txtpb,
whose ring holds 255 services at ringSize auto where Tofino 1's holds 1,023):

   lbc validate -c lb.yaml --target tofino --p4info p4/tna/build/tofino2/lb.p4info.txtpb

For bmv2 the ring table is the size lbc push and lbc run give the pipeline
they push: 1,048,576 entries, or --ring-table-size N given here as it will
be given there (docs/p4.md).

For xdp the sizes are those lbc push and lbc run create the maps with: their
defaults (512 services at ringSize 65537), or --service-entries,
--backend-entries, --ring-entries and --conntrack-entries given here as they
will be given there (docs/xdp.md#map-sizes). A datapath already attached
keeps the sizes of its maps; lbc push checks against those.

The other files lbc reads are checked offline too, each by the loader of the
command that reads it, told from their top-level fields or by --kind:
bgp.yaml (lbc run --bgp), fleet.yaml (lbc run --fleet: also that its
certificate is the CA's for its node) and gslb.yaml (lbc gslb serve):

   lbc validate bgp.yaml
   lbc validate --kind fleet /etc/lbc/fleet.yaml`,
	Flags: append([]cli.Flag{configFlag, healthFlag, validateTargetFlag, validateKindFlag, p4RingFlag, validateP4InfoFlag}, xdpSizeFlags...),
	Action: func(c *cli.Context) error {
		kind, err := fileKind(c)
		if err != nil {
			return err
		}
		if kind != kindLB {
			return validateOther(c, kind)
		}
		l, err := loadConfig(c, c.App.ErrWriter)
		if err != nil {
			return err
		}
		n := 0
		var weighted []string
		for i, s := range l.Config.Services {
			for _, g := range s.Backends {
				n += len(g.Endpoints)
			}
			if l.Config.Services[i].Weighted() {
				weighted = append(weighted, fmt.Sprintf("%q", s.Name))
			}
		}
		// The weights are no part of lb.yaml: valid as it is, the file
		// does not compile without them (lbc compile -c weighted.yaml).
		if len(weighted) > 0 && c.String(healthFlag.Name) == "" {
			svc := "service"
			if len(weighted) > 1 {
				svc = "services"
			}
			fmt.Fprintf(c.App.ErrWriter, "note: WEIGHTED_MAGLEV %s %s: lbc compile and lbc push need each endpoint's weight from --health FILE (endpoint: {weight: 0..%d}); lbc run reads it from the health check\n",
				svc, strings.Join(weighted, ", "), compiler.MaxWeight)
		}
		name := c.String(validateTargetFlag.Name)
		if c.IsSet(p4RingFlag.Name) && name != "bmv2" {
			return fmt.Errorf("--ring-table-size sizes the ring table of --target bmv2: give --target bmv2 to check the configuration against it")
		}
		if c.IsSet(validateP4InfoFlag.Name) && name != "tofino" {
			return fmt.Errorf("--p4info names the build of --target tofino to check against: give --target tofino with it (bmv2's ring table size is --ring-table-size)")
		}
		if set := sizeSetFlags(c); len(set) > 0 && name != "xdp" {
			return fmt.Errorf("%s size the maps of --target xdp: give --target xdp to check the configuration against them", strings.Join(set, ", "))
		}
		if name == "" {
			fmt.Fprintf(c.App.Writer, "%s: ok (%s, %s)\n", l.Name, spelling.Count(len(l.Config.Services), "service"), spelling.Count(n, "endpoint"))
			return nil
		}
		capOf, ok := capacities[name]
		if !ok {
			return fmt.Errorf("--target %q: known targets are %s", name, capacityNames())
		}
		cp, err := capOf(c, l.Config)
		if err != nil {
			return err
		}
		// CheckCapacity applies the target's ring rule (CheckTarget's) too.
		ps := l.Decoded.CheckCapacity(cp)
		if len(ps) > 0 {
			return problemsError(l.Name, ps)
		}
		fmt.Fprintf(c.App.Writer, "%s: ok for --target %s (%s, %s)\n", l.Name, name, spelling.Count(len(l.Config.Services), "service"), spelling.Count(n, "endpoint"))
		u := compiler.Usage(l.Config)
		for _, t := range cp.Tables {
			line := fmt.Sprintf("  %-22s %d of %d %s", t.Table, u[t.Holds], t.Size, t.Holds)
			if t.Holds == compiler.HoldsConnections {
				line = fmt.Sprintf("  %-22s %d %s", t.Table, t.Size, t.Holds)
				if want := u[t.Holds]; want > 0 {
					line += fmt.Sprintf(" (limits.maxConnections %d)%s", want, connLoss(c, name, t.Size, want))
				}
			}
			fmt.Fprintln(c.App.Writer, line)
		}
		return nil
	},
}

// tnaP4Info is the P4Info (text) of the TNA build validate checks
// against, and where it is from: --p4info's file, or the embedded Tofino 1
// build.
func tnaP4Info(c *cli.Context) ([]byte, string, error) {
	f := c.String(validateP4InfoFlag.Name)
	if f == "" {
		return p4.TNAP4Info, "p4/tna/build/lb.p4info.txtpb", nil
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return nil, "", fmt.Errorf("--p4info: %w", err)
	}
	return b, f, nil
}

// tnaGeometry is the conntrack geometry of the TNA build validate checks
// against (tnaP4Info's).
func tnaGeometry(c *cli.Context) (sim.TNAGeometry, error) {
	b, file, err := tnaP4Info(c)
	if err != nil {
		return sim.TNAGeometry{}, err
	}
	info, err := runtime.ParseP4Info(b)
	if err != nil {
		return sim.TNAGeometry{}, fmt.Errorf("%s: %w", file, err)
	}
	return tofino.ConntrackGeometry(info)
}

// connLoss is what the conntrack loses at limits.maxConnections live
// flows in R-CT-CAP's steady state (flows ending and starting at the same
// rate), as targets/sim's model of its geometry predicts it (seed 1): on
// bmv2 the live entries evicted per new flow, by the committed build's
// 4-way buckets; on tofino the new flows refused an entry by the TNA
// program's ways. Size is the flows held at 1 % on both. An LRU map loses
// none before it is full.
func connLoss(c *cli.Context, target string, size, conns int) string {
	var loss float64
	var err error
	var what string
	switch target {
	case "bmv2":
		buckets, berr := bmv2.ConntrackBuckets()
		if berr != nil || conns > buckets*sim.P4Ways {
			return ""
		}
		loss, err = sim.RegisterSteadyLoss(buckets, sim.P4Ways, conns, 1)
		what = "evict a live flow's entry"
	case "tofino":
		g, gerr := tnaGeometry(c)
		if gerr != nil || conns > g.Slots() {
			return ""
		}
		loss, err = sim.TNASteadyLoss(g, conns, 1)
		what = "are refused an entry"
	default:
		return ""
	}
	if err != nil {
		return ""
	}
	return fmt.Sprintf("; at that occupancy %.2f%% of new flows %s (steady state, one sample of the model's geometry)", 100*loss, what)
}
