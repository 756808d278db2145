package scenario

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

const faultBin = 0.25 // seconds per point of a fault's plot

// faultPlotName is the file of a step's fault plot: fault-2-kill-switch.png.
func faultPlotName(step int, f FaultEvent) string {
	w := strings.Fields(f.Fault)
	if len(w) > 2 {
		w = w[:2] // "block p4runtime for 10s" → block-p4runtime
	}
	return fmt.Sprintf("fault-%d-%s.png", step+1, strings.Join(w, "-"))
}

// writeFaultPlots draws one plot per kill, block or detach fault and
// returns the files.
func writeFaultPlots(dir string, sc *Scenario, res *Result) ([]string, error) {
	var out []string
	for _, sr := range res.Steps {
		for i := range sr.Recoveries {
			rc := &sr.Recoveries[i]
			name := faultPlotName(sr.Index, rc.Fault)
			p, leg, err := faultPlot(sc, res, sr, *rc)
			if err == nil {
				err = saveWithLegend(p, leg, vg.Length(9)*vg.Inch, vg.Length(4)*vg.Inch, filepath.Join(dir, name))
			}
			if err != nil {
				return out, fmt.Errorf("%s: %w", name, err)
			}
			rc.Plot = name
			out = append(out, name)
		}
	}
	return out, nil
}

// faultPlot: the step's new TCP connections in bins of faultBin seconds,
// split into those answered at once, those answered only on a SYN
// retransmission and those that failed, with the fault, its end, the
// loss reported, the targets programmed again and the black hole's end.
func faultPlot(sc *Scenario, res *Result, sr *StepResult, rc Recovery) (*plot.Plot, plot.Legend, error) {
	f := rc.Fault
	lo := max(sr.Start, f.T-2*time.Second).Seconds()
	hi := sr.End.Seconds()
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s, step %d: %s", sc.Name, sr.Index+1, f.Fault)
	p.X.Label.Text = "time since start (s)"
	p.Y.Label.Text = fmt.Sprintf("new TCP connections per %g s", faultBin)
	p.Add(plotter.NewGrid())
	leg := plot.NewLegend()
	n := int(math.Floor((hi-lo)/faultBin + 1e-9)) // whole bins only: a partial one looks like a drop
	if n < 1 {
		n = 1
	}
	ok, late, failed := make([]float64, n), make([]float64, n), make([]float64, n)
	for _, fl := range res.Flows {
		if fl.Kind != "tcp" || fl.Step != sr.Index {
			continue
		}
		i := int((fl.Start.Seconds() - lo) / faultBin)
		if i < 0 || i >= n {
			continue
		}
		switch {
		case fl.Err != "":
			failed[i]++
		case fl.Connect >= synRetry:
			late[i]++
		default:
			ok[i]++
		}
	}
	ymax := 1.0
	add := func(name string, ys []float64, c color.Color, dashed bool) error {
		pts := make(plotter.XYs, len(ys))
		for i := range ys {
			pts[i] = plotter.XY{X: lo + (float64(i)+0.5)*faultBin, Y: ys[i]}
			ymax = max(ymax, ys[i])
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color, l.Width = c, vg.Points(1.5)
		if dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		p.Add(l)
		leg.Add(name, l)
		return nil
	}
	if err := add("answered at once", ok, colorOf(0), false); err != nil {
		return nil, leg, err
	}
	if err := add("after a SYN retransmission", late, colorOf(1), false); err != nil {
		return nil, leg, err
	}
	if err := add("failed", failed, color.Black, true); err != nil {
		return nil, leg, err
	}
	top := math.Ceil(ymax * 1.4)
	var labels plotter.XYLabels
	mark := func(t time.Duration, what string, c color.Color, dash bool) error {
		x := t.Seconds()
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: top}})
		if err != nil {
			return err
		}
		l.Color, l.Width = c, vg.Points(1)
		if dash {
			l.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		}
		p.Add(l)
		y := top * (0.96 - 0.07*float64(len(labels.XYs)%4))
		labels.XYs = append(labels.XYs, plotter.XY{X: x, Y: y})
		labels.Labels = append(labels.Labels, " "+what)
		return nil
	}
	grey := color.Gray{Y: 110}
	marks := []struct {
		t    time.Duration
		what string
		c    color.Color
		dash bool
		show bool
	}{
		{f.T, f.Fault, faultRed, true, true},
		{rc.Detected, fmt.Sprintf("loss reported +%.2f s", (rc.Detected - f.T).Seconds()), grey, true, rc.WasNoticed},
		{f.End, "fault over", faultRed, false, f.End != f.T},
		{rc.Programmed, fmt.Sprintf("programmed +%.2f s", (rc.Programmed - f.End).Seconds()), colorOf(2), false, rc.IsProgrammed},
		{rc.Served, fmt.Sprintf("served +%.2f s", (rc.Served - f.End).Seconds()), colorOf(3), true, rc.Served != f.End},
	}
	for _, m := range marks {
		if !m.show {
			continue
		}
		if err := mark(m.t, m.what, m.c, m.dash); err != nil {
			return nil, leg, err
		}
	}
	if len(labels.XYs) > 0 {
		lb, err := plotter.NewLabels(labels)
		if err != nil {
			return nil, leg, err
		}
		for i := range lb.TextStyle {
			lb.TextStyle[i].Font.Size = vg.Points(8)
		}
		p.Add(lb)
	}
	p.X.Tick.Marker = secondTicks{}
	p.Y.Tick.Marker = countTicks{}
	p.Y.Min, p.Y.Max = 0, top
	p.X.Min, p.X.Max = lo, max(hi, lo+faultBin)
	return p, leg, nil
}
