package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"sort"
)

// A small PNG plot with no dependencies beyond the standard library: the
// empirical CDF of each latency series on a log-scale time axis, so that
// tens of milliseconds and seconds fit on one chart.

// Series is one curve.
type Series struct {
	Label string
	Color color.RGBA
	Ms    []float64
}

const (
	areaW, plotH     = 800, 540 // plot area width; the legend goes right of it
	marginL          = 80
	marginT, marginB = 60, 70
	glyphW, glyphH   = 5, 7
	textScale        = 2
	legendLineLen    = 40
	minDecadeMs      = 1.0
)

var (
	colBG    = color.RGBA{255, 255, 255, 255}
	colAxis  = color.RGBA{40, 40, 40, 255}
	colGrid  = color.RGBA{225, 225, 225, 255}
	colOurs  = color.RGBA{31, 119, 180, 255}
	colOurs2 = color.RGBA{44, 160, 44, 255}
	colBase  = color.RGBA{214, 39, 40, 255}
)

// writeCDFPlot draws the series and writes a PNG to path.
func writeCDFPlot(path, title string, series []Series) error {
	legendW := 0
	for _, s := range series {
		legendW = max(legendW, textWidth(fmt.Sprintf("%s (n=%d)", s.Label, len(s.Ms))))
	}
	marginR := legendW + legendLineLen + 50
	plotW := marginL + areaW + marginR
	img := image.NewRGBA(image.Rect(0, 0, plotW, plotH))
	fill(img, img.Bounds(), colBG)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range series {
		for _, v := range s.Ms {
			if v > 0 {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if math.IsInf(lo, 1) {
		return fmt.Errorf("plot: no data")
	}
	d0 := math.Floor(math.Log10(math.Max(lo, minDecadeMs)))
	d1 := math.Ceil(math.Log10(hi))
	if d1 <= d0 {
		d1 = d0 + 1
	}
	x0, x1 := marginL, plotW-marginR
	y0, y1 := plotH-marginB, marginT
	xOf := func(ms float64) int {
		l := math.Log10(math.Max(ms, math.Pow(10, d0)))
		return x0 + int(math.Round((l-d0)/(d1-d0)*float64(x1-x0)))
	}
	yOf := func(f float64) int { return y0 - int(math.Round(f*float64(y0-y1))) }

	// Grid and ticks: decades (labelled) and 2x, 5x.
	for d := d0; d <= d1; d++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, d)
			if math.Log10(v) > d1+1e-9 {
				continue
			}
			x := xOf(v)
			vline(img, x, y1, y0, colGrid)
			if m == 1 || (d1-d0 <= 3) {
				label := msLabel(v)
				drawText(img, x-textWidth(label)/2, y0+10, label, colAxis)
			}
		}
	}
	for i := 0; i <= 4; i++ {
		f := float64(i) / 4
		y := yOf(f)
		hline(img, x0, x1, y, colGrid)
		label := fmt.Sprintf("%d%%", i*25)
		drawText(img, x0-10-textWidth(label), y-glyphH*textScale/2, label, colAxis)
	}
	hline(img, x0, x1, y0, colAxis)
	vline(img, x0, y1, y0, colAxis)
	drawText(img, (x0+x1)/2-textWidth("latency (log scale)")/2, y0+36, "latency (log scale)", colAxis)
	drawText(img, x0, 20, title, colAxis)

	for _, s := range series {
		v := append([]float64(nil), s.Ms...)
		sort.Float64s(v)
		if len(v) == 0 {
			continue
		}
		px, py := xOf(v[0]), yOf(0)
		for i, ms := range v {
			x := xOf(ms)
			y := yOf(float64(i+1) / float64(len(v)))
			thickLine(img, px, py, x, py, s.Color)
			thickLine(img, x, py, x, y, s.Color)
			px, py = x, y
		}
	}
	// Legend, right of the plot, so it never hides a curve.
	ly := y1 + 10
	for _, s := range series {
		label := fmt.Sprintf("%s (n=%d)", s.Label, len(s.Ms))
		lx := x1 + 20
		thickLine(img, lx, ly+glyphH, lx+legendLineLen, ly+glyphH, s.Color)
		drawText(img, lx+legendLineLen+10, ly, label, colAxis)
		ly += 22
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func msLabel(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%gs", v/1000)
	default:
		return fmt.Sprintf("%gms", v)
	}
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		img.SetRGBA(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	if y0 > y1 {
		y0, y1 = y1, y0
	}
	for y := y0; y <= y1; y++ {
		img.SetRGBA(x, y, c)
	}
}

// thickLine draws an axis-parallel (or any) line 2 pixels wide.
func thickLine(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		img.SetRGBA(x0, y0, c)
		img.SetRGBA(x0+1, y0, c)
		img.SetRGBA(x0, y0+1, c)
		img.SetRGBA(x0+1, y0+1, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}

func textWidth(s string) int { return len([]rune(s)) * (glyphW + 1) * textScale }

// drawText renders s with the 5x7 font below (descenders take two more
// rows), scaled by textScale; letters are drawn lower-case, unknown
// characters as blanks.
func drawText(img *image.RGBA, x, y int, s string, c color.RGBA) {
	for _, r := range s {
		if r >= 'A' && r <= 'Z' {
			r += 'a' - 'A'
		}
		g, ok := font5x7[r]
		if ok {
			for row, bits := range g {
				for col := 0; col < glyphW && col < len(bits); col++ {
					if bits[col] != '#' {
						continue
					}
					for dy := 0; dy < textScale; dy++ {
						for dx := 0; dx < textScale; dx++ {
							img.SetRGBA(x+col*textScale+dx, y+row*textScale+dy, c)
						}
					}
				}
			}
		}
		x += (glyphW + 1) * textScale
	}
}

var font5x7 = map[rune][]string{
	'0': {".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."},
	'1': {"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."},
	'2': {".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"},
	'3': {"####.", "....#", "....#", ".###.", "....#", "....#", "####."},
	'4': {"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."},
	'5': {"#####", "#....", "####.", "....#", "....#", "#...#", ".###."},
	'6': {"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."},
	'7': {"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."},
	'8': {".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."},
	'9': {".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."},
	'a': {".....", ".....", ".###.", "....#", ".####", "#...#", ".####"},
	'b': {"#....", "#....", "####.", "#...#", "#...#", "#...#", "####."},
	'c': {".....", ".....", ".###.", "#....", "#....", "#...#", ".###."},
	'd': {"....#", "....#", ".####", "#...#", "#...#", "#...#", ".####"},
	'e': {".....", ".....", ".###.", "#...#", "#####", "#....", ".###."},
	'f': {"..##.", ".#..#", ".#...", "###..", ".#...", ".#...", ".#..."},
	'g': {".....", ".....", ".####", "#...#", "#...#", "#...#", ".####", "....#", ".###."},
	'h': {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "#...#"},
	'i': {"..#..", ".....", ".##..", "..#..", "..#..", "..#..", ".###."},
	'j': {"...#.", ".....", "..##.", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.."},
	'k': {"#....", "#....", "#..#.", "#.#..", "##...", "#.#..", "#..#."},
	'l': {".##..", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."},
	'm': {".....", ".....", "##.#.", "#.#.#", "#.#.#", "#...#", "#...#"},
	'n': {".....", ".....", "#.##.", "##..#", "#...#", "#...#", "#...#"},
	'o': {".....", ".....", ".###.", "#...#", "#...#", "#...#", ".###."},
	'p': {".....", ".....", "####.", "#...#", "#...#", "#...#", "####.", "#....", "#...."},
	'q': {".....", ".....", ".####", "#...#", "#...#", "#...#", ".####", "....#", "....#"},
	'r': {".....", ".....", "#.##.", "##..#", "#....", "#....", "#...."},
	's': {".....", ".....", ".###.", "#....", ".###.", "....#", "####."},
	't': {".#...", ".#...", "###..", ".#...", ".#...", ".#..#", "..##."},
	'u': {".....", ".....", "#...#", "#...#", "#...#", "#..##", ".##.#"},
	'v': {".....", ".....", "#...#", "#...#", "#...#", ".#.#.", "..#.."},
	'w': {".....", ".....", "#...#", "#...#", "#.#.#", "#.#.#", ".#.#."},
	'x': {".....", ".....", "#...#", ".#.#.", "..#..", ".#.#.", "#...#"},
	'y': {".....", ".....", "#...#", "#...#", "#...#", "#...#", ".####", "....#", ".###."},
	'z': {".....", ".....", "#####", "...#.", "..#..", ".#...", "#####"},
	' ': {".....", ".....", ".....", ".....", ".....", ".....", "....."},
	'.': {".....", ".....", ".....", ".....", ".....", ".##..", ".##.."},
	',': {".....", ".....", ".....", ".....", ".##..", "..#..", ".#..."},
	':': {".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."},
	'-': {".....", ".....", ".....", "#####", ".....", ".....", "....."},
	'+': {".....", "..#..", "..#..", "#####", "..#..", "..#..", "....."},
	'=': {".....", ".....", "#####", ".....", "#####", ".....", "....."},
	'/': {".....", "....#", "...#.", "..#..", ".#...", "#....", "....."},
	'(': {"...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."},
	')': {".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."},
	'%': {"##...", "##..#", "...#.", "..#..", ".#...", "#..##", "...##"},
	'>': {".#...", "..#..", "...#.", "....#", "...#.", "..#..", ".#..."},
	'<': {"...#.", "..#..", ".#...", "#....", ".#...", "..#..", "...#."},
}
