package scenario

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plot file names in the report directory.
const (
	ConnectionsPNG = "connections.png"
	RingSharesPNG  = "ring-shares.png"
)

// writePlots draws the report's PNGs and returns their names.
func writePlots(dir string, sc *Scenario, res *Result) ([]string, error) {
	var out []string
	if err := plotConnections(filepath.Join(dir, ConnectionsPNG), sc, res); err != nil {
		return out, fmt.Errorf("%s: %w", ConnectionsPNG, err)
	}
	out = append(out, ConnectionsPNG)
	if err := plotRingShares(filepath.Join(dir, RingSharesPNG), sc, res); err != nil {
		return out, fmt.Errorf("%s: %w", RingSharesPNG, err)
	}
	out = append(out, RingSharesPNG)
	fp, err := writeFaultPlots(dir, sc, res)
	out = append(out, fp...)
	return out, err
}

const bin = 1.0 // seconds per point of the connections plot

// faultRed marks faults on the connections plot; no backend has a red.
var faultRed = color.RGBA{R: 200, A: 255}

// palette has a distinct colour for each of MaxBackends backends (Tableau
// 10 without its red, which marks faults, then darker and lighter
// variants).
var palette = []color.RGBA{
	{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {148, 103, 189, 255},
	{140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255}, {188, 189, 34, 255},
	{23, 190, 207, 255}, {0, 0, 128, 255}, {128, 64, 0, 255}, {0, 100, 0, 255},
	{255, 215, 0, 255}, {0, 128, 128, 255}, {190, 174, 212, 255}, {255, 187, 120, 255},
}

func colorOf(i int) color.Color { return palette[i%len(palette)] }

// flowBins counts new flows per backend (and failed ones) in bins of bin
// seconds. Only whole bins are counted: the run's last, partial bin would
// look like a collapse to 0.
func flowBins(res *Result, backends []string) (series map[string][]float64, failed []float64, n int) {
	n = int(math.Floor(res.Took.Seconds()/bin + 1e-9))
	series = map[string][]float64{}
	for _, b := range backends {
		series[b] = make([]float64, n)
	}
	failed = make([]float64, n)
	for _, f := range res.Flows {
		i := int(f.Start.Seconds() / bin)
		if i < 0 || i >= n {
			continue
		}
		if f.Err != "" {
			failed[i]++
		} else if s, ok := series[f.Backend]; ok {
			s[i]++
		}
	}
	return series, failed, n
}

// plotConnections writes connectionsPlot as a PNG, its legend beside it.
func plotConnections(path string, sc *Scenario, res *Result) error {
	p, leg, err := connectionsPlot(sc, res)
	if err != nil {
		return err
	}
	return saveWithLegend(p, leg, vg.Length(11)*vg.Inch, vg.Length(5)*vg.Inch, path)
}

// connectionsPlot: new flows per backend in each second, failed flows,
// step boundaries and fault markers.
func connectionsPlot(sc *Scenario, res *Result) (*plot.Plot, plot.Legend, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: new flows per backend", sc.Name)
	p.X.Label.Text = "time since start (s)"
	p.Y.Label.Text = fmt.Sprintf("new flows in each %g s", bin)
	p.Add(plotter.NewGrid()) // first: behind the data
	leg := plot.NewLegend()
	series, failed, nb := flowBins(res, res.Backends)
	ymax := 1.0
	add := func(name string, ys []float64, c color.Color, dashed bool) error {
		pts := make(plotter.XYs, len(ys))
		for i := range ys {
			pts[i] = plotter.XY{X: (float64(i) + 0.5) * bin, Y: ys[i]}
			ymax = max(ymax, ys[i])
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = c
		l.Width = vg.Points(1.5)
		if dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		p.Add(l)
		leg.Add(name, l)
		return nil
	}
	if nb > 0 {
		for i, n := range res.Backends {
			if err := add(n, series[n], colorOf(i), false); err != nil {
				return nil, leg, err
			}
		}
		anyFailed := false
		for _, v := range failed {
			anyFailed = anyFailed || v > 0
		}
		if anyFailed {
			if err := add("failed", failed, color.Black, true); err != nil {
				return nil, leg, err
			}
		}
	}
	top := math.Ceil(ymax * 1.3) // room above the lines for the fault labels
	vline := func(x float64, c color.Color, dash bool) error {
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: top}})
		if err != nil {
			return err
		}
		l.Color = c
		l.Width = vg.Points(1)
		if dash {
			l.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		}
		p.Add(l)
		return nil
	}
	for _, s := range res.Steps {
		if err := vline(s.Start.Seconds(), color.Gray{Y: 200}, false); err != nil {
			return nil, leg, err
		}
	}
	var lx plotter.XYLabels
	for i, f := range res.Faults {
		if err := vline(f.T.Seconds(), faultRed, true); err != nil {
			return nil, leg, err
		}
		// Stagger labels of faults close in time.
		y := top * (0.97 - 0.06*float64(i%3))
		lx.XYs = append(lx.XYs, plotter.XY{X: f.T.Seconds(), Y: y})
		lx.Labels = append(lx.Labels, " "+f.Fault)
	}
	if len(lx.XYs) > 0 {
		labels, err := plotter.NewLabels(lx)
		if err != nil {
			return nil, leg, err
		}
		for i := range labels.TextStyle {
			labels.TextStyle[i].Color = faultRed
			labels.TextStyle[i].Font.Size = vg.Points(8)
		}
		p.Add(labels)
	}
	if len(res.Faults) > 0 {
		fl, err := plotter.NewLine(plotter.XYs{{}, {}})
		if err != nil {
			return nil, leg, err
		}
		fl.Color, fl.Width, fl.Dashes = faultRed, vg.Points(1), []vg.Length{vg.Points(3), vg.Points(3)}
		leg.Add("fault", fl)
	}
	p.X.Tick.Marker = secondTicks{}
	p.Y.Tick.Marker = countTicks{}
	p.Y.Min, p.Y.Max = 0, top
	p.X.Min, p.X.Max = 0, max(res.Took.Seconds(), bin)
	return p, leg, nil
}

