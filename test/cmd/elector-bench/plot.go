package main

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The handoff plot: the empirical CDF of each latency series on a log-scale
// time axis, so that tens of milliseconds and seconds fit on one chart
// (gonum.org/v1/plot).

// Series is one curve.
type Series struct {
	Label string
	Color color.RGBA
	Ms    []float64
}

const (
	plotWidthPx, plotHeightPx = 1000, 600
	plotDPI                   = 96
	minDecadeMs               = 1.0
)

var (
	colOurs  = color.RGBA{31, 119, 180, 255}
	colOurs2 = color.RGBA{44, 160, 44, 255}
	colBase  = color.RGBA{214, 39, 40, 255}
)

// writeCDFPlot draws the series and writes a plotWidthPx x plotHeightPx PNG
// to path.
func writeCDFPlot(path, title string, series []Series) error {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range series {
		for _, v := range s.Ms {
			if v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if math.IsInf(lo, 1) {
		return errors.New("plot: no data")
	}
	d0 := math.Floor(math.Log10(math.Max(lo, minDecadeMs)))
	d1 := math.Ceil(math.Log10(hi))
	if d1 <= d0 {
		d1 = d0 + 1
	}
	xMin, xMax := math.Pow(10, d0), math.Pow(10, d1)

	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(14)
	p.X.Label.Text = "latency (log scale)"
	p.Y.Label.Text = "fraction of handoffs at or below"
	p.X.Scale = plot.LogScale{}
	p.X.Min, p.X.Max = xMin, xMax
	p.X.Tick.Marker = plot.TickerFunc(func(min, max float64) []plot.Tick { return msTicks(d0, d1) })
	p.Y.Min, p.Y.Max = 0, 1
	p.Y.Tick.Marker = plot.TickerFunc(func(min, max float64) []plot.Tick {
		var t []plot.Tick
		for i := 0; i <= 4; i++ {
			t = append(t, plot.Tick{Value: float64(i) / 4, Label: fmt.Sprintf("%d%%", i*25)})
		}
		return t
	})
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = vg.Points(12)
		a.Tick.Label.Font.Size = vg.Points(11)
	}
	grid := plotter.NewGrid()
	grid.Vertical.Color = color.Gray{Y: 210}
	grid.Horizontal.Color = color.Gray{Y: 210}
	p.Add(grid)
	// The legend goes right of the plot, so it never hides a curve.
	legend := plot.NewLegend()
	legend.Top = true
	legend.TextStyle.Font.Size = vg.Points(12)

	for _, s := range series {
		v := make([]float64, 0, len(s.Ms))
		for _, ms := range s.Ms {
			// The log axis starts at xMin: smaller samples sit on it.
			v = append(v, math.Max(ms, xMin))
		}
		if len(v) == 0 {
			continue
		}
		sort.Float64s(v)
		pts := plotter.XYs{{X: v[0], Y: 0}}
		for i, ms := range v {
			pts = append(pts, plotter.XY{X: ms, Y: float64(i+1) / float64(len(v))})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("plot %s: %w", s.Label, err)
		}
		l.StepStyle = plotter.PostStep
		l.Color = s.Color
		l.Width = vg.Points(2)
		p.Add(l)
		legend.Add(fmt.Sprintf("%s (n=%d)", s.Label, len(s.Ms)), l)
	}

	c := vgimg.NewWith(vgimg.UseWH(vg.Length(plotWidthPx)*vg.Inch/plotDPI, vg.Length(plotHeightPx)*vg.Inch/plotDPI), vgimg.UseDPI(plotDPI))
	dc := draw.New(c)
	margin := vg.Points(12)
	lr := legend.Rectangle(dc)
	p.Draw(draw.Crop(dc, margin/2, -(lr.Max.X-lr.Min.X)-2*margin, margin/2, -margin/2))
	legend.XOffs, legend.YOffs = -margin, -3*margin // below the title's line
	legend.Draw(dc)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// msTicks marks 1, 2 and 5 x every decade from 10^d0 to 10^d1 ms; over
// more than three decades only the decades are labelled.
func msTicks(d0, d1 float64) []plot.Tick {
	var t []plot.Tick
	for d := d0; d <= d1; d++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, d)
			if math.Log10(v) > d1+1e-9 {
				continue
			}
			tick := plot.Tick{Value: v}
			if m == 1 || d1-d0 <= 3 {
				tick.Label = msLabel(v)
			}
			t = append(t, tick)
		}
	}
	return t
}

func msLabel(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%gs", v/1000)
	}
	return fmt.Sprintf("%gms", v)
}
