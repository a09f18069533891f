package certificate_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

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
