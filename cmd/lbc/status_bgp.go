package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lbc-dev/lbc/controller"
)

// writeAnnounceStatus prints the BGP sessions and VIPs of `lbc run --bgp`.
func writeAnnounceStatus(w io.Writer, as *controller.AnnounceStatus) {
	if as == nil {
		return
	}
	fmt.Fprintf(w, "\n%s: AS %d, router ID %s", strings.ToUpper(as.Protocol), as.LocalASN, as.RouterID)
	if !as.Healthy {
		fmt.Fprintf(w, " — %s", as.Problem)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  PEER\tAS\tSTATE\tSINCE\tFLAPS\tADVERTISED\tLAST ERROR")
	for _, p := range as.Peers {
		since := "-"
		if !p.Since.IsZero() {
			since = p.Since.Local().Format(time.TimeOnly)
		}
		last := p.LastError
		if last == "" {
			last = "-"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%d\t%d\t%s\n", p.Address, p.ASN, p.State, since, p.Flaps, p.Advertised, last)
	}
	tw.Flush()
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  VIP\tANNOUNCED\tCOMMUNITIES\tLOCAL-PREF\tWHY NOT")
	for _, v := range as.VIPs {
		ann := "yes"
		why := "-"
		if !v.Announced {
			ann, why = "WITHDRAWN", v.Why
		}
		comm := strings.Join(v.Communities, ",")
		if comm == "" {
			comm = "-"
		}
		lp := "-"
		if v.LocalPref > 0 {
			lp = fmt.Sprint(v.LocalPref)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", v.Prefix, ann, comm, lp, why)
	}
	tw.Flush()
}