// ringSharesPlot: one stacked bar per ring state whose shares changed;
// neighbouring bars are the ring before and after a change. It returns the
// plot, its legend and the width it needs.
func ringSharesPlot(sc *Scenario, res *Result) (*plot.Plot, plot.Legend, vg.Length, error) {
	type state struct {
		label  string
		shares map[string]float64
	}
	var states []state
	same := func(a, b map[string]float64) bool {
		if len(a) != len(b) {
			return false
		}
		for k, v := range a {
			if math.Abs(b[k]-v) > 1e-9 {
				return false
			}
		}
		return true
	}
	for _, rs := range res.Rings {
		sh := map[string]float64{}
		for n, v := range rs.Backends {
			sh[n] = v.Share
		}
		if len(states) > 0 && same(states[len(states)-1].shares, sh) {
			continue
		}
		states = append(states, state{label: fmt.Sprintf("%.1f s\nstep %d", rs.T.Seconds(), rs.Step+1), shares: sh})
	}
	if len(states) == 0 {
		states = append(states, state{label: "no ring", shares: map[string]float64{}})
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: ring shares before and after each change", sc.Name)
	p.X.Label.Text = "ring in force from (time since start, step)"
	p.Y.Label.Text = "share of ring slots (%)"
	// The grid first, behind the bars; no vertical lines on a nominal x.
	grid := plotter.NewGrid()
	grid.Vertical.Color = nil
	p.Add(grid)
	leg := plot.NewLegend()
	width := vg.Points(math.Max(12, math.Min(40, 500/float64(len(states)))))
	var prev *plotter.BarChart
	for i, n := range res.Backends {
		vals := make(plotter.Values, len(states))
		for j, s := range states {
			vals[j] = 100 * s.shares[n]
		}
		bar, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, leg, 0, err
		}
		bar.Color = colorOf(i)
		// White edges separate stacked shares, and a backend with no
		// share draws nothing visible.
		bar.LineStyle.Color = color.White
		bar.LineStyle.Width = vg.Points(0.75)
		if prev != nil {
			bar.StackOn(prev)
		}
		p.Add(bar)
		leg.Add(n, bar)
		prev = bar
	}
	labels := make([]string, len(states))
	for i, s := range states {
		labels[i] = s.label
	}
	p.NominalX(labels...)
	p.X.Tick.Label.Font.Size = vg.Points(10)
	p.Y.Tick.Label.Font.Size = vg.Points(10)
	// The bars of a ring add up to 100 %: the axis ends there.
	p.Y.Min, p.Y.Max = 0, 100
	p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: 25, Label: "25"}, {Value: 50, Label: "50"}, {Value: 75, Label: "75"}, {Value: 100, Label: "100"}})
	p.X.Min, p.X.Max = -0.6, float64(len(states))-0.4
	w := vg.Length(math.Max(7, math.Min(15, 3.5+0.9*float64(len(states))))) * vg.Inch
	return p, leg, w, nil
}

