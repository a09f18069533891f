package soak

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"errors"
	"html"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Strings a report may carry that break a page written without escaping.
const (
	nastyAdapter = `exec: ./impl --name "<b>bold</b>" & 'quoted'`
	nastyID      = `evt-<script>alert("id")</script>&'`
	nastyError   = `pq: </td></tr></table><h1>injected</h1> "quote" & more`
	nastyKind    = `db-<sleep>&"`
)

// dedupModel is one deduplicated event: the first delivery to take effect
// answers applied, every later one duplicate.
var dedupModel = porcupine.Model{
	Init: func() any { return false },
	Step: func(state, input, output any) (bool, any) {
		applied := state.(bool)
		if output.(string) == "applied" {
			return !applied, true
		}
		return applied, true
	},
	DescribeOperation: func(input, output any) string { return "deliver -> " + output.(string) },
	DescribeState: func(state any) string {
		if state.(bool) {
			return "applied"
		}
		return "not applied"
	},
}

// wrongVisualization returns porcupine's page for a history in which two
// sequential deliveries of one event both answered applied.
func wrongVisualization(t *testing.T) string {
	t.Helper()
	ops := []porcupine.Operation{
		{ClientId: 0, Input: 1, Call: 0, Output: "applied", Return: 10},
		{ClientId: 1, Input: 2, Call: 20, Output: "applied", Return: 30},
	}
	res, info := porcupine.CheckOperationsVerbose(dedupModel, ops, 0)
	if res != porcupine.Illegal {
		t.Fatalf("porcupine judged the double apply %v, want Illegal", res)
	}
	var buf bytes.Buffer
	if err := porcupine.Visualize(dedupModel, info, &buf); err != nil {
		t.Fatalf("porcupine.Visualize: %v", err)
	}
	return buf.String()
}

// failoverDetail is a failover window's detail as the nemesis writes it.
const failoverDetail = "hard-kill failover from node1 :41001 to node2 :41002, timeline 2 -> 3, writable after 3.1s " +
	"(SIGKILL to node1's pg_autoctl and its 12 processes); the old primary left out for 800ms, then the formation restored (a primary and a secondary) in 2.4s"

