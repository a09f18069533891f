package exec

import (
	"context"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/execchild"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/suite"
	"github.com/harmless-dev/harmless/suite/certificate"
	"strings"
	"testing"
)

// TestReferenceOverTheProtocolIsCertified certifies the reference Store run
// as an external process: every fixture, with its faults, across the process
// boundary. Only the Go-hook variants of failure-after-marker cannot apply.
func TestReferenceOverTheProtocolIsCertified(t *testing.T) {
	adapter, _, err := Probe(context.Background(), Config{Command: execchild.Command(execchild.Reference)})
	if err != nil {
		t.Fatal(err)
	}
	var cert certificate.Certificate
	suite.RunWith(t, []suite.Option{suite.WithDSN(pgtest.DSN(t)), suite.WithCertificate(func(c certificate.Certificate) { cert = c })}, adapter)
	// On a server named by a DSN the crash-recovery and failover rules
	// cannot run (harmless crashes and fails over only what it started):
	// the run is then partial, and those are the only rules that did not
	// run.
	for _, r := range cert.NotRun() {
		if (r.Fixture != catalogid.CrashRecovery && r.Fixture != catalogid.Failover) || cert.DatabaseKind != "dsn" {
			t.Errorf("rule %s did not run on a %s server: %s", r.ID, cert.DatabaseKind, r.Message)
		}
	}
	if cert.Status == certificate.StatusNotCertified {
		t.Fatalf("not certified:\n%s", cert.Table())
	}
	for _, r := range cert.Rules {
		hooked := r.ID == catalogid.FailureAfterMarkerNotAcknowledged || r.ID == catalogid.FailureAfterMarkerRetryApplies
		if hooked && !strings.Contains(r.Message, "partly not supported") {
			t.Errorf("%s passed without noting that its Go-hook variants do not apply: %q", r.ID, r.Message)
		}
	}
}
