package suite

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"html"
	"io"
	"maps"
	"os"
	"reflect"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/redact"
)

// Verdict is a rule's result in a certificate.
type Verdict string

const (
	// VerdictPass means every spec of the rule ran and passed.
	VerdictPass Verdict = "pass"
	// VerdictFail means a spec of the rule failed; the message says what was observed.
	VerdictFail Verdict = "fail"
	// VerdictNotSupported means the rule does not apply to what the implementation
	// declares, or the environment cannot run it; the message says which.
	VerdictNotSupported Verdict = "not-supported"
	// VerdictSkipped means the rule did not run (filtered out, or the run stopped early).
	VerdictSkipped Verdict = "skipped"
)

// Status is a certificate's overall verdict.
type Status string

const (
	// StatusCertified: every MUST rule ran and passed, and no rule failed.
	StatusCertified Status = "certified"
	// StatusPartial: no rule failed, but some MUST rules did not run:
	// they could not run here (not-supported: the environment, or what the
	// implementation declares, rules them out) or were left out (skipped).
	// What ran passed; what did not run is not certified.
	StatusPartial Status = "partial"
	// StatusNotCertified: a rule failed, or the run could not start.
	StatusNotCertified Status = "not-certified"
	// StatusInterrupted: the run was stopped before it ended (a signal).
	// It certifies nothing; the rules it had judged keep their verdicts,
	// and none failed because of the interruption.
	StatusInterrupted Status = "interrupted"
)

// RuleResult is one rule's verdict.
type RuleResult struct {
	ID      string         `json:"id"`
	Fixture string         `json:"fixture"`
	Level   fixtures.Level `json:"level"`
	Doc     string         `json:"doc"`
	Verdict Verdict        `json:"verdict"`
	Message string         `json:"message,omitempty"`
}

// Certificate is the suite's verdict on one implementation.
type Certificate struct {
	// Adapter is the adapter's name.
	Adapter string `json:"adapter"`
	// Status is the overall verdict: certified, partial or not-certified
	// (see [Status]).
	Status Status `json:"status"`
	// Certified is true exactly when Status is [StatusCertified]: every
	// MUST rule ran and passed, and no rule failed.
	Certified bool `json:"certified"`
	// SuiteVersion is the version of the suite that judged.
	SuiteVersion string `json:"suite_version"`
	// Harness identifies the build of the harness that judged.
	Harness HarnessInfo `json:"harness"`
	// Protocol describes how the harness drove an implementation that runs
	// in another process (see [WithProtocol]); nil, and absent from the
	// JSON, for an in-process adapter.
	Protocol *Protocol `json:"protocol,omitempty"`
	// Database is the PostgreSQL server's version.
	Database string `json:"database"`
	// DatabaseKind says how the database was provided: dsn, container or
	// cluster.
	DatabaseKind string `json:"database_kind"`
	// Declared is what the adapter declares it can do
	// ([adapters.Declaration]).
	Declared Capabilities `json:"declared"`
	// Verified is the part of Declared that the run proved (see
	// [Capabilities]): a capability is set only when every rule that tests
	// it passed; an unproved one is the zero value.
	Verified Capabilities `json:"verified"`
	// Seed is the seed of the run's random choices: the same seed repeats
	// them (see [WithSeed]).
	Seed uint64 `json:"seed"`
	// Error is set when the run could not start (no database, a bad
	// adapter); no rule ran then.
	Error string `json:"error,omitempty"`
	// Interrupted says why the run stopped before it ended, when it did
	// (Status is then [StatusInterrupted]): e.g. "Interrupted by User".
	Interrupted string `json:"interrupted,omitempty"`
	// Rules holds one verdict per rule, in catalogue order.
	Rules []RuleResult `json:"rules"`
	// Faults counts, by kind, how many times the harness's faults fired
	// during the run; a kind that never fired is absent. The kinds are
	// "db:<action>@<point>" (a database-side fault, e.g. "db:raise@effect",
	// "db:sleep@effect", "db:terminate@commit"), "hook:<action>" (a Go hook
	// in the effect: "hook:error", "hook:panic", "hook:cancel"),
	// "proxy:<action>@<point>" (a rule of the wire proxy, e.g.
	// "proxy:cut@before-commit", "proxy:cut@after-commit-complete",
	// "proxy:cut@after-statement") and "server:crash". It is never nil.
	Faults map[string]int64 `json:"faults"`
	// Started and Duration time the run.
	Started  time.Time `json:"started_at"`
	Duration float64   `json:"duration_s"`
}