// testReport is a run of 40 seconds with a dip under a db-sleep window, a
// kill, a failover of a formation, a fault that failed, a wrong event with porcupine's page, and
// strings that need escaping everywhere a string goes.
func testReport(t *testing.T) Report {
	t.Helper()
	r := Report{
		Adapter: nastyAdapter,
		Config: Config{
			Duration: 40 * time.Second, Instances: 4, Duplicates: 0.3, Conflicts: 0.01,
			Nemeses: []string{"kill", "db-sleep", "failover", nastyKind}, Seed: 424242, DeliveryTimeout: 5 * time.Second,
		},
		Started:     time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC),
		Elapsed:     42*time.Second + 300*time.Millisecond,
		Interrupted: true,
		Environment: Environment{Harmless: "v0.9.0-test", Go: "go1.26.8", OS: "linux", Arch: "amd64", CPUs: 2,
			Server: "PostgreSQL", ServerVersion: "15.10"},
		Verdict: "anomalies",
		Totals: Totals{Events: 9000, Deliveries: 12500, Applied: 8990, Duplicate: 3200, Rejected: 90,
			Refused: 12, Unknown: 208, UnknownApplied: 150, UnknownNotApplied: 58, Wrong: 1, Lost: 1},
		Throughput: 297.6,
		Latency:    Latency{P50: 3200 * time.Microsecond, P95: 21 * time.Millisecond, P99: 480 * time.Millisecond, Max: 5 * time.Second},
		Faults: []FaultWindow{
			{Kind: "db-sleep", Detail: "pg_sleep(3) in every transaction", Start: 10 * time.Second, End: 16 * time.Second},
			{Kind: "kill", Detail: "killed instance 2", Start: 22 * time.Second, End: 22*time.Second + 50*time.Millisecond},
			{Kind: "failover", Detail: failoverDetail, Start: 24 * time.Second, End: 29 * time.Second},
			{Kind: "db-sleep", Detail: "pg_sleep(1)", Start: 30 * time.Second, End: 33 * time.Second},
			{Kind: nastyKind, Detail: "could not", Start: 35 * time.Second, End: 35 * time.Second, Err: nastyError},
		},
		FaultsFired: map[string]int64{"db-sleep": 2, "kill": 1, "server:failover@hard-kill": 1},
		Unknowns: []Unknown{
			{ID: nastyID, Attempt: 2, Error: nastyError, Applied: true},
			{ID: "evt-17", Attempt: 1, Error: "context deadline exceeded", Applied: false},
		},
	}
	for s := range 40 {
		sec := Second{At: time.Duration(s) * time.Second, Completed: 300 + 10*(s%5), Acked: 290 + 10*(s%5),
			Latency: Latency{P50: 3 * time.Millisecond, P95: 15 * time.Millisecond, P99: 40 * time.Millisecond}}
		switch {
		case s >= 10 && s < 16:
			sec.Completed, sec.Acked = 20, 12
			sec.Latency = Latency{P50: 1500 * time.Millisecond, P95: 3 * time.Second, P99: 4900 * time.Millisecond}
		case s >= 24 && s < 27:
			// The primary is gone until the standby is promoted.
			sec.Completed, sec.Acked = 8, 0
			sec.Latency = Latency{P50: 900 * time.Millisecond, P95: 2 * time.Second, P99: 2500 * time.Millisecond}
		case s >= 30 && s < 33:
			sec.Completed, sec.Acked = 120, 110
			sec.Latency = Latency{P50: 300 * time.Millisecond, P95: 900 * time.Millisecond, P99: 1 * time.Second}
		}
		if s == 13 {
			sec = Second{At: 13 * time.Second} // nothing ended: a gap in the latency lines
		}
		r.Timeline = append(r.Timeline, sec)
	}
	dest := 2
	r.Anomalies = []Anomaly{
		{
			Namespace: "soak-<ns>", ID: nastyID, Kinds: []string{"wrong", "duplicated"},
			Explanation:   `two deliveries answered "applied" & the ledger holds two effects`,
			Effects:       []EffectRecord{{Attempt: 1, Payload: "original"}, {Attempt: 3, Payload: "original"}},
			AtDestination: &dest,
			History: []Delivery{
				{Attempt: 1, Instance: 1, Payload: "original", Status: "ok", Outcome: "applied", Invoke: 11 * time.Second, Return: 11*time.Second + 40*time.Millisecond},
				{Attempt: 2, Instance: 3, Payload: "original", Status: "info", Error: nastyError, Hung: true, Invoke: 12 * time.Second, Return: 17 * time.Second},
				{Attempt: 3, Instance: 2, Payload: "original", Status: "ok", Outcome: "applied", Invoke: 18 * time.Second, Return: 18*time.Second + 5*time.Millisecond},
			},
			Visualization: wrongVisualization(t),
		},
		{
			ID: "evt-lost-9", Kinds: []string{"lost"}, Explanation: "acknowledged applied, but the ledger holds no effect",
			History: []Delivery{{Attempt: 1, Instance: 4, Payload: "original", Status: "ok", Outcome: "applied", Invoke: 31 * time.Second, Return: 32 * time.Second}},
		},
	}
	return r
}

func writeHTML(t *testing.T, r Report) string {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteHTML(&buf, r); err != nil {
		t.Fatalf("WriteHTML: %v", err)
	}
	return buf.String()
}

