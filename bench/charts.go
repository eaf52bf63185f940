package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// bar is one bar of a chart; a bar without a value shows its note instead.
type bar struct {
	name  string
	value float64
	note  string // e.g. "not built yet"; set when there is no value
}

// writeCharts draws each scenario's charts as PNGs in dir and returns, per
// scenario, their paths relative to rel (for BENCHMARKS.md).
func writeCharts(res *Results, dir, rel string) (map[string][]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	out := map[string][]string{}
	add := func(sc ScenarioResult, file, title, unit string, bars []bar) error {
		if err := barChart(filepath.Join(dir, file), title, unit, res, bars); err != nil {
			return fmt.Errorf("bench: chart %s: %w", file, err)
		}
		out[sc.Name] = append(out[sc.Name], filepath.ToSlash(filepath.Join(rel, file)))
		return nil
	}
	for _, sc := range res.Scenarios {
		if sc.RatioVsRawGet != nil || sc.Name == "hit-path" {
			var bars []bar
			for _, r := range sc.Results {
				bars = append(bars, barOf(r, func(r SystemResult) (float64, bool) {
					if r.NsPerOp == nil {
						return 0, false
					}
					return *r.NsPerOp, true
				}))
			}
			if err := add(sc, sc.Name+".png", sc.Name+": time per hit", "ns/op", bars); err != nil {
				return nil, err
			}
			continue
		}
		var p99, loads []bar
		for _, r := range sc.Results {
			p99 = append(p99, barOf(r, func(r SystemResult) (float64, bool) {
				if r.LatencyMS == nil {
					return 0, false
				}
				return r.LatencyMS.P99, true
			}))
			loads = append(loads, barOf(r, func(r SystemResult) (float64, bool) {
				if r.OriginLoads == nil {
					return 0, false
				}
				return float64(*r.OriginLoads), true
			}))
		}
		if err := add(sc, sc.Name+"-p99.png", sc.Name+": p99 latency", "ms", p99); err != nil {
			return nil, err
		}
		if err := add(sc, sc.Name+"-loads.png", sc.Name+": origin loads ("+loadsSpan(sc)+"most of any round)", "loads", loads); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// loadsSpan says which loads a scenario's loads chart counts when they are
// not all of them: after a warm-up, the warm-up's are left out.
func loadsSpan(sc ScenarioResult) string {
	for _, r := range sc.Results {
		if r.WarmupOriginLoads != nil {
			return "after the warm-up, "
		}
	}
	return ""
}

func barOf(r SystemResult, value func(SystemResult) (float64, bool)) bar {
	if !r.ok() {
		note := r.Status
		switch {
		case note == notBuilt:
		case len(note) > 6 && note[:6] == "cannot":
			note = "cannot"
		default:
			note = "failed"
		}
		return bar{name: r.System, note: note}
	}
	v, ok := value(r)
	if !ok {
		return bar{name: r.System, note: "n/a"}
	}
	return bar{name: r.System, value: v}
}

// barChart draws one bar per system with its value written above it, and
// the run's provenance in the footer.
func barChart(path, title, unit string, res *Results, bars []bar) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = unit
	p.X.Label.Text = fmt.Sprintf("%s\nRedis %s; %s", res.Machine, res.Redis, res.Command)
	if res.Label != "" {
		p.X.Label.Text = res.Label + "\n" + p.X.Label.Text
	}
	p.X.Label.TextStyle.Font.Size = vg.Points(7)
	vals := make(plotter.Values, len(bars))
	names := make([]string, len(bars))
	labels := plotter.XYLabels{XYs: make(plotter.XYs, len(bars)), Labels: make([]string, len(bars))}
	top := 0.0
	for i, b := range bars {
		vals[i] = b.value
		names[i] = b.name
		top = max(top, b.value)
	}
	for i, b := range bars {
		labels.XYs[i] = plotter.XY{X: float64(i), Y: b.value + top*0.02}
		if b.note != "" {
			labels.Labels[i] = b.note
		} else {
			labels.Labels[i] = fmtValue(b.value)
		}
	}
	chart, err := plotter.NewBarChart(vals, vg.Points(28))
	if err != nil {
		return err
	}
	chart.Color = color.RGBA{R: 60, G: 110, B: 180, A: 255}
	chart.LineStyle.Width = 0
	l, err := plotter.NewLabels(labels)
	if err != nil {
		return err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].XAlign = -0.5
		l.TextStyle[i].Font.Size = vg.Points(8)
	}
	p.Add(chart, l)
	p.NominalX(names...)
	p.Y.Min = 0
	p.Y.Max = max(top*1.15, 1)
	return p.Save(8*vg.Inch, 3.8*vg.Inch, path)
}

func fmtValue(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}
