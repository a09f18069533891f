package certificate_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// A CI step that reads the certificate `harmless certify --json` wrote,
// says what it certifies, lists the MUST rules that did not run, and
// writes the JUnit report a CI shows per rule.
func ExampleCertificate() {
	data := []byte(`{
	  "adapter": "my-consumer", "status": "partial", "certified": false,
	  "rules": [
	    {"id": "double-delivery.one-effect", "fixture": "double-delivery", "level": "MUST", "verdict": "pass"},
	    {"id": "crash-recovery.applied-survives", "fixture": "crash-recovery", "level": "MUST", "verdict": "not-supported",
	     "message": "crash-recovery needs a server the harness owns"}
	  ]}`)
	var cert certificate.Certificate
	if err := json.Unmarshal(data, &cert); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cert.Headline(), cert.Adapter)
	fmt.Println("partial:", cert.Status == certificate.StatusPartial, "passed:", cert.Count(certificate.VerdictPass))
	for _, r := range cert.NotRun() {
		fmt.Printf("not run: %s (%s): %s\n", r.ID, r.Verdict, r.Message)
	}
	// The status follows from the rules alone, so a tool that merges the
	// rules of several filtered runs can decide it again.
	fmt.Println("status of the rules:", certificate.StatusOf(cert.Rules))

	dir, err := os.MkdirTemp("", "harmless-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	if err := cert.WriteJUnit(filepath.Join(dir, "junit.xml")); err != nil {
		fmt.Println(err)
	}
	// Output:
	// PARTIAL my-consumer
	// partial: true passed: 1
	// not run: crash-recovery.applied-survives (not-supported): crash-recovery needs a server the harness owns
	// status of the rules: partial
}

// A CI gate over a saved certificate decides by its status. Which statuses
// let a change through is the team's policy; this one lets a partial run
// through with a warning, since its MUST rules that did not run say why.
func ExampleStatus() {
	for _, st := range []certificate.Status{certificate.StatusCertified, certificate.StatusPartial, certificate.StatusNotCertified, certificate.StatusInterrupted} {
		cert := certificate.Certificate{Status: st}
		switch cert.Status {
		case certificate.StatusCertified:
			fmt.Println(cert.Headline(), "-> pass")
		case certificate.StatusPartial:
			fmt.Println(cert.Headline(), "-> pass, warning: some MUST rules did not run")
		case certificate.StatusInterrupted:
			fmt.Println(cert.Headline(), "-> retry: the run was stopped before its end")
		default: // certificate.StatusNotCertified
			fmt.Println(cert.Headline(), "-> fail")
		}
	}
	// Output:
	// CERTIFIED -> pass
	// PARTIAL -> pass, warning: some MUST rules did not run
	// NOT CERTIFIED -> fail
	// INTERRUPTED -> retry: the run was stopped before its end
}

// A report of a saved certificate for a terminal: the verdicts, how often
// the implementation's processes crashed (the harness restarted them as a
// supervisor would), and an excerpt of each failed rule, with the JSON
// certificate named for the whole evidence.
func ExampleRuleResult_Excerpt() {
	cert := certificate.Certificate{
		Rules: []certificate.RuleResult{
			{ID: "double-delivery.one-effect", Fixture: "double-delivery", Level: "MUST", Verdict: certificate.VerdictFail,
				Message: "double-delivery.one-effect: the same event delivered twice has exactly one effect\n- event e1: 2 effects"},
			{ID: "double-delivery.first-applied", Fixture: "double-delivery", Level: "MUST", Verdict: certificate.VerdictPass},
		},
		Crashes: []certificate.Crash{{Play: "crash-recovery / killed at the effect", Instance: 1, Count: 2}},
	}
	fmt.Print(cert.Table())
	fmt.Println("crashes:", cert.CrashCount())
	for _, r := range cert.Rules {
		if r.Verdict == certificate.VerdictFail {
			fmt.Println(r.Excerpt(certificate.ExcerptLines, "all in cert.json"))
		}
	}
	// Output:
	// RULE                           FIXTURE          LEVEL  VERDICT
	// double-delivery.one-effect     double-delivery  MUST   FAIL
	// double-delivery.first-applied  double-delivery  MUST   PASS
	// crashes: 2
	// double-delivery.one-effect: the same event delivered twice has exactly one effect
	// - event e1: 2 effects
}

// A certificate saved as JSON, rendered again as the Markdown that
// `harmless certify --markdown` writes, e.g. for a pull request's comment.
func ExampleCertificate_WriteMarkdown() {
	data, err := os.ReadFile("harmless.json") // written by harmless certify --json harmless.json
	if err != nil {
		fmt.Println(err)
		return
	}
	var cert certificate.Certificate
	if err := json.Unmarshal(data, &cert); err != nil {
		fmt.Println(err)
		return
	}
	if err := cert.WriteMarkdown(os.Stdout); err != nil {
		fmt.Println(err)
	}
}

// A tool that runs the suite in several filtered runs (harmless certify
// --fixture, one CI job each) merges their rules and decides again what
// they certify together and which declared capabilities they prove.
func ExampleVerify() {
	declared := adapters.Declaration{ConflictPolicy: adapters.RejectConflicts, RedeliveryWindow: 24 * time.Hour}
	jobA := []certificate.RuleResult{
		{ID: "conflicting-payload.detected", Fixture: "conflicting-payload", Level: "MUST", Verdict: certificate.VerdictPass},
	}
	jobB := []certificate.RuleResult{
		{ID: "retention-expiry.kept-inside-window", Fixture: "retention-expiry", Level: "MUST", Verdict: certificate.VerdictFail},
	}
	rules := append(slices.Clone(jobA), jobB...)
	verified := certificate.Verify(declared, rules)
	fmt.Println("status:", certificate.StatusOf(rules))
	fmt.Printf("conflict policy proved: %q\n", verified.ConflictPolicy)
	fmt.Println("redelivery window proved:", verified.RedeliveryWindow)
	// Output:
	// status: not-certified
	// conflict policy proved: "reject"
	// redelivery window proved: 0s
}

// A report is information a fixture gives beside its verdicts, never a
// verdict: the failover fixture's asynchronous variant reports what a
// failover lost with asynchronous replication, from a certificate of
// `harmless certify --provision ha`. A team that replicates
// asynchronously on purpose weighs it; one whose implementation is
// certified and whose database replicates synchronously can expect no
// loss.
func ExampleReport() {
	data := []byte(`{
	  "adapter": "my-consumer", "status": "certified", "certified": true, "database_kind": "ha",
	  "reports": [{
	    "fixture": "failover", "title": "async-replication",
	    "note": "asynchronous replication: ...",
	    "facts": {"lag_bytes": 2408, "acknowledged": 16, "acknowledged_lost": 8,
	      "lost": ["harmless.failover/lagging-1"], "applied_again": 8}
	  }]}`)
	var cert certificate.Certificate
	if err := json.Unmarshal(data, &cert); err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range cert.Reports {
		if r.Title == "async-replication" {
			fmt.Printf("from %s: a failover lost %v of %v acknowledged events (standby %v bytes behind); %v applied again when redelivered\n",
				r.Fixture, r.Facts["acknowledged_lost"], r.Facts["acknowledged"], r.Facts["lag_bytes"], r.Facts["applied_again"])
		}
	}
	// Output:
	// from failover: a failover lost 8 of 16 acknowledged events (standby 2408 bytes behind); 8 applied again when redelivered
}