// TestWriteHTMLEscapes checks that no string from the report reaches the
// page as markup, and that porcupine's page survives the srcdoc attribute
// byte for byte.
func TestWriteHTMLEscapes(t *testing.T) {
	r := testReport(t)
	out := writeHTML(t, r)

	for _, raw := range []string{nastyAdapter, nastyID, nastyError, "<h1>injected</h1>", "<script"} {
		if strings.Contains(out, raw) {
			t.Errorf("page holds %q unescaped", raw)
		}
	}
	for _, want := range []string{
		html.EscapeString(nastyAdapter), html.EscapeString(nastyError),
		"evt-&lt;script&gt;alert(&#34;id&#34;)&lt;/script&gt;&amp;&#39;",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("page lacks the escaped %q", want)
		}
	}

	srcdocs := regexp.MustCompile(`srcdoc="([^"]*)"`).FindAllStringSubmatch(out, -1)
	if len(srcdocs) != 1 {
		t.Fatalf("page has %d srcdoc iframes, want 1 (one anomaly has a visualisation)", len(srcdocs))
	}
	if got, want := html.UnescapeString(srcdocs[0][1]), sealed(r.Anomalies[0].Visualization); got != want {
		t.Errorf("srcdoc unescapes to %d bytes that differ from porcupine's sealed %d", len(got), len(want))
	}
	if !strings.Contains(out, "<details class=\"visualization\">") {
		t.Error("the visualisation is not behind a closed <details>")
	}
	if !strings.Contains(out, `id="interrupted"`) {
		t.Error("an interrupted run has no interrupted banner")
	}
	if !strings.Contains(out, "ANOMALIES: 2") {
		t.Error("the verdict does not say ANOMALIES: 2")
	}
	if !regexp.MustCompile(`<td>failover</td><td>` + regexp.QuoteMeta(html.EscapeString(failoverDetail)) + `</td><td class="n">24.000 s</td><td class="n">29.000 s</td>`).MatchString(out) {
		t.Error("the fault schedule lacks the failover's window with its evidence")
	}
	if !strings.Contains(out, "server:failover@hard-kill") {
		t.Error("the faults fired lack the failover")
	}
	if !strings.Contains(out, "206 more are counted in the totals") {
		t.Error("the unknowns list does not say how many it leaves out")
	}
}

// chartSVGs decodes the page's two chart images, checking each is
// well-formed SVG.
func chartSVGs(t *testing.T, out string) map[string]string {
	t.Helper()
	imgs := regexp.MustCompile(`<img class="chart" id="(chart-[a-z]+)"[^>]* src="([^"]+)"`).FindAllStringSubmatch(out, -1)
	svgs := map[string]string{}
	for _, m := range imgs {
		// html/template writes the URI's + as &#43;, as HTML allows.
		data, ok := strings.CutPrefix(html.UnescapeString(m[2]), "data:image/svg+xml;base64,")
		if !ok {
			t.Fatalf("%s is not an inline SVG: %.60s", m[1], m[2])
		}
		b, err := base64.StdEncoding.DecodeString(data)
		if err != nil {
			t.Fatalf("%s: %v", m[1], err)
		}
		d := xml.NewDecoder(bytes.NewReader(b))
		for {
			_, err := d.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s is not well-formed SVG: %v", m[1], err)
			}
		}
		svgs[m[1]] = string(b)
	}
	return svgs
}

func TestWriteHTMLCharts(t *testing.T) {
	svgs := chartSVGs(t, writeHTML(t, testReport(t)))
	if len(svgs) != 2 || svgs["chart-throughput"] == "" || svgs["chart-latency"] == "" {
		t.Fatalf("page has charts %v, want chart-throughput and chart-latency", keys(svgs))
	}
	for name, svg := range svgs {
		for _, want := range []string{"fault: db-sleep", "fault: kill", "fault: failover", "seconds since start"} {
			if !strings.Contains(svg, want) {
				t.Errorf("%s lacks %q", name, want)
			}
		}
		// The failed fault was not injected, so it is not shaded.
		if strings.Contains(svg, "fault: db-&lt;sleep") {
			t.Errorf("%s shades a fault the nemesis could not inject", name)
		}
	}
	for _, want := range []string{"completed/s", "acked/s"} {
		if !strings.Contains(svgs["chart-throughput"], want) {
			t.Errorf("throughput chart lacks %q", want)
		}
	}
	for _, want := range []string{"p50", "p95", "p99"} {
		if !strings.Contains(svgs["chart-latency"], want) {
			t.Errorf("latency chart lacks %q", want)
		}
	}
}

