package soak

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"html"
	"html/template"
	"io"
	"maps"
	"regexp"
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
	// Policy is the page's Content-Security-Policy, which lets only the
	// visualisations' own scripts run.
	Policy string
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
//
// The report holds what the implementation wrote (its errors, its name,
// the ids it was given back): the template escapes it, porcupine's tooltip
// gets it escaped (see eventModel), and should anything slip through all
// the same, every document of the page carries a Content-Security-Policy
// that forbids any request and any script but porcupine's own.
func WriteHTML(w io.Writer, r Report) error {
	p := page{Report: r}
	p.Title = "harmless soak: " + r.Adapter
	// The visualisations are sealed in a copy: the caller's report keeps
	// porcupine's pages as they were.
	p.Anomalies = slices.Clone(r.Anomalies)
	var hashes []string
	for i, a := range p.Anomalies {
		if a.Visualization == "" {
			continue
		}
		var hs []string
		p.Anomalies[i].Visualization, hs = sealVisualization(a.Visualization)
		hashes = append(hashes, hs...)
	}
	// A srcdoc document inherits the policy of the page around it, and
	// must satisfy both: the page allows every visualisation's scripts,
	// each visualisation only its own.
	p.Policy = contentSecurityPolicy(hashes)
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

// basePolicy is what every document of the report allows: images and
// styles written inline, nothing fetched, no form sent, no base URL to
// resolve links against. Scripts are allowed by hash only, so markup that
// reached a page unescaped runs no inline event handler nor javascript:
// URL, and requests nothing.
const basePolicy = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

// contentSecurityPolicy is basePolicy allowing the scripts whose hashes
// (CSP source expressions) are given, and no other.
func contentSecurityPolicy(scriptHashes []string) string {
	if len(scriptHashes) == 0 {
		return basePolicy + "; script-src 'none'"
	}
	return basePolicy + "; script-src " + strings.Join(slices.Compact(slices.Sorted(slices.Values(scriptHashes))), " ")
}

// inlineScript matches an inline script element; its text is what a CSP
// hash covers. Porcupine's page has one, its code and the history as JSON,
// which encoding/json writes with '<' escaped, so no "</script" inside.
var inlineScript = regexp.MustCompile(`(?is)<script\b[^>]*>(.*?)</script\s*>`)

// headTag matches the opening of a document's head, where the policy goes.
var headTag = regexp.MustCompile(`(?i)<head\b[^>]*>`)

// sealVisualization returns porcupine's page with a Content-Security-Policy
// meta element first in its head, allowing its own scripts by hash, and
// the hashes. A page without a head gets the element first of all: the
// parser then opens the head for it, and the policy still holds.
func sealVisualization(doc string) (string, []string) {
	var hashes []string
	for _, m := range inlineScript.FindAllStringSubmatch(doc, -1) {
		sum := sha256.Sum256([]byte(m[1]))
		hashes = append(hashes, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
	}
	meta := `<meta http-equiv="Content-Security-Policy" content="` + html.EscapeString(contentSecurityPolicy(hashes)) + `">`
	if loc := headTag.FindStringIndex(doc); loc != nil {
		return doc[:loc[1]] + "\n" + meta + doc[loc[1]:], hashes
	}
	return meta + "\n" + doc, hashes
}
