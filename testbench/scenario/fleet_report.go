package scenario

import (
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// writeFleetReport writes report.md, report.json and one plot per event.
func (r *fleetRunner) writeFleetReport(fr *FleetResult) error {
	var errs []string
	for i, er := range fr.Events {
		name := fmt.Sprintf("fleet-event-%d.png", i+1)
		if err := plotFleetEvent(filepath.Join(r.out, name), fr, er); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		er.Plot = name
		fr.Files = append(fr.Files, name)
	}
	fr.Files = append(fr.Files, "report.md", "report.json", "bird.conf", "bird.log")
	for _, n := range fr.Nodes {
		fr.Files = append(fr.Files, n+".log", n+"-lb.yaml", n+"-bgp.yaml")
	}
	var b strings.Builder
	status := "PASSED"
	if len(fr.Failures) > 0 {
		status = fmt.Sprintf("FAILED (%d assertion(s))", len(fr.Failures))
	}
	fmt.Fprintf(&b, "# Fleet scenario %q — %s\n\n", fr.Scenario, status)
	if d := strings.TrimSpace(r.sc.Description); d != "" {
		fmt.Fprintf(&b, "%s\n\n", d)
	}
	fmt.Fprintf(&b, "- topology: network namespaces; router running BIRD (%s) with ECMP over %d lbc nodes (`lbc run --target xdp --bgp`, native XDP), backends decapsulating IP-in-IP with XDP; BGP hold time %s\n",
		birdVersion(), len(fr.Nodes), r.fl.HoldTime.D())
	fmt.Fprintf(&b, "- %d held TCP connections pinged every %s; a new connection every 200 ms; took %.1f s\n", fr.Conns, r.fl.PingEvery.D(), fr.Took.Seconds())
	fmt.Fprintf(&b, "- load probe (a task that sleeps %d ms again and again and measures how late it wakes): %s over the run; timing bounds are widened by the time it lost between an action and its effect; an event in which it stalled %d ms or more (%s) judges the machine, not lbc\n",
		probeEvery.Milliseconds(), r.probe.Window(0, fr.Took), fr.StallLimit.Milliseconds(), fr.StallWhy)
	if fr.Attempt > 1 {
		fmt.Fprintf(&b, "- attempt %d of at most %d:\n", fr.Attempt, fleetAttempts)
		for _, e := range fr.Earlier {
			fmt.Fprintf(&b, "  - %s\n", e)
		}
	}
	fmt.Fprintln(&b)
	if len(fr.Failures) > 0 {
		fmt.Fprintf(&b, "## Failed assertions\n\n")
		for _, f := range fr.Failures {
			fmt.Fprintf(&b, "- %s\n", f.Msg)
		}
		fmt.Fprintln(&b)
	}
	fmt.Fprintf(&b, "| event | action → effect | held connections broken (at risk: the ring maps them elsewhere) | moved between nodes | longest silence | new connections ok/failed | carriers at the end | lost to scheduling (longest stall) |\n|---|---|---|---|---|---|---|---|\n")
	for _, er := range fr.Events {
		eff := "-"
		if er.Effect >= 0 && er.EffectWhat != "" {
			eff = fmt.Sprintf("%s: %d ms", er.EffectWhat, er.Effect.Milliseconds())
		}
		risk := "?"
		if er.AtRisk >= 0 {
			risk = fmt.Sprint(er.AtRisk)
		}
		fmt.Fprintf(&b, "| %s | %s | %d (%s at risk) | %d | %d ms | %d/%d | %s | %d ms of %d (%d ms) |\n", er.Name, eff, er.Broken, risk, er.Moved, er.MaxStall.Milliseconds(), er.NewOK, er.NewFailed, carrierLine(er.Carriers),
			er.Sched.Lost.Milliseconds(), er.Sched.Span.Milliseconds(), er.Sched.Worst.Milliseconds())
	}
	fmt.Fprintln(&b)
	for i, er := range fr.Events {
		fmt.Fprintf(&b, "## Event %d: %s (%.1f s – %.1f s)\n\n", i+1, er.Name, er.Start.Seconds(), er.End.Seconds())
		for _, c := range er.Checks {
			mark := "✅"
			if !c.OK {
				mark = "❌"
			}
			fmt.Fprintf(&b, "- %s **%s**: %s\n", mark, c.Name, c.Msg)
		}
		fmt.Fprintf(&b, "- load probe: %s\n", er.Sched)
		if er.TooSlow != "" {
			fmt.Fprintf(&b, "- **the machine was too slow for the scenario's timers**: %s\n", er.TooSlow)
		}
		if er.Plot != "" {
			fmt.Fprintf(&b, "\n![%s](%s)\n", er.Plot, er.Plot)
		}
		fmt.Fprintln(&b)
	}
	if err := os.WriteFile(filepath.Join(r.out, "report.md"), []byte(b.String()), 0o644); err != nil {
		errs = append(errs, err.Error())
	}
	js, err := json.MarshalIndent(fr, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(r.out, "report.json"), js, 0o644)
	}
	if err != nil {
		errs = append(errs, err.Error())
	}
	if r.opts.OutDir != "" {
		r.progress("report written to %s", filepath.Join(r.out, "report.md"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("report: %s", strings.Join(errs, "; "))
	}
	return nil
}

func birdVersion() string {
	out, err := exec.Command("bird", "--version").CombinedOutput()
	if err != nil {
		return "BIRD"
	}
	return strings.TrimSpace(string(out))
}

// plotFleetEvent: connections alive per carrying node over the event,
// with the action and its effect marked.
func plotFleetEvent(path string, fr *FleetResult, er *FleetEventResult) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %s — held connections by the node that carries them", fr.Scenario, er.Name)
	p.X.Label.Text = "time since start (s)"
	p.Y.Label.Text = "connections"
	p.Legend.Top = true
	from, to := er.Start.Seconds()-1, er.End.Seconds()
	series := map[string]plotter.XYs{}
	keys := append(append([]string{}, fr.Nodes...), "stalled", "broken")
	for _, s := range fr.Samples {
		x := s.T.Seconds()
		if x < from || x > to {
			continue
		}
		count := map[string]float64{}
		for _, c := range s.Carrier {
			if c == "" {
				c = "stalled"
			}
			count[c]++
		}
		for _, k := range keys {
			series[k] = append(series[k], plotter.XY{X: x, Y: count[k]})
		}
	}
	ymax := float64(fr.Conns)
	for i, k := range keys {
		pts := series[k]
		if len(pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Width = vg.Points(1.5)
		switch k {
		case "stalled":
			l.Color = color.Gray{Y: 110}
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		case "broken":
			l.Color = color.Black
			l.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
		default:
			l.Color = colorOf(i)
		}
		p.Add(l)
		p.Legend.Add(k, l)
	}
	top := ymax * 1.3
	mark := func(x float64, label string, c color.Color) error {
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: top}})
		if err != nil {
			return err
		}
		l.Color = c
		l.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(l)
		lb, err := plotter.NewLabels(plotter.XYLabels{XYs: []plotter.XY{{X: x, Y: top * 0.96}}, Labels: []string{" " + label}})
		if err != nil {
			return err
		}
		lb.TextStyle[0].Color = c
		lb.TextStyle[0].Font.Size = vg.Points(8)
		p.Add(lb)
		return nil
	}
	if er.Action != "" {
		if err := mark(er.At.Seconds(), er.Action, color.RGBA{R: 200, A: 255}); err != nil {
			return err
		}
	}
	if er.Effect >= 0 && er.EffectWhat != "" {
		if err := mark((er.At + er.Effect).Seconds(), fmt.Sprintf("+%d ms", er.Effect.Milliseconds()), color.RGBA{B: 200, A: 255}); err != nil {
			return err
		}
	}
	p.X.Min, p.X.Max = from, to+(to-from)*0.15
	p.Y.Min, p.Y.Max = 0, top
	p.X.Tick.Marker = secondTicks{}
	p.Add(plotter.NewGrid())
	return p.Save(vg.Length(10)*vg.Inch, vg.Length(4.5)*vg.Inch, path)
}
