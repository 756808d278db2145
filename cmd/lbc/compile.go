package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/urfave/cli/v2"
)

var compileCommand = &cli.Command{
	Name:      "compile",
	Usage:     "compute eligible sets and Maglev rings, and print the datapath tables",
	UsageText: "lbc compile [-c lb.yaml] [--health health.yaml] [--format text|json]",
	Description: `Compiles the configuration for the given health state: for each service the
eligible set and the rule that chose it (R-ELIG), the weighted Maglev ring
(its size, whether ringSize auto chose it, its worst share error, and the fill
that built it: EARLIEST_RANK by default, PROBE_STRIDE when the service sets
ringFill) and each backend's share of its slots, and the target-independent
tables (VIP, service, ring, backend) that 'lbc push' writes.

ringSize auto (the default) picks the smallest power of two at which every
endpoint's share is within ringPrecision (default 0.01, 1 %) of its ideal:
1024 slots for 8 endpoints, 2048 for 16 (docs/semantics.md, "ringSize auto").

Without -c, the embedded examples/failover.yaml is compiled. --format json
prints, per service, eligible, decision, rule, ring {size, auto, shareError,
activeHalf, fill, counts}, epoch, and the IR tables under "ir".`,
	Flags: []cli.Flag{configFlag, healthFlag,
		&cli.StringFlag{Name: "format", Value: "text", Usage: "output `FORMAT`: text (for people) or json"},
	},
	Action: func(c *cli.Context) error {
		format := c.String("format")
		if format != "text" && format != "json" {
			return fmt.Errorf("--format %q: use text or json", format)
		}
		l, err := loadConfig(c, c.App.ErrWriter)
		if err != nil {
			return err
		}
		res, err := compiler.Compile(compiler.Input{Config: l.Config, State: l.State})
		if err != nil {
			return err
		}
		if format == "json" {
			return writeCompileJSON(c.App.Writer, l, res)
		}
		writeCompileText(c.App.Writer, l, res)
		return nil
	},
}

type ringJSON struct {
	Size int `json:"size"`
	// Auto: ringSize auto chose the size; ShareError is the ring's worst
	// relative share error (0.004 = 0.4 %).
	Auto       bool           `json:"auto"`
	ShareError float64        `json:"shareError"`
	ActiveHalf uint8          `json:"activeHalf"`
	Fill       string         `json:"fill"`
	Counts     map[string]int `json:"counts"`
}

type serviceJSON struct {
	Name     string   `json:"name"`
	VIP      string   `json:"vip"`
	Eligible []string `json:"eligible"`
	Decision string   `json:"decision"`
	Rule     string   `json:"rule"`
	Epoch    uint32   `json:"epoch"`
	Ring     ringJSON `json:"ring"`
}

func writeCompileJSON(w io.Writer, l *loaded, res *compiler.Result) error {
	out := struct {
		Services []serviceJSON `json:"services"`
		IR       *compiler.IR  `json:"ir"`
	}{IR: res.IR}
	x := res.IR.Index() // one lookup per service, not a scan of all of them
	for i, sr := range res.Services {
		row := x.ServiceByName(sr.Name)
		sj := serviceJSON{Name: sr.Name, VIP: l.Config.Services[i].VIP, Eligible: row.Eligible, Decision: sr.Decision.Kind, Rule: sr.Decision.Rule, Epoch: row.Epoch,
			Ring: ringJSON{Size: len(sr.Ring.Slots), Auto: row.RingAuto, ShareError: row.ShareError, ActiveHalf: row.ActiveHalf, Fill: string(sr.Ring.Fill), Counts: map[string]int{}}}
		if sj.Eligible == nil {
			sj.Eligible = []string{}
		}
		for k, m := range sr.Ring.Members {
			sj.Ring.Counts[m.Name] = sr.Ring.Counts[k]
		}
		out.Services = append(out.Services, sj)
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // "<", ">" and "&" as written (packets read "a > b"), not as \u003e
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func writeCompileText(w io.Writer, l *loaded, res *compiler.Result) {
	x := res.IR.Index()
	for i, sr := range res.Services {
		s := &l.Config.Services[i]
		row := x.ServiceByName(sr.Name)
		ports := "ALL"
		if !s.Ports.All && len(s.Ports.List) > 0 {
			ps := make([]string, len(s.Ports.List))
			for k, p := range s.Ports.List {
				ps[k] = fmt.Sprint(p)
			}
			ports = strings.Join(ps, ",")
		}
		lb := s.LocalityLbPolicy
		if lb == "" {
			lb = compiler.LbMaglev
		}
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "service %s  %s %s/%s  %s  affinity %s  %s\n", s.Name, s.VIP, s.Protocol, ports, lb, s.Affinity(), s.TrackingMode())
		size := "ringSize"
		if s.RingAuto() {
			size = fmt.Sprintf("auto: %d endpoints at ringPrecision %g", s.EndpointCount(), s.Precision())
		}
		fmt.Fprintf(w, "  decision %s (%s), epoch %d, ring %d slots (%s; worst share error %.2f%%; half %d, fill %s)\n",
			sr.Decision.Kind, sr.Decision.Rule, row.Epoch, len(sr.Ring.Slots), size, 100*row.ShareError, row.ActiveHalf, sr.Ring.Fill)
		counts := map[string]int{}
		for k, m := range sr.Ring.Members {
			counts[m.Name] = sr.Ring.Counts[k]
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  backend\tgroup\trole\thealth\tweight\tslots\tshare\t")
		k := 0
		for _, g := range s.Backends {
			role := "primary"
			if g.Failover {
				role = "failover"
			}
			for _, e := range g.Endpoints {
				m := sr.Members[k]
				k++
				health := "healthy"
				if !m.Healthy {
					health = "UNHEALTHY"
				}
				weight := "-"
				if s.Weighted() {
					weight = fmt.Sprint(m.Weight)
				}
				n := counts[e.Name]
				share := "-"
				if n > 0 {
					share = fmt.Sprintf("%.2f%%", 100*float64(n)/float64(len(sr.Ring.Slots)))
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\t%s\t\n", e.Name, g.Name, role, health, weight, n, share)
			}
		}
		tw.Flush()
	}
	c := res.IR
	fmt.Fprintf(w, "\ntables: %d vip, %d service, %d ring, %d backend entries\n", len(c.VIPs), len(c.Services), c.RingEntries(), len(c.Backends))
}