// HarnessInfo identifies the build of the harness.
type HarnessInfo struct {
	// Version is the suite's [Version].
	Version string `json:"version"`
	// Commit is the harness's source revision (see [Harness]).
	Commit string `json:"commit"`
}

// Harness returns the version and commit of the running harness. The commit
// is the VCS revision Go stamped into the binary, with "-dirty" appended
// when the working tree had changes; without a revision (go install of a
// released version, or a build with -buildvcs=false) it is the module's
// version, unless that is "(devel)"; else "unknown". When the harness is a
// dependency of the module under test (suite.Run in another module's
// tests), the main module's revision is not the harness's: the commit is
// then the version of the harness's module in the build, or "unknown".
func Harness() HarnessInfo {
	info, _ := debug.ReadBuildInfo() // nil when it cannot be read
	return HarnessInfo{Version: Version, Commit: buildCommit(info)}
}

// modulePath is the harness's module path.
var modulePath = strings.TrimSuffix(reflect.TypeFor[Certificate]().PkgPath(), "/suite")

// buildCommit finds the harness's commit in info (see [Harness]); nil info
// means none could be read.
func buildCommit(info *debug.BuildInfo) string {
	const unknown = "unknown"
	usable := func(v string) bool { return v != "" && v != "(devel)" }
	switch {
	case info == nil:
		return unknown
	case info.Main.Path != modulePath:
		for _, d := range info.Deps {
			if d.Path != modulePath {
				continue
			}
			if d.Replace != nil {
				d = d.Replace
			}
			if usable(d.Version) {
				return d.Version
			}
		}
		return unknown
	}
	var revision string
	var modified bool
	for _, kv := range info.Settings {
		switch kv.Key {
		case "vcs.revision":
			revision = kv.Value
		case "vcs.modified":
			modified = kv.Value == "true"
		}
	}
	switch {
	case revision != "" && modified:
		return revision + "-dirty"
	case revision != "":
		return revision
	case usable(info.Main.Version):
		return info.Main.Version
	}
	return unknown
}

// Capabilities are the capabilities of [adapters.Declaration], as the
// certificate states them: what the adapter declares (Certificate.Declared)
// and what the run verified (Certificate.Verified). In Verified a
// capability holds the declared value only when every rule that tests it
// passed, and the zero value otherwise:
//
//   - ConflictPolicy, when every rule of the conflicting-payload fixture
//     passed;
//   - RedeliveryWindow, when every rule of the retention-expiry fixture
//     passed (an adapter that declares no window gets not-supported there,
//     so never a verified window);
//   - AcceptsClock, when the adapter declares it and every rule of the
//     retention-expiry fixture passed: those rules then ran on the
//     harness's manual clock, which the implementation had to follow.
//
// A rule that was skipped, not-supported or failed verifies nothing.
type Capabilities struct {
	// ConflictPolicy is the answer to a conflicting payload: "reject" or ""
	// (none).
	ConflictPolicy adapters.ConflictPolicy `json:"conflict_policy"`
	// RedeliveryWindow is how long deduplication state is kept, in seconds;
	// 0 for none.
	RedeliveryWindow float64 `json:"redelivery_window_s"`
	// AcceptsClock reports whether the implementation reads time only from
	// the harness's clock.
	AcceptsClock bool `json:"accepts_clock"`
}

// declared returns the capabilities d declares.
func declared(d adapters.Declaration) Capabilities {
	return Capabilities{ConflictPolicy: d.ConflictPolicy, RedeliveryWindow: d.RedeliveryWindow.Seconds(), AcceptsClock: d.AcceptsClock}
}

// verify returns the part of declared that rules prove (see
// [Capabilities]).
func verify(declared Capabilities, rules []RuleResult) Capabilities {
	passed := func(fixture string) bool {
		n := 0
		for _, r := range rules {
			if r.Fixture != fixture {
				continue
			}
			if r.Verdict != VerdictPass {
				return false
			}
			n++
		}
		return n > 0
	}
	var v Capabilities
	if passed(fixtures.ConflictingPayload) {
		v.ConflictPolicy = declared.ConflictPolicy
	}
	if passed(fixtures.RetentionExpiry) {
		v.RedeliveryWindow = declared.RedeliveryWindow
		v.AcceptsClock = declared.AcceptsClock
	}
	return v
}

