package scenario

import (
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Only whole bins are counted: a run of 2.5 s has two, and the flow in
// its last half second is not drawn as a bin that collapses to 1.
func TestPlotFlowBinsWholeOnly(t *testing.T) {
	res := &Result{Took: 2500 * time.Millisecond, Flows: []Flow{
		{Start: 100 * time.Millisecond, Backend: "a"},
		{Start: 900 * time.Millisecond, Backend: "a"},
		{Start: 1200 * time.Millisecond, Backend: "b"},
		{Start: 1300 * time.Millisecond, Err: "timeout"},
		{Start: 2200 * time.Millisecond, Backend: "a"},
	}}
	series, failed, n := flowBins(res, []string{"a", "b"})
	if n != 2 || len(series["a"]) != 2 || series["a"][0] != 2 || series["a"][1] != 0 || series["b"][1] != 1 || failed[1] != 1 {
		t.Fatalf("bins %d: a %v, b %v, failed %v; want 2 bins: a [2 0], b [0 1], failed [0 1]", n, series["a"], series["b"], failed)
	}
	if _, _, n := flowBins(&Result{Took: 3 * time.Second}, nil); n != 3 {
		t.Errorf("a run of exactly 3 s: %d bins, want 3", n)
	}
}

// The count axis has whole numbers only.
func TestPlotCountTicks(t *testing.T) {
	for _, hi := range []float64{1.3, 4, 7.8, 23.4, 130, 2600} {
		ticks := countTicks{}.Ticks(0, hi)
		if len(ticks) < 2 || len(ticks) > 11 {
			t.Errorf("0..%g: %d ticks", hi, len(ticks))
		}
		for _, tk := range ticks {
			if tk.Value != math.Trunc(tk.Value) || tk.Value > hi {
				t.Errorf("0..%g: tick %g", hi, tk.Value)
			}
		}
	}
}

// No backend is drawn in a red that could be read as a fault marker, and
// every backend of a full testbench has its own colour.
func TestPlotPaletteNoFaultRed(t *testing.T) {
	if len(palette) < MaxBackends {
		t.Fatalf("%d colours for %d backends", len(palette), MaxBackends)
	}
	seen := map[color.RGBA]bool{}
	for i, c := range palette {
		if seen[c] {
			t.Errorf("colour %d repeats %v", i, c)
		}
		seen[c] = true
		if h, sat := hueSat(c); (h < 15 || h > 345) && sat > 0.6 { // a saturated red (browns are not)
			t.Errorf("colour %d %v is a red, like the fault markers %v", i, c, faultRed)
		}
	}
}

func plotResult() (*Scenario, *Result) {
	sc := &Scenario{Name: "t"}
	res := &Result{Backends: []string{"a", "b", "c"}, Took: 10 * time.Second,
		Rings: []RingState{
			{T: 0, Backends: map[string]BackendView{"a": {Share: 0.5}, "b": {Share: 0.5}, "c": {}}},
			{T: 4 * time.Second, Step: 1, Backends: map[string]BackendView{"a": {Share: 1}, "b": {}, "c": {}}},
		},
		Faults: []FaultEvent{{T: 4 * time.Second, Fault: "fail b"}},
	}
	for i := range 100 {
		res.Flows = append(res.Flows, Flow{Start: time.Duration(i) * 100 * time.Millisecond, Backend: res.Backends[i%2]})
	}
	return sc, res
}

// Ring shares: bars that add up to 100 % on an axis that ends at 100,
// with titles on both axes and its legend outside the plot.
func TestPlotRingSharesAxes(t *testing.T) {
	sc, res := plotResult()
	p, leg, _, err := ringSharesPlot(sc, res)
	if err != nil {
		t.Fatal(err)
	}
	if p.Y.Min != 0 || p.Y.Max != 100 {
		t.Errorf("y axis %g..%g, want 0..100", p.Y.Min, p.Y.Max)
	}
	if p.X.Label.Text == "" || p.Y.Label.Text == "" {
		t.Errorf("axis titles %q, %q", p.X.Label.Text, p.Y.Label.Text)
	}
	if p.X.Tick.Label.Font.Size < 9 {
		t.Errorf("x tick labels at %v", p.X.Tick.Label.Font.Size)
	}
	_ = leg
}

// hueSat is a colour's hue (degrees) and HSV saturation.
func hueSat(c color.RGBA) (float64, float64) {
	r, g, b := float64(c.R)/255, float64(c.G)/255, float64(c.B)/255
	hi, lo := max(r, g, b), min(r, g, b)
	if hi == lo {
		return 0, 0
	}
	var h float64
	switch hi {
	case r:
		h = 60 * math.Mod((g-b)/(hi-lo), 6)
	case g:
		h = 60 * ((b-r)/(hi-lo) + 2)
	default:
		h = 60 * ((r-g)/(hi-lo) + 4)
	}
	if h < 0 {
		h += 360
	}
	return h, (hi - lo) / hi
}

// Both plots render; the legend sits right of the frame: the rightmost
// columns of the image hold the legend's colours, and the plot's own
// legend (drawn inside the frame) is empty.
func TestPlotLegendOutsideFrame(t *testing.T) {
	sc, res := plotResult()
	dir := t.TempDir()
	names, err := writePlots(dir, sc, res)
	if err != nil || len(names) != 2 {
		t.Fatalf("plots %v: %v", names, err)
	}
	for _, n := range names {
		f, err := os.Open(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		b := img.Bounds()
		// The legend's swatch of backend a (blue) lies in the right
		// eighth of the image, beyond the plot's frame.
		found := false
		for x := b.Max.X - b.Dx()/8; x < b.Max.X && !found; x++ {
			for y := b.Min.Y; y < b.Min.Y+b.Dy()/2; y++ {
				r, g, bl, _ := img.At(x, y).RGBA()
				if c := palette[0]; r>>8 == uint32(c.R) && g>>8 == uint32(c.G) && bl>>8 == uint32(c.B) {
					found = true
					break
				}
			}
		}
		if !found {
			t.Errorf("%s: no legend swatch right of the plot", n)
		}
	}
}

// The legend never covers the data: in both plots, laid out at their
// sizes, the legend's canvas starts right of the data area (frame and
// axes included), and the legend fits inside the image.
func TestPlotLegendBesideData(t *testing.T) {
	sc, res := plotResult()
	cp, cleg, err := connectionsPlot(sc, res)
	if err != nil {
		t.Fatal(err)
	}
	rp, rleg, rw, err := ringSharesPlot(sc, res)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    *plot.Plot
		leg  plot.Legend
		w, h vg.Length
	}{
		{ConnectionsPNG, cp, cleg, 11 * vg.Inch, 5 * vg.Inch},
		{RingSharesPNG, rp, rleg, rw, 5 * vg.Inch},
	} {
		dc := draw.New(vgimg.New(tc.w, tc.h))
		pc, lc := legendLayout(dc, tc.p, &tc.leg)
		data := tc.p.DataCanvas(pc)
		if data.Max.X > lc.Min.X || pc.Max.X > lc.Min.X {
			t.Errorf("%s: the legend starts at x=%v, inside the plot (data area ends at %v, plot at %v)", tc.name, lc.Min.X, data.Max.X, pc.Max.X)
		}
		if data.Max.X-data.Min.X < (tc.w)/2 {
			t.Errorf("%s: the data area is %v wide of %v: the legend takes too much", tc.name, data.Max.X-data.Min.X, tc.w)
		}
		r := tc.leg.Rectangle(lc)
		if r.Max.X > dc.Max.X || r.Min.Y < dc.Min.Y || r.Max.Y > dc.Max.Y {
			t.Errorf("%s: the legend %v does not fit the image %v", tc.name, r, dc.Rectangle)
		}
	}
	// The connection plot counts flows: whole-number ticks on an axis
	// that starts at 0.
	if _, ok := cp.Y.Tick.Marker.(countTicks); !ok || cp.Y.Min != 0 {
		t.Errorf("connections y axis: ticks %T from %g, want whole counts from 0", cp.Y.Tick.Marker, cp.Y.Min)
	}
}
