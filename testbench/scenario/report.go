package scenario

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
)

// writeReport writes report.md, report.json and the plots into the output
// directory and lists them in res.Files.
func (r *runner) writeReport(res *Result) error {
	var errs []string
	plots, err := writePlots(r.out, r.sc, res)
	if err != nil {
		errs = append(errs, err.Error())
	}
	res.Files = append(res.Files, "report.md", "report.json", "lb.yaml", "controller.log")
	res.Files = append(res.Files, plots...)

	var b strings.Builder
	writeMarkdown(&b, r.sc, res, plots)
	if err := os.WriteFile(filepath.Join(r.out, "report.md"), []byte(b.String()), 0o644); err != nil {
		errs = append(errs, err.Error())
	}
	js, err := json.MarshalIndent(res, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(r.out, "report.json"), js, 0o644)
	}
	if err != nil {
		errs = append(errs, err.Error())
	}
	if r.opts.OutDir != "" {
		r.progress("report written to %s (%s)", r.out, strings.Join(res.Files, ", "))
	}
	if len(errs) > 0 {
		return fmt.Errorf("report: %s", strings.Join(errs, "; "))
	}
	return nil
}

func writeMarkdown(w io.Writer, sc *Scenario, res *Result, plots []string) {
	status := "PASSED"
	if len(res.Failures) > 0 {
		status = fmt.Sprintf("FAILED (%d assertion(s))", len(res.Failures))
	}
	fmt.Fprintf(w, "# Scenario %q — %s\n\n", sc.Name, status)
	if sc.Description != "" {
		fmt.Fprintf(w, "%s\n\n", strings.TrimSpace(sc.Description))
	}
	fmt.Fprintf(w, "- file: `%s`\n- topology: %s — %s\n- started %s, took %.1f s; %d flows\n",
		res.File, res.Topology, res.Env, res.Started.UTC().Format("2006-01-02 15:04:05Z"), res.Took.Seconds(), len(res.Flows))
	if res.Controller == ControllerProcess {
		fmt.Fprintf(w, "- controller: an lbc run process (controller: process); its output in controller.log\n")
	}
	fmt.Fprintf(w, "- datapath packets of the service: %s\n\n", datapathShares(res.Datapaths))
	if len(res.Failures) > 0 {
		fmt.Fprintf(w, "## Failed assertions\n\n")
		for _, f := range res.Failures {
			fmt.Fprintf(w, "- %s\n", f.Msg)
		}
		fmt.Fprintln(w)
	}
	for _, p := range plots {
		if !strings.HasPrefix(p, "fault-") { // those go with their step
			fmt.Fprintf(w, "![%s](%s)\n\n", p, p)
		}
	}
	for _, sr := range res.Steps {
		fmt.Fprintf(w, "## Step %d: %s (%.1f s – %.1f s)\n\n", sr.Index+1, sr.Name, sr.Start.Seconds(), sr.End.Seconds())
		st := sc.Steps[sr.Index]
		fmt.Fprintf(w, "Faults: %s. Traffic: %g/s for %s (tcp %g, udp %g, frag %g; keep %g). Shares counted from %.2f s.\n\n",
			faultList(st.Faults), st.Traffic.Rate, st.Traffic.Duration.D(), st.Traffic.Mix.TCP, st.Traffic.Mix.UDP, st.Traffic.Mix.Frag, st.Traffic.Keep, sr.Settle.Seconds())
		for _, n := range sr.Notes {
			fmt.Fprintf(w, "- note: %s\n", n)
		}
		if len(sr.DatapathPackets) > 0 {
			fmt.Fprintf(w, "- datapath packets in this step: %s\n", datapathShares(sr.DatapathPackets))
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "```")
		writeStepTable(w, sr, true)
		fmt.Fprintln(w, "```")
		fmt.Fprintln(w)
		for _, c := range sr.Checks {
			mark := "✅"
			if !c.OK {
				mark = "❌"
			}
			fmt.Fprintf(w, "- %s **%s**: %s\n", mark, c.Name, c.Msg)
		}
		fmt.Fprintln(w)
		for _, rc := range sr.Recoveries {
			if rc.Plot != "" {
				fmt.Fprintf(w, "![%s](%s)\n\n", rc.Plot, rc.Plot)
			}
		}
	}
	fmt.Fprintf(w, "## Faults\n\n| t (s) | step | fault | note |\n|---|---|---|---|\n")
	for _, f := range res.Faults {
		note := f.Note
		if f.Err != "" {
			note = "ERROR: " + f.Err
		}
		fmt.Fprintf(w, "| %.2f | %d | %s | %s |\n", f.T.Seconds(), f.Step+1, f.Fault, note)
	}
	fmt.Fprintf(w, "\n## Ring changes\n\n| t (s) | step | decision | eligible | shares |\n|---|---|---|---|---|\n")
	for _, rs := range res.Rings {
		var parts []string
		for _, n := range res.Backends {
			if v, ok := rs.Backends[n]; ok {
				parts = append(parts, fmt.Sprintf("%s %.1f%%", n, 100*v.Share))
			}
		}
		fmt.Fprintf(w, "| %.2f | %d | %s (%s) | %s | %s |\n", rs.T.Seconds(), rs.Step+1, rs.Decision, rs.Rule, strings.Join(rs.Eligible, ", "), strings.Join(parts, ", "))
	}
}

// datapathShares prints packets per datapath with shares.
func datapathShares(m map[string]uint64) string {
	var total uint64
	var keys []string
	for k, v := range m {
		total += v
		keys = append(keys, k)
	}
	if total == 0 {
		return "none counted"
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d (%.1f %%)", k, m[k], 100*float64(m[k])/float64(total)))
	}
	return strings.Join(parts, ", ")
}

// writeStepTable prints a step's table (indent for progress output).
func writeStepTable(w io.Writer, sr *StepResult, plain bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	indent := "          "
	if plain {
		indent = ""
	}
	fmt.Fprintf(tw, "%sbackend\tnew tcp\tudp\tfrag\tcounted\tshare\texpected (bounds)\tring before\tring after\tkept alive\tbroken\trestart-closed\tdatapath new\t\n", indent)
	for _, row := range sr.Rows {
		exp := "-"
		if row.Expect == 0 && row.Judged {
			exp = "0"
		} else if row.Expect > 0 || row.Judged {
			exp = fmt.Sprintf("%.1f%% %d–%d", 100*row.Expect, row.Low, row.High)
		}
		share := "-"
		if row.Judged || row.Counted > 0 {
			share = fmt.Sprintf("%.1f%%", 100*row.Share)
		}
		dpNew := "-" // counters unreadable in this step
		if sr.DatapathNew != nil {
			dpNew = fmt.Sprint(row.DatapathNew)
		}
		fmt.Fprintf(tw, "%s%s\t%d\t%d\t%d\t%d\t%s\t%s\t%.1f%%\t%.1f%%\t%d\t%d\t%d\t%s\t\n", indent, row.Backend, row.NewTCP, row.UDP, row.Frag,
			row.Counted, share, exp, 100*row.RingBefore, 100*row.RingAfter, row.KeptAlive, row.KeptBroken, row.KeptRestart, dpNew)
	}
	tw.Flush()
}