// Count returns how many rules have verdict v.
func (c Certificate) Count(v Verdict) int { return count(c.Rules, v) }

// count returns how many of rules have verdict v.
func count(rules []RuleResult, v Verdict) int {
	n := 0
	for _, r := range rules {
		if r.Verdict == v {
			n++
		}
	}
	return n
}

// Summary is the closing line: "N passed, N failed" and, when there are any,
// the skipped and not-supported counts.
func (c Certificate) Summary() string {
	s := fmt.Sprintf("%d passed, %d failed", c.Count(VerdictPass), c.Count(VerdictFail))
	if n := c.Count(VerdictSkipped); n > 0 {
		s += fmt.Sprintf(", %d skipped", n)
	}
	if n := c.Count(VerdictNotSupported); n > 0 {
		s += fmt.Sprintf(", %d not-supported", n)
	}
	return s
}

// Table renders the verdicts, one row per rule.
func (c Certificate) Table() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "RULE\tFIXTURE\tLEVEL\tVERDICT")
	for _, r := range c.Rules {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.ID, r.Fixture, r.Level, strings.ToUpper(string(r.Verdict)))
	}
	w.Flush()
	return b.String()
}

// WriteJSON writes the certificate to path, indented.
func (c Certificate) WriteJSON(path string) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("encode certificate: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write certificate: %w", err)
	}
	return nil
}

// certificate builds the registration's certificate from its records.
func (s *state) certificate() Certificate {
	cert := Certificate{
		Adapter:      s.adapter.Name,
		SuiteVersion: Version,
		Harness:      Harness(),
		Protocol:     s.cfg.protocol,
		Database:     s.database,
		DatabaseKind: s.kind,
		Declared:     declared(s.adapter.Declares),
		Seed:         s.seed,
		Faults:       map[string]int64{},
		Started:      s.started,
	}
	if !s.started.IsZero() {
		cert.Duration = time.Since(s.started).Seconds()
	}
	if s.run != nil {
		maps.Copy(cert.Faults, s.run.FaultsFired())
	}
	if s.setupErr != nil {
		cert.Error = s.setupErr.Error()
	}
	cert.Rules = ruleResults(fixtures.Rules(), s.order)
	cert.Status = status(cert.Error, cert.Rules)
	cert.Certified = cert.Status == StatusCertified
	cert.Verified = verify(cert.Declared, cert.Rules)
	for _, rec := range s.order {
		if rec.report != nil && rec.report.State == types.SpecStateInterrupted {
			cert.interrupt("Interrupted")
			break
		}
	}
	if s.cancelled {
		cert.interrupt(fmt.Sprintf("cancelled: %v", context.Cause(s.ctx)))
	}
	return cert.masked(s.secrets)
}

// interrupt marks the certificate of a run stopped before it ended, for
// reason (a more precise reason may replace one given before): it
// certifies nothing, and the rules that did not run say why.
func (c *Certificate) interrupt(reason string) {
	c.Interrupted, c.Status, c.Certified = reason, StatusInterrupted, false
	for i, r := range c.Rules {
		if r.Verdict == VerdictSkipped {
			c.Rules[i].Message = fmt.Sprintf("did not run to its end: the run was interrupted (%s)", reason)
		}
	}
}

// masked returns the certificate with secrets masked in every text that
// can quote one: the setup error (a driver's error may quote the DSN), the
// rules' messages (a child's stderr, a failure's evidence) and the
// protocol's command. Every report (JSON, JUnit, Markdown, the terminal)
// is written from the certificate, so this is where they are all masked.
func (c Certificate) masked(secrets *redact.Redactor) Certificate {
	c.Error = secrets.String(c.Error)
	c.Interrupted = secrets.String(c.Interrupted)
	if c.Protocol != nil {
		p := *c.Protocol
		p.Command, p.Implementation = secrets.String(p.Command), secrets.String(p.Implementation)
		c.Protocol = &p
	}
	c.Rules = slices.Clone(c.Rules)
	for i, r := range c.Rules {
		c.Rules[i].Message = secrets.String(r.Message)
	}
	return c
}

