package soak

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"fmt"
	"image/color"
	"math"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// chartWidth and chartHeight size both charts; the page shows them at the
// width of its column, and SVG keeps them sharp at any zoom.
const (
	chartWidth  = 26 * vg.Centimeter
	chartHeight = 9 * vg.Centimeter
)

// seriesColors are the lines' colours: dark and saturated, so they stand
// out against the pale fault shading.
var seriesColors = []color.RGBA{
	{R: 0x1f, G: 0x4e, B: 0x9a, A: 0xff}, // blue
	{R: 0x2c, G: 0x8a, B: 0x2c, A: 0xff}, // green
	{R: 0xd0, G: 0x62, B: 0x00, A: 0xff}, // orange
	{R: 0xb0, G: 0x1c, B: 0x2e, A: 0xff}, // red
}

// faultColors shade the fault windows, one colour per kind in the order
// the kinds first appear, translucent so overlapping windows and the lines
// beneath stay visible. Eight are enough for every soak: of the nine
// nemeses, crash runs only on one server and failover only on a
// formation.
var faultColors = []color.NRGBA{
	{R: 0xe3, G: 0x1a, B: 0x1c, A: 0x38},
	{R: 0x98, G: 0x4e, B: 0xa3, A: 0x38},
	{R: 0xff, G: 0x7f, B: 0x00, A: 0x38},
	{R: 0x37, G: 0x7e, B: 0xb8, A: 0x38},
	{R: 0xa6, G: 0x56, B: 0x28, A: 0x38},
	{R: 0xf7, G: 0x81, B: 0xbf, A: 0x38},
	{R: 0x4d, G: 0xaf, B: 0x4a, A: 0x38},
	{R: 0x99, G: 0x99, B: 0x99, A: 0x38},
}

// faultSpans shades the fault windows of one kind over the whole height of
// the data area, whatever the y range, so the eye can tell what the
// throughput and the latency did while a fault was on.
type faultSpans struct {
	spans [][2]float64 // [start, end] in seconds
	color color.Color
}

// Plot implements plot.Plotter.
func (f *faultSpans) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	for _, s := range f.spans {
		x0, x1 := trX(s[0]), trX(s[1])
		x0, x1 = max(x0, c.Min.X), min(x1, c.Max.X)
		if x1 < x0 {
			continue
		}
		// A window shorter than a pixel (a kill is instantaneous) still
		// shows as a thin band.
		if x1-x0 < 1.5 {
			x1 = x0 + 1.5
		}
		c.FillPolygon(f.color, []vg.Point{
			{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y},
			{X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y},
		})
	}
}

// DataRange implements plot.DataRanger over x only: the y range is the
// data's, the shading spans it whole.
func (f *faultSpans) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = math.Inf(1), math.Inf(-1)
	for _, s := range f.spans {
		xmin, xmax = math.Min(xmin, s[0]), math.Max(xmax, s[1])
	}
	return xmin, xmax, math.Inf(1), math.Inf(-1)
}

// Thumbnail implements plot.Thumbnailer for the legend.
func (f *faultSpans) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(f.color, []vg.Point{
		{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y},
		{X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y},
	})
}

// faultLayers groups the windows that took effect by kind, in the order
// the kinds first appear; a window the nemesis could not inject (Err set)
// is not shaded, the schedule table says why. A window that ends before it
// starts was never healed (the run was interrupted): it is shaded to end.
func faultLayers(faults []FaultWindow, end time.Duration) (kinds []string, layers []*faultSpans) {
	byKind := map[string]*faultSpans{}
	for _, f := range faults {
		if f.Err != "" {
			continue
		}
		l, ok := byKind[f.Kind]
		if !ok {
			l = &faultSpans{color: faultColors[len(kinds)%len(faultColors)]}
			byKind[f.Kind] = l
			kinds = append(kinds, f.Kind)
			layers = append(layers, l)
		}
		healed := f.End
		if healed < f.Start {
			healed = max(end, f.Start)
		}
		l.spans = append(l.spans, [2]float64{f.Start.Seconds(), healed.Seconds()})
	}
	return kinds, layers
}

// series is one line of a chart, broken where it has no value.
type series struct {
	name     string
	segments []plotter.XYs
}

// addPoint adds (x, y) to s, or ends the current segment when ok is false.
func (s *series) addPoint(x, y float64, ok bool) {
	if !ok {
		if n := len(s.segments); n > 0 && len(s.segments[n-1]) > 0 {
			s.segments = append(s.segments, nil)
		}
		return
	}
	if len(s.segments) == 0 {
		s.segments = append(s.segments, nil)
	}
	n := len(s.segments) - 1
	s.segments[n] = append(s.segments[n], plotter.XY{X: x, Y: y})
}

