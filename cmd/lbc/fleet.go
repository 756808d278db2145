package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/lbc-dev/lbc/controller"
	"github.com/lbc-dev/lbc/fleet"
)

var runFleetFlag = &cli.StringFlag{Name: "fleet", Usage: "share this node's conntrack exceptions with the fleet's other nodes as `fleet.yaml` says (node name, listen address, fleet CA, certificate and key, peers; docs/fleet.md): flows keep their backend when ECMP moves them to another node, even while backends change (R-FLEET)"}

var fleetCommand = &cli.Command{
	Name:  "fleet",
	Usage: "fleet tools: certificates for the nodes that share conntrack exceptions",
	Subcommands: []*cli.Command{{
		Name:      "certs",
		Usage:     "make a fleet CA and a certificate for each node (mutual TLS between lbc run --fleet nodes)",
		ArgsUsage: "NODE...",
		Description: `lbc fleet certs writes, for each NODE, NODE.pem and NODE-key.pem: ECDSA
P-256, common name and DNS name NODE, for both server and client
authentication, signed by the fleet CA in --out (ca.pem, ca-key.pem). When
--out has no CA, it makes one first; when it has one, it signs with it, so
that a node added later is trusted by the nodes already running. It never
replaces a file: a node that already has a certificate, or a CA without its
key, is an error and nothing is written. Give each node its own pair and
ca.pem; keep ca-key.pem off the nodes. A node accepts a peer only with a
certificate of this CA whose name its fleet.yaml lists under peers.

Examples:
   lbc fleet certs --out /etc/lbc/fleet n1 n2 n3   # a new CA and three nodes
   lbc fleet certs --out /etc/lbc/fleet n4         # one more node, same CA`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Value: ".", Usage: "write the files into `DIR`"},
			&cli.DurationFlag{Name: "valid", Value: 365 * 24 * time.Hour, Usage: "validity `DURATION` of every certificate"},
		},
		Action: func(c *cli.Context) error {
			nodes := c.Args().Slice()
			if len(nodes) == 0 {
				return errors.New("name at least one node: lbc fleet certs --out DIR n1 n2 n3")
			}
			for _, n := range nodes {
				if n == "" || n == "ca" || strings.ContainsAny(n, "/ \t") {
					return fmt.Errorf("node name %q: want a plain name (not ca, no slash or space), the one fleet.yaml uses", n)
				}
			}
			reused, err := fleet.WriteCerts(c.String("out"), nodes, c.Duration("valid"))
			if err != nil {
				return fmt.Errorf("fleet certs: %w", err)
			}
			if reused {
				fmt.Fprintf(c.App.Writer, "signed a certificate and key for %s with the existing CA in %s (ca.pem unchanged)\n", strings.Join(nodes, ", "), c.String("out"))
			} else {
				fmt.Fprintf(c.App.Writer, "wrote a new CA (ca.pem, ca-key.pem) and a certificate and key for %s in %s\n", strings.Join(nodes, ", "), c.String("out"))
			}
			return nil
		},
	}},
}

// writeFleetStatus prints what `lbc run --fleet` shares and receives.
func writeFleetStatus(w io.Writer, fs *controller.FleetStatus) {
	if fs == nil {
		return
	}
	fmt.Fprintf(w, "\nFLEET: node %s on %s, snapshot %d: %d exceptions published", fs.Node, fs.Listen, fs.Snapshot, fs.Published)
	if !fs.PublishedAt.IsZero() {
		fmt.Fprintf(w, " at %s", fs.PublishedAt.Local().Format("15:04:05.000"))
	}
	fmt.Fprintln(w)
	if fs.Problem != "" {
		fmt.Fprintf(w, "  PROBLEM: %s\n", fs.Problem)
	}
	if len(fs.Rejected) > 0 {
		fmt.Fprintf(w, "  rejected connections: %s\n", counts(fs.Rejected))
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  PEER\tADDRESS\tSTREAM\tACKED\tSYNC LAG\tINSTALLED\tRECEIVED\tREFUSED\tLAST ERROR")
	for _, p := range fs.Peers {
		up := "down"
		if p.Connected {
			up = "up"
		}
		last := p.LastError
		if last == "" {
			last = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\n", p.Name, p.Address, up, p.Acked, p.SyncLag.Round(time.Millisecond), p.Installed, p.Received, counts(p.Refused), last)
	}
	tw.Flush()
}

// counts renders reason → count as "a 1, b 2" (sorted), or "-".
func counts(m map[string]uint64) string {
	if len(m) == 0 {
		return "-"
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for i, k := range ks {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	return b.String()
}