// interruption says why the run of report was interrupted (a signal), or
// "" when it was not.
func interruption(report ginkgo.Report) string {
	for _, reason := range report.SpecialSuiteFailureReasons {
		if strings.HasPrefix(reason, "Interrupted") {
			return reason
		}
	}
	for _, sr := range report.SpecReports {
		if sr.State == types.SpecStateInterrupted {
			return "Interrupted"
		}
	}
	return ""
}

// status decides a certificate's overall verdict: not-certified when the
// run could not start, else [StatusOf] its rules.
func status(setupErr string, rules []RuleResult) Status {
	if setupErr != "" {
		return StatusNotCertified
	}
	return StatusOf(rules)
}

// StatusOf decides the overall verdict of a run's rules: not-certified
// when there are none or any rule failed, else partial when a MUST rule did
// not pass (it was not-supported or skipped), else certified. Certificates
// use it; so can a tool that merges the rules of several filtered runs.
func StatusOf(rules []RuleResult) Status {
	if len(rules) == 0 {
		return StatusNotCertified
	}
	st := StatusCertified
	for _, r := range rules {
		switch {
		case r.Verdict == VerdictFail:
			return StatusNotCertified
		case r.Level == fixtures.Must && r.Verdict != VerdictPass:
			st = StatusPartial
		}
	}
	return st
}

// NotRun returns the MUST rules that did not run: not-supported or
// skipped. Their messages say why. A partial certificate lists them.
func (c Certificate) NotRun() []RuleResult {
	var out []RuleResult
	for _, r := range c.Rules {
		if r.Level == fixtures.Must && (r.Verdict == VerdictNotSupported || r.Verdict == VerdictSkipped) {
			out = append(out, r)
		}
	}
	return out
}

// Headline is the certificate's verdict in capitals: "CERTIFIED",
// "PARTIAL" or "NOT CERTIFIED".
func (c Certificate) Headline() string {
	switch c.Status {
	case StatusCertified:
		return "CERTIFIED"
	case StatusPartial:
		return "PARTIAL"
	case StatusInterrupted:
		return "INTERRUPTED"
	}
	return "NOT CERTIFIED"
}

// JUnit XML: a testsuites element holding one testsuite of one testcase
// per rule.
type (
	junitSuites struct {
		XMLName xml.Name `xml:"testsuites"`
		Name    string   `xml:"name,attr"`
		junitCounts
		Suites []junitSuite `xml:"testsuite"`
	}
	junitSuite struct {
		Name string `xml:"name,attr"`
		junitCounts
		Timestamp  string          `xml:"timestamp,attr,omitempty"`
		Properties []junitProperty `xml:"properties>property"`
		Cases      []junitCase     `xml:"testcase"`
		SystemErr  string          `xml:"system-err,omitempty"`
	}
	// junitCounts are the totals of a testsuite, and of testsuites.
	junitCounts struct {
		Tests    int     `xml:"tests,attr"`
		Failures int     `xml:"failures,attr"`
		Errors   int     `xml:"errors,attr"`
		Skipped  int     `xml:"skipped,attr"`
		Time     float64 `xml:"time,attr"`
	}
	junitProperty struct {
		Name  string `xml:"name,attr"`
		Value string `xml:"value,attr"`
	}
	junitCase struct {
		Name      string        `xml:"name,attr"`
		Classname string        `xml:"classname,attr"`
		Failure   *junitFailure `xml:"failure,omitempty"`
		Skipped   *junitSkipped `xml:"skipped,omitempty"`
	}
	junitFailure struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Text    string `xml:",chardata"`
	}
	junitSkipped struct {
		Message string `xml:"message,attr"`
	}
)

// WriteJUnit writes the certificate as JUnit XML to path: a testsuites
// element with the totals, holding one testsuite named "harmless: ADAPTER"
// whose properties identify the run (adapter, certified, harness version
// and commit, database, seed, protocol), and one testcase per rule, named
// "[LEVEL] RULE-ID: doc" with the fixture as its classname. A failed rule
// has a failure element whose text is the rule's message; a skipped or
// not-supported rule has a skipped element saying which and why. A run that
// could not start counts one error, its message in system-err.
func (c Certificate) WriteJUnit(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write JUnit report: %w", err)
	}
	if err := c.writeJUnit(f); err != nil {
		f.Close()
		return fmt.Errorf("write JUnit report %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write JUnit report: %w", err)
	}
	return nil
}

