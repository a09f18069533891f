package certificate

import (
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"strconv"
)

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
		Name       string          `xml:"name,attr"`
		Classname  string          `xml:"classname,attr"`
		Properties []junitProperty `xml:"properties>property"`
		Failure    *junitFailure   `xml:"failure,omitempty"`
		Skipped    *junitSkipped   `xml:"skipped,omitempty"`
		SystemOut  string          `xml:"system-out,omitempty"`
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
// whose properties identify the run (adapter, status, certified, suite
// version, harness commit, database, seed, protocol), and one testcase per
// rule, named with the rule's id alone, so that a CI's test history keys
// on the rule whatever its sentence says, with the fixture as its
// classname; the testcase's properties give its level, verdict and doc
// sentence, and its system-out the sentence again, "[LEVEL] doc", for the
// CIs that show no testcase properties. A
// failed rule has a failure element whose text is the rule's message; a
// skipped, not-supported or not-applicable rule has a skipped element
// saying which and why. A run that could not start counts one error, its message in
// system-err.
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
	// The properties are named as the JSON certificate's fields.
	props := [][2]string{
		{"adapter", c.Adapter},
		{"status", string(c.Status)},
		{"certified", strconv.FormatBool(c.Certified)},
		{"suite_version", c.SuiteVersion},
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
		tc := junitCase{Name: r.ID, Classname: r.Fixture, SystemOut: fmt.Sprintf("[%s] %s", r.Level, r.Doc), Properties: []junitProperty{
			{Name: "level", Value: string(r.Level)},
			{Name: "verdict", Value: string(r.Verdict)},
			{Name: "doc", Value: r.Doc},
		}}
		switch r.Verdict {
		case VerdictFail:
			ts.Failures++
			tc.Failure = &junitFailure{Message: r.ID + " failed", Type: string(r.Level), Text: r.Message}
		case VerdictSkipped, VerdictNotSupported, VerdictNotApplicable:
			// A not-applicable rule is a skipped test case too: JUnit has
			// no verdict for "nothing to test", and a passed case would
			// claim a check that never ran. Its message says
			// "not-applicable: external effects: none declared", and the
			// suite's status property stays certified.
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
