package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/lbc-dev/lbc/targets"
	"github.com/lbc-dev/lbc/targets/sim"
	"github.com/lbc-dev/lbc/trace"
	"github.com/urfave/cli/v2"
)

var explainCommand = &cli.Command{
	Name:      "explain",
	Usage:     "show every decision for one packet, with its rule ID",
	UsageText: `lbc explain [-c lb.yaml] [--health health.yaml] --packet "tcp 198.51.100.7:4242 > 203.0.113.10:80 S" [--trace t.jsonl] [--at SEC] [--json]`,
	Description: `Runs one packet through the reference datapath (targets/sim) and prints each
decision of the per-packet algorithm with the rule of docs/semantics.md that
made it (each rule ID is a section there: docs/semantics.md#r-ct-1): the
service matched, conntrack admission (R-CT-1/2/3), the tracking tuple and its bytes (R-TRK), entry validity (R-AGE, R-EPOCH,
R-DRAIN, R-PERSIST, R-PERSIST-CAP: a backend's deadline and the rule that
set it), the affinity tuple and its bytes (R-AFF), the CRC32 hash
(R-HASH), the ring slot (R-MAGLEV-1), the eligible set and the rule that
chose it (R-ELIG), the backend and the encapsulation.

The packet notation (PROTO: tcp, udp, icmp, icmpv6, esp, gre, ipip, ipv6 or
a number 0..255; FLAGS: TCP flag letters of SAFRP; len= the IP packet's length
and df its don't-fragment bit, for R-MTU; vlan= an 802.1Q tag, R-VLAN):
   PROTO SRC[:PORT] > DST[:PORT] [FLAGS] [frag=first|middle|last] [id=N] [len=N] [vlan=N] [df] [type=N code=N] [quote=PROTO SRC:PORT>DST:PORT]
   tcp 198.51.100.7:4242 > 203.0.113.10:80 S
   udp [2001:db8::7]:5000 > [2001:db8::10]:53
   udp 198.51.100.7 > 203.0.113.30 frag=middle id=7
   icmp 192.0.2.254 > 203.0.113.10 type=3 code=4 quote=tcp 203.0.113.10:80>198.51.100.7:4242
   ipip 198.51.100.7 > 203.0.113.30

ipip and ipv6 are IP protocols 4 (IPv4 in IP) and 41 (IPv6 in IPv4), as
/etc/protocols names them: "ipv6" is what the packet carries, not its family.
lbc does not open such a packet: like esp or gre it is balanced on its outer
header, so only a VIP with protocol: L3_DEFAULT takes it. With
-c examples/udp-fragments.yaml the ipip line above goes to a backend of
"media" in a second IP-in-IP header (with --fallback, to the fallback port);
sent to the embedded example's TCP VIP, 203.0.113.10, it is not-ours.

Conntrack starts empty; --trace replays a trace first (its packets create
entries, its events change health and configuration), and the packet then
runs at --at seconds (default: the trace's last time).`,
	Flags: []cli.Flag{configFlag, healthFlag,
		&cli.StringFlag{Name: "packet", Aliases: []string{"p"}, Required: true, Usage: "the `PACKET`, e.g. \"tcp 198.51.100.7:4242 > 203.0.113.10:80 S\""},
		&cli.StringFlag{Name: "trace", Usage: "replay trace `FILE` first, to build conntrack and state"},
		&cli.StringFlag{Name: "at", Usage: "virtual time in `SECONDS` of the packet, 0..1e9 like a trace's t (default: the trace's last time, or 0)"},
		fallbackFlag, pushOnlyFlag,
		&cli.BoolFlag{Name: "json", Usage: "print JSON for machines"},
	},
	Action: func(c *cli.Context) error {
		pkt, err := trace.ParsePacketSpec(c.String("packet"))
		if err != nil {
			return fmt.Errorf("--packet: %w", err)
		}
		l, err := loadConfig(c, c.App.ErrWriter)
		if err != nil {
			return err
		}
		ctx := c.Context
		if ctx == nil {
			ctx = context.Background()
		}
		dp := sim.New(sim.Options{Fallback: c.Bool(fallbackFlag.Name)})
		rp, err := trace.NewReplayer(ctx, l.Config, l.State, dp, dp)
		if err != nil {
			return err
		}
		rp.PushOnly = c.Bool(pushOnlyFlag.Name)
		last := 0.0
		if name := c.String("trace"); name != "" {
			if last, err = replayQuietly(ctx, rp, name); err != nil {
				return err
			}
		}
		at := last
		if c.IsSet("at") {
			if at, err = parseAt(c.String("at")); err != nil {
				return err
			}
		}
		if at < last {
			return fmt.Errorf("--at %g is before the trace's last time %g", at, last)
		}
		// Draining deadlines up to the packet's time apply first.
		if _, err := rp.Advance(ctx, at); err != nil {
			return err
		}
		v, det, err := dp.ProcessDetail(pkt, trace.Duration(at))
		if err != nil {
			return err
		}
		if c.Bool("json") {
			return writeExplainJSON(c.App.Writer, pkt, at, v, det)
		}
		writeExplainText(c.App.Writer, pkt, at, v, det)
		return nil
	},
}

