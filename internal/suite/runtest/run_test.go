package runtest_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/databasesql"
	"github.com/harmless-dev/harmless/internal/adapters/broken/checktheninsert"
	"github.com/harmless-dev/harmless/internal/applicability"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/suite"
	"github.com/harmless-dev/harmless/suite/certificate"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestRunCertifiesTwoAdapters: one call of suite.RunWith certifies two
// adapters, every rule of each, and each gets a certificate of its own
// from a run of its own.
func TestRunCertifiesTwoAdapters(t *testing.T) {
	certs := map[string]certificate.Certificate{}
	suite.RunWith(t, []suite.Option{
		suite.WithDSN(pgtest.DSN(t)),
		suite.WithCertificate(func(c certificate.Certificate) { certs[c.Adapter] = c }),
	}, reference.Adapter(), databasesql.Adapter())
	if len(certs) != 2 {
		t.Fatalf("%d certificates; want one for each of the two adapters", len(certs))
	}
	for _, name := range []string{reference.Name, databasesql.Name} {
		c, ok := certs[name]
		if !ok {
			t.Errorf("no certificate for %s", name)
			continue
		}
		checkCorrect(t, c)
	}
	if certs[reference.Name].Declared == certs[databasesql.Name].Declared && certs[reference.Name].Started.Equal(certs[databasesql.Name].Started) {
		t.Errorf("the two certificates describe the same run")
	}
}

// checkCorrect checks the certificate of a correct adapter's whole run on
// a server named by a DSN: every rule passed, but those that crash the
// server, which could not run there.
func checkCorrect(t *testing.T, c certificate.Certificate) {
	t.Helper()
	// What the catalogue decides for an in-process adapter on a DSN.
	notRun, notApplicable := map[string]string{}, map[string]bool{}
	for _, f := range fixtures.Catalog() {
		target := applicability.Target{RedeliveryWindow: c.Declared.RedeliveryWindow, AcceptsClock: c.Declared.AcceptsClock, ExternalEffects: string(c.Declared.ExternalEffects)}
		if a := applicability.Of(f, target); !a.Runs {
			notRun[f.ID], notApplicable[f.ID] = a.Reason, a.NotApplicable
		}
	}
	if c.Error != "" || c.Database == "" || c.DatabaseKind != "dsn" {
		t.Errorf("%s: error %q, database %q (%s); want a run on the DSN's server", c.Adapter, c.Error, c.Database, c.DatabaseKind)
	}
	for _, r := range c.Rules {
		want, why := certificate.VerdictPass, notRun[r.Fixture]
		switch {
		case notApplicable[r.Fixture]:
			want = certificate.VerdictNotApplicable
		case why != "":
			want = certificate.VerdictNotSupported
		}
		if r.Verdict != want || !strings.Contains(r.Message, why) {
			t.Errorf("%s, rule %s: %s (%s); want %s, saying %q", c.Adapter, r.ID, r.Verdict, r.Message, want, why)
		}
	}
	if c.Status != certificate.StatusPartial {
		t.Errorf("%s: status %s; want partial, the crash-recovery rules could not run", c.Adapter, c.Status)
	}
}

// only is an option that runs only fixture's rules.
func only(fixture string) suite.Option {
	return suite.WithFixtures(fixture)
}

// TestCertifyTwice: suite.Certify certifies without a *testing.T, and two
// calls may run at once in one process (and after suite.Run): each has
// its own run, options and verdicts, and the verdicts are right.
func TestCertifyTwice(t *testing.T) {
	ctx := t.Context()
	dsn := suite.WithDSN(pgtest.DSN(t))
	var ref, broken certificate.Certificate
	var refErr, brokenErr error
	var wg sync.WaitGroup
	wg.Go(func() { ref, refErr = suite.Certify(ctx, reference.Adapter(), dsn, only(catalogid.DoubleDelivery)) })
	wg.Go(func() {
		broken, brokenErr = suite.Certify(ctx, checktheninsert.Adapter(), dsn, only(catalogid.ConflictingPayload))
	})
	wg.Wait()
	if refErr != nil || brokenErr != nil {
		t.Fatalf("certifications: %v; %v", refErr, brokenErr)
	}
	for _, c := range []struct {
		cert    certificate.Certificate
		fixture string
		status  certificate.Status
	}{{ref, catalogid.DoubleDelivery, certificate.StatusPartial}, {broken, catalogid.ConflictingPayload, certificate.StatusNotCertified}} {
		t.Logf("%s: %s, %s", c.cert.Adapter, c.cert.Status, c.cert.Summary())
		if c.cert.Status != c.status {
			t.Errorf("%s: status %s; want %s", c.cert.Adapter, c.cert.Status, c.status)
		}
		failedMust := 0
		for _, r := range c.cert.Rules {
			switch {
			case r.Fixture != c.fixture && r.Verdict != certificate.VerdictSkipped:
				t.Errorf("%s, rule %s: %s; want skipped, the filter left it out", c.cert.Adapter, r.ID, r.Verdict)
			case r.Fixture == c.fixture && c.status == certificate.StatusPartial && r.Verdict != certificate.VerdictPass:
				t.Errorf("%s, rule %s: %s (%s); want pass", c.cert.Adapter, r.ID, r.Verdict, r.Message)
			case r.Fixture == c.fixture && r.Verdict == certificate.VerdictFail && r.Level == fixtures.Must:
				failedMust++
			}
		}
		if c.status == certificate.StatusNotCertified && failedMust == 0 {
			t.Errorf("%s: no MUST rule of %s failed; the verdict matrix says it must", c.cert.Adapter, c.fixture)
		}
	}
}

// TestCertifyCancelled: a run whose context is done before it starts
// starts nothing, and says it was interrupted.
func TestCertifyCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	cert, err := suite.Certify(ctx, reference.Adapter(), suite.WithDSN(pgtest.DSN(t)), only(catalogid.DoubleDelivery))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v; want one wrapping context.Canceled", err)
	}
	if cert.Status != certificate.StatusInterrupted || cert.Database != "" || cert.Count(certificate.VerdictSkipped) != len(cert.Rules) {
		t.Errorf("status %s, database %q, %s; want interrupted before the run started, every rule skipped", cert.Status, cert.Database, cert.Summary())
	}
}

// TestCertifySetupError: a run that cannot start says why, in the error
// (which wraps suite.ErrSetup) and in the certificate, whose rules all did
// not run.
func TestCertifySetupError(t *testing.T) {
	cert, err := suite.Certify(t.Context(), reference.Adapter(),
		suite.WithDSN("postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=5"), only(catalogid.DoubleDelivery))
	if !errors.Is(err, suite.ErrSetup) {
		t.Errorf("error %v; want one wrapping suite.ErrSetup", err)
	}
	if cert.Error == "" || cert.Status != certificate.StatusNotCertified || cert.Count(certificate.VerdictSkipped) != len(cert.Rules) {
		t.Errorf("error %q, status %s, %s; want the setup's error, not-certified, every rule skipped", cert.Error, cert.Status, cert.Summary())
	}
}
