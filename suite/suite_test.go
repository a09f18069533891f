package suite_test

import (
	"testing"

	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/suite"
)

// TestReference certifies the reference implementation: the suite must pass
// a correct implementation, and every rule of every fixture must have run.
// The rules of fixtures that crash the server run only on a throwaway
// cluster; elsewhere they are not-supported.
func TestReference(t *testing.T) {
	var cert *suite.Certificate
	suite.Run(t, reference.Adapter(), suite.WithCertificate(func(c suite.Certificate) { cert = &c }))
	if cert == nil {
		t.Fatal("no certificate")
	}
	if !cert.Certified {
		t.Errorf("reference not certified: %s\n%s", cert.Summary(), cert.Table())
	}
	needsOwned := map[string]bool{}
	for _, f := range fixtures.Catalog() {
		needsOwned[f.ID] = f.NeedsOwnedServer
	}
	for _, r := range cert.Rules {
		want := suite.VerdictPass
		if needsOwned[r.Fixture] && cert.DatabaseKind != string(provision.KindCluster) {
			want = suite.VerdictNotSupported
		}
		if r.Verdict != want {
			t.Errorf("rule %s: verdict %s on a %s server; want %s\n%s", r.ID, r.Verdict, cert.DatabaseKind, want, r.Message)
		}
	}
}