// maxAt is the latest time explain runs a packet at: a trace's times go
// up to 1e9 s (about 31 years), well inside the datapaths' clocks.
const maxAt = 1e9

// parseAt reads --at: seconds, finite, in 0..maxAt.
func parseAt(s string) (float64, error) {
	at, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("--at %q: want seconds, e.g. --at 12.5", s)
	case math.IsNaN(at) || math.IsInf(at, 0) || at < 0 || at > maxAt:
		return 0, fmt.Errorf("--at %s: want seconds in 0..1e9 (the range of a trace's t)", s)
	}
	return at, nil
}

func replayQuietly(ctx context.Context, rp *trace.Replayer, name string) (float64, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	rd := trace.NewReader(f, name)
	last := 0.0
	for {
		line, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return last, nil
		}
		if err != nil {
			return 0, err
		}
		rp.PushOnly = rp.PushOnly || rd.Header().PushOnly
		if _, err := rp.Step(ctx, line); err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		last = line.T
	}
}

type explainJSON struct {
	Packet     string         `json:"packet"`
	T          float64        `json:"t"`
	Action     string         `json:"action"`
	Service    string         `json:"service,omitempty"`
	Backend    string         `json:"backend,omitempty"`
	BackendID  uint32         `json:"backendID,omitempty"`
	CT         string         `json:"ct,omitempty"`
	DropReason string         `json:"drop,omitempty"`
	Steps      []targets.Step `json:"steps"`
	// RuleDocs links every rule ID of the steps to its section of
	// docs/semantics.md.
	RuleDocs map[string]string `json:"ruleDocs"`
	Detail   sim.Detail        `json:"detail"`
}

// semanticsDoc is where the rules are explained, relative to the
// repository root.
const semanticsDoc = "docs/semantics.md"

// ruleDoc returns the section of docs/semantics.md that explains a step's
// rule: R-ELIG-3d is under R-ELIG-3; labels of stages that are no rule
// (LOOKUP, ENCAP, ...) share one section.
func ruleDoc(rule string) string {
	if !strings.HasPrefix(rule, "R-") {
		return semanticsDoc + "#steps-that-are-not-rules"
	}
	id := strings.ToLower(rule)
	if n := len(id); n > 2 && id[n-1] >= 'a' && id[n-1] <= 'e' && id[n-2] >= '0' && id[n-2] <= '9' {
		id = id[:n-1] // a branch of R-ELIG-3/4
	}
	return semanticsDoc + "#" + id
}

func writeExplainJSON(w io.Writer, p targets.Packet, at float64, v targets.Verdict, d sim.Detail) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // "<", ">" and "&" as written (packets read "a > b"), not as \u003e
	enc.SetIndent("", "  ")
	docs := map[string]string{}
	for _, s := range v.Steps {
		docs[s.Rule] = ruleDoc(s.Rule)
	}
	return enc.Encode(explainJSON{Packet: trace.FormatPacket(p), T: at, Action: v.Action.String(), Service: v.Service,
		Backend: v.Backend, BackendID: v.BackendID, CT: v.CT, DropReason: v.DropReason, Steps: v.Steps, RuleDocs: docs, Detail: d})
}

func writeExplainText(w io.Writer, p targets.Packet, at float64, v targets.Verdict, d sim.Detail) {
	fmt.Fprintf(w, "packet  %s  at t=%gs\n", trace.FormatPacket(p), at)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range v.Steps {
		fmt.Fprintf(tw, "  %s\t%s\n", s.Rule, s.Detail)
	}
	tw.Flush()
	switch v.Action {
	case targets.Forward:
		fmt.Fprintf(w, "verdict forward to %s (%s), ct %s\n", v.Backend, d.BackendIP, v.CT)
	case targets.Drop:
		fmt.Fprintf(w, "verdict drop (%s)", v.DropReason)
		if v.CT != "" {
			fmt.Fprintf(w, ", ct %s", v.CT)
		}
		fmt.Fprintln(w)
	case targets.TooBig:
		fmt.Fprintf(w, "verdict too-big: ICMP answer from the VIP, next-hop MTU %d (backend %s), ct %s\n", v.MTU, v.Backend, v.CT)
	default:
		fmt.Fprintf(w, "verdict %s\n", v.Action)
	}
	var refs []string
	for _, r := range trace.Rules(v) {
		if strings.HasPrefix(r, "R-") {
			if ref := strings.TrimPrefix(ruleDoc(r), semanticsDoc); !slices.Contains(refs, ref) {
				refs = append(refs, ref)
			}
		}
	}
	if len(refs) > 0 {
		fmt.Fprintf(w, "rules: %s %s\n", semanticsDoc, strings.Join(refs, " "))
	}
}