// chart draws the series over the fault windows and returns the SVG as a
// data: URI. x is seconds since the run's start.
func chart(title, ylabel string, ss []series, faults []FaultWindow, end time.Duration, logY bool) (string, error) {
	p := plot.New()
	// Sans-serif like the page around it; Liberation is built into gonum
	// and the browser falls back to its own sans-serif by the same name.
	for _, st := range []*text.Style{&p.Title.TextStyle, &p.X.Label.TextStyle, &p.Y.Label.TextStyle,
		&p.X.Tick.Label, &p.Y.Tick.Label, &p.Legend.TextStyle} {
		st.Font.Variant = "Sans"
	}
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.Title.Padding = vg.Points(6)
	p.Title.Text = title
	p.X.Label.Text = "seconds since start"
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.ThumbnailWidth = 0.6 * vg.Centimeter
	p.Legend.Padding = vg.Points(1.5)
	p.Legend.XOffs = vg.Points(4)

	kinds, layers := faultLayers(faults, end)
	for _, l := range layers {
		p.Add(l)
	}

	ymin, ymax := math.Inf(1), math.Inf(-1)
	for i, s := range ss {
		style := draw.LineStyle{Color: seriesColors[i%len(seriesColors)], Width: vg.Points(1.5)}
		var thumb plot.Thumbnailer
		for _, seg := range s.segments {
			if len(seg) == 0 {
				continue
			}
			for _, xy := range seg {
				ymin, ymax = math.Min(ymin, xy.Y), math.Max(ymax, xy.Y)
			}
			if len(seg) == 1 {
				// A lone point draws no line; a dot keeps it visible.
				sc, err := plotter.NewScatter(seg)
				if err != nil {
					return "", fmt.Errorf("%s: %s: %w", title, s.name, err)
				}
				sc.GlyphStyle = draw.GlyphStyle{Color: style.Color, Radius: vg.Points(2), Shape: draw.CircleGlyph{}}
				p.Add(sc)
				continue
			}
			l, err := plotter.NewLine(seg)
			if err != nil {
				return "", fmt.Errorf("%s: %s: %w", title, s.name, err)
			}
			l.LineStyle = style
			p.Add(l)
			thumb = l
		}
		if thumb == nil {
			l := &plotter.Line{LineStyle: style}
			thumb = l
		}
		p.Legend.Add(s.name, thumb)
	}
	for i, k := range kinds {
		p.Legend.Add("fault: "+k, layers[i])
	}

	p.X.Min, p.X.Max = 0, math.Max(end.Seconds(), 1)
	// Headroom above the data for the legend, as tall as the legend: a
	// soak with every nemesis has ten entries, which covered the lines
	// with a fixed margin.
	entries := float64(len(ss) + len(kinds))
	if logY && ymin > 0 && ymax/ymin > 20 {
		// Latency under faults spans orders of magnitude: the p99 of a
		// timed-out second would flatten the p50 on a linear axis.
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Min, p.Y.Max = ymin/1.5, ymax*math.Pow(ymax/ymin, 0.1+0.09*entries)
	} else {
		if math.IsInf(ymax, -1) || ymax <= 0 {
			ymax = 1
		}
		p.Y.Min, p.Y.Max = 0, ymax*(1.15+0.11*entries)
	}

	wt, err := p.WriterTo(chartWidth, chartHeight, "svg")
	if err != nil {
		return "", fmt.Errorf("%s: %w", title, err)
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		return "", fmt.Errorf("%s: rendering svg: %w", title, err)
	}
	return "data:image/svg+xml;base64," + base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// chartsEnd is where the charts' x axis ends: the last second, or the last
// fault window's end if later.
func chartsEnd(r Report) time.Duration {
	var end time.Duration
	if n := len(r.Timeline); n > 0 {
		end = r.Timeline[n-1].At + time.Second
	}
	for _, f := range r.Faults {
		end = max(end, f.Start, f.End)
	}
	end = max(end, r.Elapsed)
	return end
}

// throughputChart plots the deliveries completed and acknowledged per
// second.
func throughputChart(r Report) (string, error) {
	completed := series{name: "completed/s"}
	acked := series{name: "acked/s"}
	for _, s := range sortedTimeline(r.Timeline) {
		x := s.At.Seconds()
		completed.addPoint(x, float64(s.Completed), true)
		acked.addPoint(x, float64(s.Acked), true)
	}
	return chart("Throughput (deliveries per second)", "deliveries/s",
		[]series{completed, acked}, r.Faults, chartsEnd(r), false)
}

// latencyChart plots each second's latency percentiles in milliseconds;
// a second in which no delivery ended has none, and breaks the lines.
func latencyChart(r Report) (string, error) {
	p50 := series{name: "p50"}
	p95 := series{name: "p95"}
	p99 := series{name: "p99"}
	for _, s := range sortedTimeline(r.Timeline) {
		x := s.At.Seconds()
		ok := s.Completed > 0
		p50.addPoint(x, ms(s.Latency.P50), ok)
		p95.addPoint(x, ms(s.Latency.P95), ok)
		p99.addPoint(x, ms(s.Latency.P99), ok)
	}
	return chart("Delivery latency per second", "ms",
		[]series{p50, p95, p99}, r.Faults, chartsEnd(r), true)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// sortedTimeline returns the timeline in time order without changing the
// report's.
func sortedTimeline(t []Second) []Second {
	return slices.SortedStableFunc(slices.Values(t), func(a, b Second) int {
		return cmp.Compare(a.At, b.At)
	})
}
