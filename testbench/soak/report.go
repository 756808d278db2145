package soak

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/lbc-dev/lbc/testbench/scenario"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Report file names in Options.Out.
const (
	SummaryTXT    = "summary.txt"
	SamplesCSV    = "samples.csv"
	RSSPNG        = "rss.png"
	GoroutinesPNG = "goroutines.png"
	FDsPNG        = "open-files.png"
)

// writeReport writes the summary, the samples and the three plots.
func writeReport(res *Result) error {
	var csv strings.Builder
	csv.WriteString("seconds,rss_bytes,goroutines,open_files,heap_goal_bytes\n")
	for _, s := range res.Samples {
		fmt.Fprintf(&csv, "%.3f,%.0f,%.0f,%.0f,%.0f\n", s.T.Seconds(), s.RSS, s.Goroutines, s.FDs, s.HeapGoal)
	}
	if err := os.WriteFile(filepath.Join(res.Out, SamplesCSV), []byte(csv.String()), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	for i, p := range []struct {
		file  string
		scale float64
		get   func(Sample) float64
	}{
		{RSSPNG, 1 << 20, func(s Sample) float64 { return s.RSS }},
		{GoroutinesPNG, 1, func(s Sample) float64 { return s.Goroutines }},
		{FDsPNG, 1, func(s Sample) float64 { return s.FDs }},
	} {
		if i >= len(res.Verdicts) {
			break
		}
		if err := plotSeries(filepath.Join(res.Out, p.file), res, res.Verdicts[i], p.scale, p.get); err != nil {
			return fmt.Errorf("report: %s: %w", p.file, err)
		}
	}
	if err := os.WriteFile(filepath.Join(res.Out, SummaryTXT), []byte(Summary(res)), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// Summary is the soak's text report.
func Summary(res *Result) string {
	var b strings.Builder
	verdict := "PASS"
	if !res.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "lbc soak: %s\n", verdict)
	fmt.Fprintf(&b, "lbc run against %s for %.0f s (asked: %s)\n", res.Target, res.Took.Seconds(), res.Duration)
	fmt.Fprintf(&b, "churn: %d health flaps (every %s: %s in turn), %d reloads (every %s: %s added or removed), scrapes of /metrics, /v1/status, /healthz every %s each: %s\n",
		res.Flaps, res.FlapEvery, strings.Join(flapping, " and "), res.Reloads, res.ReloadEvery, reloaded, res.ScrapeEvery, counts(res.Scrapes))
	if res.Took > 0 {
		fmt.Fprintf(&b, "lbc run used %.0f CPU seconds (%.0f %% of one core; not judged)\n", res.CPU, 100*res.CPU/res.Took.Seconds())
	}
	if len(res.Metrics) > 0 {
		fmt.Fprintf(&b, "lbc's counters at the end: %s\n", counts(res.Metrics))
	}
	fmt.Fprintf(&b, "\nflatness: median of the last quarter ≤ limit(median of the second quarter); the first quarter is warm-up\n")
	fmt.Fprintf(&b, "  tolerances: RSS +%s or +%.0f %% (whichever is more), goroutines +%.0f, open files +%.0f\n",
		Format(RSSTolerance.Abs, "MiB"), 100*RSSTolerance.Rel, GoroutinesTolerance.Abs, FDsTolerance.Abs)
	for _, v := range res.Verdicts {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	if h := res.HeapGoal; h.Samples > 0 {
		// What RSS's swings are made of; a leak raises the goal for good.
		fmt.Fprintf(&b, "  not judged: Go heap goal (go_memstats_next_gc_bytes, twice the live heap) median %s → %s, range %s..%s\n",
			Format(h.Base, h.Unit), Format(h.Last, h.Unit), Format(h.Min, h.Unit), Format(h.Max, h.Unit))
	}
	fmt.Fprintf(&b, "\nlog: %d lines (%s); expected lines: %s; unexpected: %d\n", res.Log.Lines, counts(res.Log.ByLevel), counts(res.Log.Expected), len(res.Log.Unexpected))
	for _, r := range ExpectedLog(flapping) {
		if r.Plain {
			fmt.Fprintf(&b, "  expected: a line with %q: %s\n", r.Msg, r.Why)
			continue
		}
		fmt.Fprintf(&b, "  expected: %s %q for %s=%s: %s\n", r.Level, r.Msg, r.Attr, strings.Join(r.Values, "|"), r.Why)
	}
	if len(res.Failures) > 0 {
		fmt.Fprintf(&b, "\nfailures:\n")
		for _, f := range res.Failures {
			fmt.Fprintf(&b, "  - %s\n", f)
		}
	}
	fmt.Fprintf(&b, "\nfiles: %s, %s, %s, %s, lbc-run.log, lb.yaml\n", SamplesCSV, RSSPNG, GoroutinesPNG, FDsPNG)
	return b.String()
}

// counts writes a map as "k v, k v" in key order.
func counts[V int | float64](m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %v", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

var (
	seriesBlue = color.RGBA{31, 119, 180, 255}
	baseGreen  = color.RGBA{44, 160, 44, 255}
	lastOrange = color.RGBA{255, 127, 14, 255}
	limitRed   = color.RGBA{R: 200, A: 255}
)

// plotSeries draws one series over time with the medians it was judged
// by, the limit, and the quarters' bounds.
func plotSeries(path string, res *Result, v Verdict, scale float64, get func(Sample) float64) error {
	unit := ""
	if v.Unit != "" {
		unit = " (" + v.Unit + ")"
	}
	p := plot.New()
	verdict := "flat"
	if !v.OK {
		verdict = "NOT flat"
	}
	p.Title.Text = fmt.Sprintf("lbc run, %s: %s", v.Name, verdict)
	p.X.Label.Text = "time since lbc run started (s)"
	p.Y.Label.Text = v.Name + unit
	p.Add(plotter.NewGrid())
	leg := plot.NewLegend()
	pts := make(plotter.XYs, len(res.Samples))
	ymax := 1.0
	for i, s := range res.Samples {
		pts[i] = plotter.XY{X: s.T.Seconds(), Y: get(s) / scale}
		ymax = math.Max(ymax, pts[i].Y)
	}
	total := res.Took.Seconds()
	seg := func(x0, x1, y float64, c color.Color, dash bool) (*plotter.Line, error) {
		l, err := plotter.NewLine(plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}})
		if err != nil {
			return nil, err
		}
		l.Color, l.Width = c, vg.Points(1.5)
		if dash {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		return l, nil
	}
	ymax = math.Max(ymax, v.Limit/scale)
	top := ymax * 1.15
	for _, q := range []float64{0.25, 0.5, 0.75} {
		l, err := plotter.NewLine(plotter.XYs{{X: q * total, Y: 0}, {X: q * total, Y: top}})
		if err != nil {
			return err
		}
		l.Color, l.Width = color.Gray{Y: 170}, vg.Points(1)
		p.Add(l)
	}
	if len(pts) > 0 {
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color, l.Width = seriesBlue, vg.Points(1)
		p.Add(l)
		leg.Add(v.Name, l)
	}
	if v.Limit > 0 {
		for _, s := range []struct {
			name      string
			x0, x1, y float64
			c         color.Color
			dash      bool
		}{
			{"median, 2nd quarter", v.BaseQuarter[0].Seconds(), v.BaseQuarter[1].Seconds(), v.Base / scale, baseGreen, false},
			{"median, last quarter", v.LastQuarter[0].Seconds(), v.LastQuarter[1].Seconds(), v.Last / scale, lastOrange, false},
			{"limit", v.LastQuarter[0].Seconds(), v.LastQuarter[1].Seconds(), v.Limit / scale, limitRed, true},
		} {
			l, err := seg(s.x0, s.x1, s.y, s.c, s.dash)
			if err != nil {
				return err
			}
			p.Add(l)
			leg.Add(s.name, l)
		}
	}
	p.X.Tick.Marker = scenario.SecondTicks
	p.X.Min, p.X.Max = 0, math.Max(total, 1)
	p.Y.Min, p.Y.Max = 0, top
	return scenario.SavePNG(p, leg, vg.Length(8)*vg.Inch, vg.Length(3.5)*vg.Inch, path)
}