func (c Certificate) writeJUnit(w io.Writer) error {
	ts := junitSuite{Name: "harmless: " + c.Adapter, junitCounts: junitCounts{Tests: len(c.Rules), Time: c.Duration}}
	if !c.Started.IsZero() {
		ts.Timestamp = c.Started.UTC().Format("2006-01-02T15:04:05")
	}
	props := [][2]string{
		{"adapter", c.Adapter},
		{"status", string(c.Status)},
		{"certified", strconv.FormatBool(c.Certified)},
		{"harness.version", c.Harness.Version},
		{"harness.commit", c.Harness.Commit},
		{"database", c.Database},
		{"database_kind", c.DatabaseKind},
		{"seed", strconv.FormatUint(c.Seed, 10)},
	}
	if p := c.Protocol; p != nil {
		props = append(props, [2]string{"protocol", p.String()})
	}
	for _, p := range props {
		ts.Properties = append(ts.Properties, junitProperty{Name: p[0], Value: p[1]})
	}
	if c.Error != "" {
		ts.Errors = 1
		ts.SystemErr = c.Error
	}
	for _, r := range c.Rules {
		tc := junitCase{Name: fmt.Sprintf("[%s] %s: %s", r.Level, r.ID, r.Doc), Classname: r.Fixture}
		switch r.Verdict {
		case VerdictFail:
			ts.Failures++
			tc.Failure = &junitFailure{Message: r.ID + " failed", Type: string(r.Level), Text: r.Message}
		case VerdictSkipped, VerdictNotSupported:
			ts.Skipped++
			tc.Skipped = &junitSkipped{Message: string(r.Verdict) + ": " + r.Message}
		}
		ts.Cases = append(ts.Cases, tc)
	}
	all := junitSuites{Name: "harmless", junitCounts: ts.junitCounts, Suites: []junitSuite{ts}}
	data, err := xml.MarshalIndent(all, "", "  ")
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	_, err = io.WriteString(w, xml.Header+string(data)+"\n")
	return err
}

// String describes the protocol on one line, e.g. `harmless-exec v1:
// "./consumer --harmless", implementation "consumer 1.4.2", up to 8
// requests in flight per process`.
func (p Protocol) String() string {
	return fmt.Sprintf("%s v%d: %q, implementation %q, up to %d requests in flight per process", p.Name, p.Version, p.Command, p.Implementation, p.MaxInFlight)
}

// markdownVerdicts are the verdicts as the Markdown table shows them: a
// failure in bold, what did not run in italics.
var markdownVerdicts = map[Verdict]string{
	VerdictPass:         "PASS",
	VerdictFail:         "**FAIL**",
	VerdictNotSupported: "_NOT-SUPPORTED_",
	VerdictSkipped:      "_SKIPPED_",
}

// markdownEvidence says, in a Markdown summary, where the evidence left
// out of a message is.
const markdownEvidence = "all in the JSON certificate (harmless certify --json FILE)"

