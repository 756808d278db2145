package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lbc-dev/lbc/compiler"
	"github.com/lbc-dev/lbc/internal/spelling"
	"github.com/urfave/cli/v2"
)

var statusCommand = &cli.Command{
	Name:      "status",
	Usage:     "print what a datapath holds: services, VIPs, rings, backends, counters",
	UsageText: "lbc status --target xdp --iface eth1 [--format text|json]",
	Description: `Reads the tables back from the datapath (for xdp: the pinned BPF maps, with
names from meta.json) and prints, per service, its VIPs, ring size and active
half, epoch, eligible set, and each backend's address, health, draining state
and the share of the active ring it owns, with packet and new-connection
counters. --format json prints {"ir": ..., "counters": ...}.

What it reads (the tables, every ring entry, the counters) is said on
stderr as it goes, with the time it took; stdout holds the status alone,
so --format json parses. --quiet (-q) silences the progress lines.`,
	Flags: append([]cli.Flag{targetFlag, controllerStatusFlag,
		&cli.StringFlag{Name: "format", Value: "text", Usage: "output `FORMAT`: text or json"}, quietFlag,
	}, readFlags()...),
	Action: func(c *cli.Context) error {
		format := c.String("format")
		if format != "text" && format != "json" {
			return fmt.Errorf("--format %q: use text or json", format)
		}
		if addr := c.String(controllerStatusFlag.Name); addr != "" {
			return controllerStatus(c, addr) // a running lbc run's live view
		}
		a, err := selectAdapter(c)
		if err != nil {
			return err
		}
		p := newProgress(c)
		p.Phase("connecting to %s", strings.TrimSuffix(targetDescription(c), arbitrationNote))
		tgt, err := a.OpenRead(c)
		if err != nil {
			return err
		}
		defer tgt.Close()
		p.Phase("reading the tables of %s", tgt.Name())
		ir, err := tgt.Read(c.Context)
		if err != nil {
			return fmt.Errorf("%s: read: %w", tgt.Name(), err)
		}
		p.Note("read %d services, %d backends, %d VIP rows and %s ring entries in %s", len(ir.Services), len(ir.Backends), len(ir.VIPs), commas(ir.RingEntries()), roundDuration(p.Elapsed()))
		var cnt *counters
		if a.Counters != nil {
			p.Phase("reading the counters of %s", tgt.Name())
			if cnt, err = a.Counters(tgt); err != nil {
				return fmt.Errorf("%s: counters: %w", tgt.Name(), err)
			}
		}
		p.Done("%s read", tgt.Name())
		var maps []mapUse
		if a.Maps != nil {
			if maps, err = a.Maps(tgt, ir); err != nil {
				return fmt.Errorf("%s: map sizes: %w", tgt.Name(), err)
			}
		}
		if format == "json" {
			enc := json.NewEncoder(c.App.Writer)
			enc.SetEscapeHTML(false) // "<", ">" and "&" as written (packets read "a > b"), not as \u003e
			enc.SetIndent("", "  ")
			return enc.Encode(struct {
				Target   string       `json:"target"`
				IR       *compiler.IR `json:"ir"`
				Counters *counters    `json:"counters,omitempty"`
				Maps     []mapUse     `json:"maps,omitempty"`
			}{tgt.Name(), ir, cnt, maps})
		}
		writeStatus(c.App.Writer, tgt.Name(), ir, cnt)
		writeMaps(c.App.Writer, maps)
		return nil
	},
}