func TestWriteHTMLEmptyAndFaultless(t *testing.T) {
	out := writeHTML(t, Report{})
	for _, want := range []string{`id="no-timeline"`, "CLEAN", `id="no-anomalies"`, "No delivery had an unknown outcome"} {
		if !strings.Contains(out, want) {
			t.Errorf("empty report's page lacks %q", want)
		}
	}
	if strings.Contains(out, "<img") {
		t.Error("empty report's page has a chart")
	}

	r := testReport(t)
	r.Faults, r.FaultsFired = nil, nil
	svgs := chartSVGs(t, writeHTML(t, r))
	if len(svgs) != 2 {
		t.Fatalf("faultless report has charts %v, want two", keys(svgs))
	}
	for name, svg := range svgs {
		if strings.Contains(svg, "fault:") {
			t.Errorf("faultless %s has a fault in its legend", name)
		}
	}

	// Faults but no second recorded (interrupted at once) still chart.
	r = testReport(t)
	r.Timeline = nil
	if svgs := chartSVGs(t, writeHTML(t, r)); len(svgs) != 2 {
		t.Errorf("report without timeline but with faults has charts %v, want two", keys(svgs))
	}
}

func TestSeriesBreaksOnGaps(t *testing.T) {
	var s series
	s.addPoint(0, 1, true)
	s.addPoint(1, 2, true)
	s.addPoint(2, 0, false)
	s.addPoint(3, 0, false)
	s.addPoint(4, 5, true)
	if len(s.segments) != 2 || len(s.segments[0]) != 2 || len(s.segments[1]) != 1 {
		t.Errorf("segments = %v, want [[(0,1) (1,2)] [(4,5)]]", s.segments)
	}
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestWriteHTMLUnhealedFault: a window the interrupted run never healed
// (End before Start) is said so, and shaded to the chart's end.
func TestWriteHTMLUnhealedFault(t *testing.T) {
	r := testReport(t)
	r.Faults = append(r.Faults, FaultWindow{Kind: "crash", Detail: "crashed the server", Start: 38 * time.Second})
	out := writeHTML(t, r)
	if !strings.Contains(out, `<td colspan="2">not healed</td>`) {
		t.Error("the schedule does not say the crash was not healed")
	}
	if strings.Contains(out, "-38s") {
		t.Error("the schedule gives the unhealed window a negative length")
	}
	_, layers := faultLayers(r.Faults, chartsEnd(r))
	last := layers[len(layers)-1]
	if got, want := last.spans[0], [2]float64{38, r.Elapsed.Seconds()}; got != want {
		t.Errorf("unhealed crash shaded over %v, want %v", got, want)
	}
}

// A soak that ended without acknowledgements says so, not "ANOMALIES: 0",
// and the crashes lead the page, each instance's first quoted.
func TestWriteHTMLNoAckAndCrashes(t *testing.T) {
	r := Report{Adapter: "exec", Verdict: verdictNoAck, Error: "no delivery was acknowledged for 10s " + nastyError,
		Totals:  Totals{Events: 7, Unsettled: 7},
		Crashes: []Crash{{Instance: 1, Count: 3, First: "process 1 of instance 1 failed: " + nastyError}, {Instance: 2, Count: 2, First: "process 1 of instance 2 failed"}}}
	out := writeHTML(t, r)
	for _, want := range []string{"NO-ACK", `id="crashes"`, "crashed 5 times", html.EscapeString("process 1 of instance 1 failed: " + nastyError),
		`id="no-ack"`, "The 7 events never acknowledged or refused are unsettled"} {
		if !strings.Contains(out, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(out, "ANOMALIES") || strings.Contains(out, "<h1>injected") {
		t.Error("the page of a no-ack soak says ANOMALIES, or holds the error unescaped")
	}
	if out := writeHTML(t, Report{}); strings.Contains(out, `id="crashes"`) || strings.Contains(out, `id="no-ack"`) {
		t.Error("a report without crashes or a no-ack error has their banners")
	}
}

// sealed is porcupine's page as the report embeds it.
func sealed(doc string) string {
	s, _ := sealVisualization(doc)
	return s
}

// hostile is what a malicious or broken implementation might write where
// the report shows it: markup with an inline handler, the end of a script
// and a new one, quotes of both kinds, an ampersand, a javascript: URL.
const hostile = `<img src=x onerror="document.documentElement.setAttribute('data-pwned','1')">` +
	`</script><script>document.title='pwned'</script>"'&amp; <a href="javascript:alert(1)">click</a>`

// hostileReport is a soak whose implementation wrote text everywhere the
// report shows what it wrote: its name and version, its errors (a
// delivery's, a crash's, a fault's, why the soak stopped), the namespace
// it was given. The wrong event's visualisation is porcupine's page as
// the checker makes it, with the error as the delivery's metadata, which
// porcupine's tooltip shows.
func hostileReport(t *testing.T, text string) Report {
	t.Helper()
	c := NewChecker("ns-" + text)
	ops := []Op{info(1, 1, 0, 10), duplicate(2, 2, 20, 30), applied(3, 1, 40, 50)}
	c.Record(ops[0], errors.New(text))
	c.Record(ops[1], nil)
	c.Record(ops[2], nil)
	c.Effect(0, 1, Original)
	tot, as, unknowns := c.Check(t.Context())
	if len(as) != 1 || as[0].Visualization == "" {
		t.Fatalf("checker found %d anomalies, want one wrong event with a visualisation: %+v", len(as), as)
	}
	return Report{
		Adapter:     text,
		Config:      Config{Nemeses: []string{text}},
		Environment: Environment{Harmless: text, Server: text, ServerVersion: text},
		Verdict:     verdictNoAck,
		Error:       text,
		Crashes:     []Crash{{Instance: 1, Count: 1, First: text}},
		Totals:      tot,
		Faults:      []FaultWindow{{Kind: text, Detail: text, Start: time.Second, End: 2 * time.Second, Err: text}},
		FaultsFired: map[string]int64{text: 1},
		Anomalies:   as,
		Unknowns:    unknowns,
	}
}

// TestWriteHTMLHostile renders what an implementation wrote with markup in
// it, and checks it reaches neither the page nor porcupine's visualisation
// as markup, and that every document carries a policy that forbids
// requests and lets no script run but porcupine's own.
func TestWriteHTMLHostile(t *testing.T) {
	r := hostileReport(t, hostile)
	out := writeHTML(t, r)

	for _, raw := range []string{hostile, "<img src=x", "<script", "<a href", `onerror="`, `href="javascript:`} {
		if strings.Contains(out, raw) {
			t.Errorf("page holds %q unescaped", raw)
		}
	}
	if n := strings.Count(out, html.EscapeString(hostile)); n < 10 {
		t.Errorf("page shows the implementation's text escaped %d times, want it everywhere (10 or more)", n)
	}

	head, _, ok := strings.Cut(out, "</head>")
	if !ok {
		t.Fatal("page has no head")
	}
	metas := regexp.MustCompile(`<meta http-equiv="Content-Security-Policy" content="([^"]*)">`).FindAllStringSubmatch(head, -1)
	if len(metas) != 1 {
		t.Fatalf("page's head has %d Content-Security-Policy metas, want 1", len(metas))
	}
	if i, j := strings.Index(head, metas[0][0]), strings.Index(head, "<style"); j < i {
		t.Error("the policy comes after the page's style: it would not cover it")
	}
	pagePolicy := html.UnescapeString(metas[0][1])
	checkPolicy(t, "page", pagePolicy)

	srcdocs := regexp.MustCompile(`srcdoc="([^"]*)"`).FindAllStringSubmatch(out, -1)
	if len(srcdocs) != 1 {
		t.Fatalf("page has %d srcdoc iframes, want 1", len(srcdocs))
	}
	doc := html.UnescapeString(srcdocs[0][1])
	for _, raw := range []string{hostile, "<img", "</script><script>", "<a href"} {
		if strings.Contains(doc, raw) {
			t.Errorf("visualisation holds %q unescaped", raw)
		}
	}
	m := regexp.MustCompile(`(?s)^<!doctype html>\s*<html lang="en">\s*<head>\n<meta http-equiv="Content-Security-Policy" content="([^"]*)">`).FindStringSubmatch(doc)
	if m == nil {
		t.Fatalf("visualisation does not open its head with a policy: %.200q", doc)
	}
	docPolicy := html.UnescapeString(m[1])
	checkPolicy(t, "visualisation", docPolicy)

	// Porcupine's one script is allowed, by its hash, in both the page
	// (whose policy the srcdoc inherits) and the visualisation.
	scripts := inlineScript.FindAllStringSubmatch(doc, -1)
	if len(scripts) != 1 {
		t.Fatalf("visualisation has %d scripts, want porcupine's one", len(scripts))
	}
	sum := sha256.Sum256([]byte(scripts[0][1]))
	want := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	for name, p := range map[string]string{"page": pagePolicy, "visualisation": docPolicy} {
		if !strings.HasSuffix(p, "; script-src "+want) {
			t.Errorf("%s's policy %q does not allow porcupine's script %s, and only it", name, p, want)
		}
	}

	// The tooltip sets the delivery's metadata with innerHTML: porcupine
	// must be handed it escaped.
	data := regexp.MustCompile(`const data = (.*)\n`).FindStringSubmatch(scripts[0][1])
	if data == nil {
		t.Fatal("visualisation's script has no data")
	}
	var v struct {
		Partitions []struct {
			History []struct{ Metadata string }
		}
	}
	if err := json.Unmarshal([]byte(data[1]), &v); err != nil {
		t.Fatalf("visualisation's data: %v", err)
	}
	var metadata []string
	for _, p := range v.Partitions {
		for _, h := range p.History {
			if h.Metadata != "" {
				metadata = append(metadata, h.Metadata)
			}
		}
	}
	if !slices.Equal(metadata, []string{html.EscapeString(hostile)}) {
		t.Errorf("visualisation's metadata = %q, want the error escaped, once", metadata)
	}
}

// checkPolicy checks that a Content-Security-Policy forbids every request
// (nothing but data: images and inline styles), forms and base URLs, and
// allows no inline script but by hash.
func checkPolicy(t *testing.T, name, policy string) {
	t.Helper()
	directives := map[string]string{}
	for _, d := range strings.Split(policy, ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(d), " ")
		directives[name] = value
	}
	for d, want := range map[string]string{
		"default-src": "'none'", "img-src": "data:", "style-src": "'unsafe-inline'",
		"base-uri": "'none'", "form-action": "'none'",
	} {
		if got := directives[d]; got != want {
			t.Errorf("%s's policy %q: %s is %q, want %q", name, policy, d, got, want)
		}
	}
	script := directives["script-src"]
	for _, src := range strings.Fields(script) {
		if !strings.HasPrefix(src, "'sha256-") {
			t.Errorf("%s's policy %q allows scripts from %s, want hashes only", name, policy, src)
		}
	}
	if len(directives) != 6 || script == "" {
		t.Errorf("%s's policy %q has other directives than default-src, img-src, style-src, base-uri, form-action and script-src", name, policy)
	}
}

// A page with no visualisation runs no script at all.
func TestWriteHTMLPolicyWithoutScripts(t *testing.T) {
	out := writeHTML(t, Report{})
	if !strings.Contains(out, `<meta http-equiv="Content-Security-Policy" content="`+html.EscapeString(basePolicy+"; script-src 'none'")+`">`) {
		t.Error("a page without visualisation does not forbid scripts")
	}
}

func TestSealVisualizationWithoutHead(t *testing.T) {
	got, hashes := sealVisualization("<p>no head<script>1</script>")
	sum := sha256.Sum256([]byte("1"))
	want := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	if !slices.Equal(hashes, []string{want}) {
		t.Errorf("hashes = %q, want %q", hashes, want)
	}
	if !strings.HasPrefix(got, `<meta http-equiv="Content-Security-Policy" content="`) || !strings.HasSuffix(got, "\n<p>no head<script>1</script>") {
		t.Errorf("a page without head sealed as %q, want the policy first", got)
	}
}