// WriteMarkdown writes the certificate as a Markdown summary for a pull
// request or a CI step summary (GitHub's $GITHUB_STEP_SUMMARY): a heading
// "harmless: CERTIFIED", "harmless: PARTIAL" or "harmless: NOT CERTIFIED"
// with the adapter, the summary counts, for a partial run the MUST rules
// that did not run and why, a table of the run (adapter, database, harness version
// and commit, protocol when there is one, seed, declared and verified
// capabilities, faults fired, start and duration), a table with one row per
// rule (rule id, fixture, level, verdict), and the message of every failed
// and not-supported rule in a collapsed <details> block, as a fenced code
// block. The messages are excerpts (see [RuleResult.Excerpt]), so that the
// summary stays readable and within what a CI step summary may hold
// (GitHub's takes 1 MiB); the JSON certificate has them whole. It writes no
// colour and no emoji.
func (c Certificate) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## harmless: %s: %s\n\n", c.Headline(), mdCode(c.Adapter))
	if c.Error != "" {
		fmt.Fprintf(&b, "The run could not start:\n\n%s\n", mdFence(c.Error))
	}
	fmt.Fprintf(&b, "**%s**\n\n", c.Summary())
	if notRun := c.NotRun(); c.Status == StatusPartial {
		fmt.Fprintf(&b, "No rule failed, but %d MUST rules did not run, so the run certifies nothing about them:\n\n", len(notRun))
		for _, r := range notRun {
			fmt.Fprintf(&b, "- %s (%s): %s\n", mdCode(r.ID), r.Verdict, mdCell(r.FirstLine()))
		}
		b.WriteString("\n")
	}

	b.WriteString("| run | |\n|---|---|\n")
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, mdCell(v)) }
	row("adapter", mdCode(c.Adapter))
	row("database", fmt.Sprintf("PostgreSQL %s (%s)", c.Database, c.DatabaseKind))
	row("harness", fmt.Sprintf("%s, commit %s", c.Harness.Version, mdCode(c.Harness.Commit)))
	if c.Protocol != nil {
		row("protocol", c.Protocol.String())
	}
	row("seed", fmt.Sprintf("%d (repeat with %s)", c.Seed, mdCode(fmt.Sprintf("--seed %d", c.Seed))))
	row("declared", c.Declared.String())
	row("verified", c.Verified.String())
	row("faults fired", faultList(c.Faults))
	if !c.Started.IsZero() {
		row("started", fmt.Sprintf("%s, took %.1fs", c.Started.UTC().Format(time.RFC3339), c.Duration))
	}

	b.WriteString("\n| rule | fixture | level | verdict |\n|---|---|---|---|\n")
	for _, r := range c.Rules {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", mdCell(mdCode(r.ID)), mdCell(r.Fixture), r.Level, markdownVerdicts[r.Verdict])
	}
	for _, section := range []struct {
		title   string
		verdict Verdict
	}{{"Failures", VerdictFail}, {"Not supported", VerdictNotSupported}} {
		if c.Count(section.verdict) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n### %s\n", section.title)
		for _, r := range c.Rules {
			if r.Verdict == section.verdict {
				fmt.Fprintf(&b, "\n<details><summary><code>%s</code> (%s, %s)</summary>\n\n%s\n</details>\n",
					html.EscapeString(r.ID), r.Level, r.Verdict, mdFence(r.Excerpt(ExcerptLines, markdownEvidence)))
			}
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write Markdown summary: %w", err)
	}
	return nil
}

// String describes the capabilities, e.g. "conflict policy reject,
// redelivery window 24h0m0s, accepts the harness's clock", or "none".
func (c Capabilities) String() string {
	var parts []string
	if c.ConflictPolicy != "" {
		parts = append(parts, "conflict policy "+string(c.ConflictPolicy))
	}
	if c.RedeliveryWindow > 0 {
		parts = append(parts, "redelivery window "+time.Duration(c.RedeliveryWindow*float64(time.Second)).String())
	}
	if c.AcceptsClock {
		parts = append(parts, "accepts the harness's clock")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// faultList lists fault counts by kind, e.g. "db:raise@effect 3,
// server:crash 1", or "none".
func faultList(counts map[string]int64) string {
	if len(counts) == 0 {
		return "none"
	}
	var parts []string
	for _, kind := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", mdCode(kind), counts[kind]))
	}
	return strings.Join(parts, ", ")
}

// mdCell makes s safe in a Markdown table cell: one line, pipes escaped.
func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\r\n", " ", "\n", " ").Replace(s)
}

// mdCode returns s as a Markdown code span, delimited by more backticks
// than s has in a row.
func mdCode(s string) string {
	ticks := strings.Repeat("`", longestRun(s, '`')+1)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return ticks + s + ticks
}

// mdFence returns s as a fenced code block, the fence longer than any run
// of backticks in s.
func mdFence(s string) string {
	fence := strings.Repeat("`", max(3, longestRun(s, '`')+1))
	return fence + "text\n" + strings.TrimRight(s, "\n") + "\n" + fence + "\n"
}

// longestRun is the length of the longest run of c in s.
func longestRun(s string, c byte) int {
	longest, run := 0, 0
	for i := range len(s) {
		if s[i] == c {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return longest
}