func writeStatus(w io.Writer, name string, ir *compiler.IR, cnt *counters) {
	fmt.Fprintf(w, "%s: %s, %s, %s\n", name, spelling.Count(len(ir.Services), "service"), spelling.Count(len(ir.VIPs), "VIP row"), spelling.Count(len(ir.Backends), "backend"))
	for _, s := range ir.Services {
		fmt.Fprintf(w, "\nservice %s (id %d)  ring %d slots, half %d, epoch %d, idle %ds", s.Name, s.ID, s.RingSize, s.ActiveHalf, s.Epoch, s.IdleTimeoutSec)
		if s.NoBackends {
			fmt.Fprint(w, "  NO BACKENDS: new connections dropped")
		}
		fmt.Fprintln(w)
		for _, v := range ir.VIPs {
			if v.ServiceID == s.ID {
				switch v.Key.Kind {
				case compiler.MatchPort:
					fmt.Fprintf(w, "  vip %s proto %s port %d\n", v.Key.VIP, v.Key.Proto, v.Key.Port)
				case compiler.MatchAllPorts:
					fmt.Fprintf(w, "  vip %s proto %s all ports\n", v.Key.VIP, v.Key.Proto)
				default:
					fmt.Fprintf(w, "  vip %s any protocol\n", v.Key.VIP)
				}
			}
		}
		if s.Decision != "" {
			fmt.Fprintf(w, "  eligible (%s, %s): %s\n", s.Decision, s.Rule, strings.Join(s.Eligible, ", "))
		}
		if c := cnt; c != nil {
			if sc, ok := c.Services[s.ID]; ok {
				// Only what the datapath counts: per-service drops (XDP),
				// ICMP errors about a tracked flow with no entry (R-CT-3).
				fmt.Fprintf(w, "  packets %d, bytes %d, new connections %d", sc["packets"], sc["bytes"], sc["new"])
				if n, ok := sc["drops"]; ok {
					fmt.Fprintf(w, ", drops %d", n)
				}
				if n, ok := sc["icmp_error_misses"]; ok {
					fmt.Fprintf(w, ", ICMP errors without a connection %d", n)
				}
				fmt.Fprintln(w)
			}
		}
		slots := map[uint32]int{}
		for _, b := range ir.ActiveRing(&s) {
			slots[b]++
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  backend\tid\taddress\thealth\tslots\tshare\tpackets\tnew\t")
		for _, b := range ir.Backends {
			if b.ServiceID != s.ID {
				continue
			}
			health := "healthy"
			if !b.Healthy {
				health = "UNHEALTHY"
			}
			if b.Draining {
				health += ",draining"
			}
			if b.Deadline != 0 {
				// Deadlines are on the compile clock: Unix time for push and run.
				health += fmt.Sprintf(",entries-until=%s(%s)", time.Unix(0, int64(b.Deadline)).UTC().Format(time.RFC3339), b.DeadlineRule)
			}
			share := "-"
			if s.RingSize > 0 && slots[b.ID] > 0 {
				share = fmt.Sprintf("%.2f%%", 100*float64(slots[b.ID])/float64(s.RingSize))
			}
			// "-": a datapath that does not count it (the P4 programs count
			// a backend's new connections, not its packets).
			pk, nw := "-", "-"
			if cnt != nil {
				if v, ok := cnt.Backends[b.ID]["packets"]; ok {
					pk = strconv.FormatUint(v, 10)
				}
				if v, ok := cnt.Backends[b.ID]["new"]; ok {
					nw = strconv.FormatUint(v, 10)
				}
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t\n", b.Name, b.ID, b.IP, health, slots[b.ID], share, pk, nw)
		}
		tw.Flush()
	}
	if cnt != nil && len(cnt.Global) > 0 {
		fmt.Fprintln(w, "\ncounters:")
		for _, k := range counterNames(cnt.Global) {
			fmt.Fprintf(w, "  %-22s %d\n", k, cnt.Global[k])
		}
	}
}

func counterNames(m map[string]uint64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// writeMaps prints the sizes of the maps, set when they were created.
func writeMaps(w io.Writer, maps []mapUse) {
	if len(maps) == 0 {
		return
	}
	fmt.Fprintln(w, "\nmaps (sized when created: docs/xdp.md#map-sizes):")
	for _, m := range maps {
		if m.Used == nil {
			fmt.Fprintf(w, "  %-10s %10d %s (%s)\n", m.Map, m.Size, m.Holds, m.Flag)
			continue
		}
		fmt.Fprintf(w, "  %-10s %10d of %d %s (%s)\n", m.Map, *m.Used, m.Size, m.Holds, m.Flag)
	}
}
