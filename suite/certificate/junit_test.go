package certificate

import (
	"bytes"
	"encoding/xml"
	"testing"
)

// TestJUnitProperties: the testsuite's properties identify the run, named
// as the JSON certificate's fields, and the counts add up.
func TestJUnitProperties(t *testing.T) {
	c := sampleCertificate()
	var b bytes.Buffer
	if err := c.writeJUnit(&b); err != nil {
		t.Fatal(err)
	}
	var got junitSuites
	if err := xml.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("the JUnit report does not parse: %v\n%s", err, b.String())
	}
	if len(got.Suites) != 1 {
		t.Fatalf("%d testsuites; want 1", len(got.Suites))
	}
	ts := got.Suites[0]
	props := map[string]string{}
	for _, p := range ts.Properties {
		props[p.Name] = p.Value
	}
	want := map[string]string{
		"adapter": "sample", "status": "", "certified": "false", "suite_version": "0.1.0", "harness.commit": "0123abcd-dirty",
		"database": c.Database, "database_kind": "dsn", "seed": "42",
	}
	if len(props) != len(want) {
		t.Errorf("properties %v; want %v", props, want)
	}
	for k, v := range want {
		if props[k] != v {
			t.Errorf("property %s = %q; want %q", k, props[k], v)
		}
	}
	if ts.Tests != len(c.Rules) || ts.Failures != 1 || ts.Skipped != 2 || ts.Errors != 0 || got.junitCounts != ts.junitCounts {
		t.Errorf("counts %+v (testsuites %+v); want %d tests, 1 failure, 2 skipped", ts.junitCounts, got.junitCounts, len(c.Rules))
	}
}

// TestJUnitCasesAreNamedByRuleID: each testcase's name is its rule's id,
// as the README says, and the rule's sentence is in its properties and
// its system-out, not in its name.
func TestJUnitCasesAreNamedByRuleID(t *testing.T) {
	c := sampleCertificate()
	var b bytes.Buffer
	if err := c.writeJUnit(&b); err != nil {
		t.Fatal(err)
	}
	var got junitSuites
	if err := xml.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("the JUnit report does not parse: %v\n%s", err, b.String())
	}
	cases := got.Suites[0].Cases
	if len(cases) != len(c.Rules) {
		t.Fatalf("%d testcases for %d rules", len(cases), len(c.Rules))
	}
	for i, r := range c.Rules {
		tc := cases[i]
		props := map[string]string{}
		for _, p := range tc.Properties {
			props[p.Name] = p.Value
		}
		if tc.Name != r.ID || tc.Classname != r.Fixture {
			t.Errorf("testcase %d: name %q, classname %q; want %q of %q", i, tc.Name, tc.Classname, r.ID, r.Fixture)
		}
		if props["doc"] != r.Doc || props["level"] != string(r.Level) || props["verdict"] != string(r.Verdict) || tc.SystemOut != "["+string(r.Level)+"] "+r.Doc {
			t.Errorf("testcase %s: properties %v, system-out %q; want the level, verdict and doc %q", r.ID, props, tc.SystemOut, r.Doc)
		}
	}
}

// TestJUnitNotApplicable: a not-applicable rule is a skipped test case
// whose message says so and why; the suite stays certified.
func TestJUnitNotApplicable(t *testing.T) {
	c := Certificate{Adapter: "a", Status: StatusCertified, Certified: true, Rules: []RuleResult{
		{ID: "external-effect.no-loss", Fixture: "external-effect", Level: "MUST", Verdict: VerdictNotApplicable, Message: "external effects: none declared"},
	}}
	var b bytes.Buffer
	if err := c.writeJUnit(&b); err != nil {
		t.Fatal(err)
	}
	var got junitSuites
	if err := xml.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	ts := got.Suites[0]
	if ts.Skipped != 1 || ts.Cases[0].Skipped == nil || ts.Cases[0].Skipped.Message != "not-applicable: external effects: none declared" {
		t.Errorf("JUnit of a not-applicable rule:\n%s", b.String())
	}
	if c.Summary() != "0 passed, 0 failed, 1 not-applicable" {
		t.Errorf("Summary() = %q", c.Summary())
	}
}
