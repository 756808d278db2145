package scenario

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
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
	return out, nil
}

const bin = 1.0 // seconds per point of the connections plot

// palette has a distinct colour for each of MaxBackends backends
// (Tableau 10, then darker and lighter variants).
var palette = []color.RGBA{
	{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
	{188, 189, 34, 255}, {23, 190, 207, 255}, {0, 0, 128, 255}, {128, 64, 0, 255},
	{0, 100, 0, 255}, {255, 215, 0, 255}, {70, 240, 240, 255}, {250, 190, 190, 255},
}

func colorOf(i int) color.Color { return palette[i%len(palette)] }

// plotConnections: new flows per second per backend over time, failed
// flows, step boundaries and fault markers.
func plotConnections(path string, sc *Scenario, res *Result) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: new flows per backend (per second, %.1f s bins)", sc.Name, bin)
	p.X.Label.Text = "time since start (s)"
	p.Y.Label.Text = "new flows / s"
	p.Legend.Top = true
	end := res.Took.Seconds()
	nb := int(math.Ceil(end/bin)) + 1
	series := map[string][]float64{}
	for _, n := range res.Backends {
		series[n] = make([]float64, nb)
	}
	failed := make([]float64, nb)
	for _, f := range res.Flows {
		i := int(f.Start.Seconds() / bin)
		if i >= nb {
			continue
		}
		if f.Err != "" {
			failed[i] += 1 / bin
		} else if s, ok := series[f.Backend]; ok {
			s[i] += 1 / bin
		}
	}
	ymax := 1.0
	add := func(name string, ys []float64, c color.Color, dashed bool) error {
		pts := make(plotter.XYs, nb)
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
		p.Legend.Add(name, l)
		return nil
	}
	for i, n := range res.Backends {
		if err := add(n, series[n], colorOf(i), false); err != nil {
			return err
		}
	}
	anyFailed := false
	for _, v := range failed {
		anyFailed = anyFailed || v > 0
	}
	if anyFailed {
		if err := add("failed", failed, color.Black, true); err != nil {
			return err
		}
	}
	top := ymax * 1.35
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
	var lx plotter.XYLabels
	for _, s := range res.Steps {
		if err := vline(s.Start.Seconds(), color.Gray{Y: 200}, false); err != nil {
			return err
		}
	}
	for i, f := range res.Faults {
		if err := vline(f.T.Seconds(), color.RGBA{R: 200, A: 255}, true); err != nil {
			return err
		}
		// Stagger labels of faults close in time.
		y := top * (0.97 - 0.06*float64(i%3))
		lx.XYs = append(lx.XYs, plotter.XY{X: f.T.Seconds(), Y: y})
		lx.Labels = append(lx.Labels, " "+f.Fault)
	}
	if len(lx.XYs) > 0 {
		labels, err := plotter.NewLabels(lx)
		if err != nil {
			return err
		}
		for i := range labels.TextStyle {
			labels.TextStyle[i].Color = color.RGBA{R: 170, A: 255}
			labels.TextStyle[i].Font.Size = vg.Points(8)
		}
		p.Add(labels)
	}
	p.X.Tick.Marker = secondTicks{}
	p.Y.Min, p.Y.Max = 0, top
	// Room on the right for the legend.
	p.X.Min, p.X.Max = 0, end*1.13
	p.Add(plotter.NewGrid())
	return p.Save(vg.Length(11)*vg.Inch, vg.Length(5)*vg.Inch, path)
}

// plotRingShares: one stacked bar per ring state whose shares changed;
// neighbouring bars are the ring before and after a change.
func plotRingShares(path string, sc *Scenario, res *Result) error {
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
		states = append(states, state{label: fmt.Sprintf("%.1fs\nstep %d", rs.T.Seconds(), rs.Step+1), shares: sh})
	}
	if len(states) == 0 {
		states = append(states, state{label: "no ring", shares: map[string]float64{}})
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: ring shares before and after each change", sc.Name)
	p.Y.Label.Text = "share of ring slots (%)"
	p.Legend.Top = true
	width := vg.Points(math.Max(12, math.Min(40, 500/float64(len(states)))))
	var prev *plotter.BarChart
	for i, n := range res.Backends {
		vals := make(plotter.Values, len(states))
		for j, s := range states {
			vals[j] = 100 * s.shares[n]
		}
		bar, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		bar.Color = colorOf(i)
		bar.LineStyle.Width = vg.Points(0.5)
		if prev != nil {
			bar.StackOn(prev)
		}
		p.Add(bar)
		p.Legend.Add(n, bar)
		prev = bar
	}
	labels := make([]string, len(states))
	for i, s := range states {
		labels[i] = s.label
	}
	p.NominalX(labels...)
	p.X.Tick.Label.Font.Size = vg.Points(7)
	p.Y.Min, p.Y.Max = 0, 125
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Legend.Padding = vg.Points(2)
	// Room on the right for the legend.
	p.X.Min, p.X.Max = -0.6, float64(len(states))-0.4+1.2
	w := vg.Length(math.Max(6, math.Min(14, 2.5+0.8*float64(len(states))))) * vg.Inch
	return p.Save(w, vg.Length(5)*vg.Inch, path)
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
