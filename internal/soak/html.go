package soak

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/harmless-dev/harmless/internal/harness"
)

//go:embed report.html.tmpl
var reportTemplate string

// pageTemplate is parsed once; html/template escapes every value by its
// context, so ids, errors and adapter names can hold anything.
var pageTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"dur":   fmtDuration,
	"at":    fmtOffset,
	"pct":   func(f float64) string { return fmt.Sprintf("%.0f%%", f*100) },
	"join":  strings.Join,
	"plus1": func(i int) int { return i + 1 },
	"times": harness.Times[int],
	"span":  func(start, end time.Duration) string { return fmtDuration(end - start) },
}).Parse(reportTemplate))

// page is what the template reads: the report and what is derived from it
// for display.
type page struct {
	Report
	Title string
	// ThroughputChart and LatencyChart are SVG data: URIs the page
	// generated itself, so the template may trust them as URLs.
	ThroughputChart, LatencyChart template.URL
	FaultsFired                   []kindCount
	// UnlistedUnknowns counts the unknowns Report.Unknowns leaves out.
	UnlistedUnknowns int
}

type kindCount struct {
	Kind  string
	Count int64
}

// WriteHTML writes r as one self-contained HTML page: the verdict, the
// run's figures, charts of the throughput and the latency over time with
// the fault windows shaded, and every anomaly with its history. The page
// loads nothing from anywhere: the charts are inline SVG images and
// porcupine's visualisations inline iframes.
func WriteHTML(w io.Writer, r Report) error {
	p := page{Report: r}
	p.Title = "harmless soak: " + r.Adapter
	if len(r.Timeline) > 0 || len(r.Faults) > 0 {
		tc, err := throughputChart(r)
		if err != nil {
			return fmt.Errorf("soak html: %w", err)
		}
		lc, err := latencyChart(r)
		if err != nil {
			return fmt.Errorf("soak html: %w", err)
		}
		p.ThroughputChart, p.LatencyChart = template.URL(tc), template.URL(lc)
	}
	for _, k := range slices.Sorted(maps.Keys(r.FaultsFired)) {
		p.FaultsFired = append(p.FaultsFired, kindCount{k, r.FaultsFired[k]})
	}
	p.UnlistedUnknowns = max(0, r.Totals.Unknown-len(r.Unknowns))
	if err := pageTemplate.Execute(w, p); err != nil {
		return fmt.Errorf("soak html: %w", err)
	}
	return nil
}

// fmtDuration rounds d for a reader: milliseconds below a second, tenths
// of seconds below a minute.
func fmtDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(10 * time.Microsecond).String()
	case d < time.Minute:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// fmtOffset writes an offset from the run's start as seconds with
// milliseconds, so the history's times line up in a column.
func fmtOffset(d time.Duration) string {
	return fmt.Sprintf("%.3f s", d.Seconds())
}
