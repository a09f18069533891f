package suite_test

import (
	"testing"

	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/suite"
)

// TestReference certifies the reference implementation: the suite must pass
// a correct implementation, and every rule of every fixture must have run.
func TestReference(t *testing.T) {
	var cert *suite.Certificate
	suite.Run(t, reference.Adapter(), suite.WithCertificate(func(c suite.Certificate) { cert = &c }))
	if cert == nil {
		t.Fatal("no certificate")
	}
	if !cert.Certified {
		t.Errorf("reference not certified: %s\n%s", cert.Summary(), cert.Table())
	}
	if got, want := cert.Count(suite.VerdictPass), len(fixtures.Rules()); got != want {
		t.Errorf("%d rules passed; want all %d", got, want)
	}
}