func plotRingShares(path string, sc *Scenario, res *Result) error {
	p, leg, w, err := ringSharesPlot(sc, res)
	if err != nil {
		return err
	}
	return saveWithLegend(p, leg, w, vg.Length(5)*vg.Inch, path)
}

// saveWithLegend writes p as a PNG with its legend to the right of the
// plot, outside the frame, where it covers nothing.
func saveWithLegend(p *plot.Plot, leg plot.Legend, w, h vg.Length, path string) error {
	img := vgimg.New(w, h)
	dc := draw.New(img)
	pc, lc := legendLayout(dc, p, &leg)
	p.Draw(pc)
	leg.Draw(lc)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// legendLayout splits dc into the plot's canvas and, right of it, the
// legend's: the legend takes the width of its widest entry, and the plot
// (frame, axes and data) the rest.
func legendLayout(dc draw.Canvas, p *plot.Plot, leg *plot.Legend) (plotC, legC draw.Canvas) {
	leg.Top, leg.Left = true, true
	leg.TextStyle.Font.Size = vg.Points(10)
	leg.Padding = vg.Points(2)
	r := leg.Rectangle(dc)
	margin := vg.Points(10)
	legW := r.Max.X - r.Min.X + 2*margin
	titleH := vg.Length(0)
	if p.Title.Text != "" {
		titleH = p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y + p.Title.Padding + margin
	}
	w := dc.Max.X - dc.Min.X
	return draw.Crop(dc, 0, -legW, 0, 0), draw.Crop(dc, w-legW+margin, 0, 0, -titleH)
}

// countTicks labels a count axis with whole numbers only: every 1, 2, 5,
// 10 … (at most ~10 labels).
type countTicks struct{}

func (countTicks) Ticks(lo, hi float64) []plot.Tick {
	step := 1.0
	for _, s := range []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000} {
		step = s
		if (hi-lo)/s <= 10 {
			break
		}
	}
	var out []plot.Tick
	for x := math.Ceil(lo/step) * step; x <= hi; x += step {
		out = append(out, plot.Tick{Value: x, Label: fmt.Sprintf("%d", int64(x))})
	}
	return out
}

// secondTicks labels time axes every 1, 2, 5, 10 … seconds (at most ~15
// labels) with unlabelled ticks in between.
type secondTicks struct{}

func (secondTicks) Ticks(lo, hi float64) []plot.Tick {
	step := 1.0
	for _, s := range []float64{1, 2, 5, 10, 20, 50, 100} {
		step = s
		if (hi-lo)/s <= 15 {
			break
		}
	}
	var out []plot.Tick
	for x := math.Ceil(lo/step) * step; x <= hi; x += step {
		out = append(out, plot.Tick{Value: x, Label: fmt.Sprintf("%g", x)})
		if m := x + step/2; m <= hi {
			out = append(out, plot.Tick{Value: m})
		}
	}
	return out
}

// SavePNG writes p as a PNG of w × h with its legend to the right of the
// plot, as the scenario reports' plots (the soak's report uses it).
func SavePNG(p *plot.Plot, leg plot.Legend, w, h vg.Length, path string) error {
	return saveWithLegend(p, leg, w, h, path)
}

// SecondTicks labels a time axis in seconds as the scenario reports' plots
// do: every 1, 2, 5, 10 … 100 s, unlabelled ticks between.
var SecondTicks plot.Ticker = secondTicks{}
