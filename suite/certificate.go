package suite

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"

	"github.com/harmless-dev/harmless/fixtures"
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

// notSupportedPrefix starts the Skip message of a spec that does not apply.
const notSupportedPrefix = "not-supported: "

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
	// Certified is true when every MUST rule ran and passed, no rule failed
	// and nothing was skipped.
	Certified bool `json:"certified"`
	// SuiteVersion is the version of the suite that judged.
	SuiteVersion string `json:"suite_version"`
	// Database is the PostgreSQL server's version.
	Database string `json:"database"`
	// DatabaseKind says how the database was provided: dsn, container or
	// cluster.
	DatabaseKind string `json:"database_kind"`
	// Error is set when the run could not start (no database, a bad
	// adapter); no rule ran then.
	Error string `json:"error,omitempty"`
	// Rules holds one verdict per rule, in catalogue order.
	Rules []RuleResult `json:"rules"`
	// Started and Duration time the run.
	Started  time.Time `json:"started_at"`
	Duration float64   `json:"duration_s"`
}

// Count returns how many rules have verdict v.
func (c Certificate) Count(v Verdict) int {
	n := 0
	for _, r := range c.Rules {
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

func (s *state) report(report ginkgo.Report) {
	cert := s.certificate(report)
	for _, fn := range s.cfg.onCertificate {
		fn(cert)
	}
}

func (s *state) certificate(report ginkgo.Report) Certificate {
	cert := Certificate{
		Adapter:      s.adapter.Name,
		SuiteVersion: Version,
		Database:     s.database,
		DatabaseKind: s.kind,
		Started:      report.StartTime,
		Duration:     report.RunTime.Seconds(),
	}
	if s.setupErr != nil {
		cert.Error = s.setupErr.Error()
	}
	specs := map[string][]types.SpecReport{}
	for _, sr := range report.SpecReports {
		if sr.LeafNodeType != types.NodeTypeIt {
			continue
		}
		for _, l := range sr.Labels() {
			if id, ok := strings.CutPrefix(l, "rule:"); ok {
				specs[id] = append(specs[id], sr)
			}
		}
	}
	cert.Certified = cert.Error == ""
	for _, r := range fixtures.Rules() {
		res := RuleResult{ID: r.ID, Fixture: r.Fixture, Level: r.Level, Doc: r.Doc}
		res.Verdict, res.Message = verdict(specs[r.ID])
		if res.Verdict == VerdictFail || res.Verdict == VerdictSkipped || (r.Level == fixtures.Must && res.Verdict != VerdictPass && res.Verdict != VerdictNotSupported) {
			cert.Certified = false
		}
		cert.Rules = append(cert.Rules, res)
	}
	return cert
}

// verdict folds the results of a rule's specs into one verdict.
func verdict(specs []types.SpecReport) (Verdict, string) {
	if len(specs) == 0 {
		return VerdictSkipped, "no spec of this rule ran"
	}
	var failed, notSupported, notes []string
	passed, skipped := 0, 0
	for _, sr := range specs {
		where := strings.Join(slices.DeleteFunc(slices.Clone(sr.ContainerHierarchyTexts), func(t string) bool { return t == "harmless" }), " / ")
		switch {
		case sr.State == types.SpecStatePassed:
			passed++
			for _, e := range sr.ReportEntries {
				if e.Name == noteEntry {
					notes = append(notes, fmt.Sprintf("[%s] %s", where, e.Value.String()))
				}
			}
		case sr.State.Is(types.SpecStateFailureStates):
			failed = append(failed, fmt.Sprintf("[%s] %s", where, sr.Failure.Message))
		case sr.State == types.SpecStateSkipped && strings.HasPrefix(sr.Failure.Message, notSupportedPrefix):
			notSupported = append(notSupported, fmt.Sprintf("[%s] %s", where, strings.TrimPrefix(sr.Failure.Message, notSupportedPrefix)))
		default:
			skipped++
		}
	}
	switch {
	case len(failed) > 0:
		return VerdictFail, strings.Join(failed, "\n")
	case skipped > 0:
		return VerdictSkipped, fmt.Sprintf("%d of %d specs did not run", skipped, len(specs))
	case passed == 0 && len(notSupported) > 0:
		return VerdictNotSupported, strings.Join(notSupported, "\n")
	case len(notSupported) > 0:
		notes = append(notes, "partly not supported: "+strings.Join(notSupported, "\n"))
	}
	return VerdictPass, strings.Join(notes, "\n")
}

// WriteJUnit writes the certificate as JUnit XML to path: one testsuite, one
// testcase per rule named by its id, with a failure or skipped element where
// the rule did not pass.
func (c Certificate) WriteJUnit(path string) error {
	type failure struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Text    string `xml:",chardata"`
	}
	type skipped struct {
		Message string `xml:"message,attr"`
	}
	type testcase struct {
		Name      string   `xml:"name,attr"`
		Classname string   `xml:"classname,attr"`
		Failure   *failure `xml:"failure,omitempty"`
		Skipped   *skipped `xml:"skipped,omitempty"`
	}
	type testsuite struct {
		XMLName  xml.Name   `xml:"testsuite"`
		Name     string     `xml:"name,attr"`
		Tests    int        `xml:"tests,attr"`
		Failures int        `xml:"failures,attr"`
		Errors   int        `xml:"errors,attr"`
		Skipped  int        `xml:"skipped,attr"`
		Time     float64    `xml:"time,attr"`
		Cases    []testcase `xml:"testcase"`
	}
	ts := testsuite{Name: "harmless: " + c.Adapter, Tests: len(c.Rules), Time: c.Duration}
	if c.Error != "" {
		ts.Errors = 1
	}
	for _, r := range c.Rules {
		tc := testcase{Name: fmt.Sprintf("[%s] %s: %s", r.Level, r.ID, r.Doc), Classname: r.Fixture}
		switch r.Verdict {
		case VerdictFail:
			ts.Failures++
			tc.Failure = &failure{Message: r.ID + " failed", Type: string(r.Level), Text: r.Message}
		case VerdictSkipped, VerdictNotSupported:
			ts.Skipped++
			tc.Skipped = &skipped{Message: string(r.Verdict) + ": " + r.Message}
		}
		ts.Cases = append(ts.Cases, tc)
	}
	data, err := xml.MarshalIndent(ts, "", "  ")
	if err != nil {
		return fmt.Errorf("encode JUnit report: %w", err)
	}
	if err := os.WriteFile(path, append([]byte(xml.Header), append(data, '\n')...), 0o644); err != nil {
		return fmt.Errorf("write JUnit report: %w", err)
	}
	return nil
}
