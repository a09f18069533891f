package suite_test

import (
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/applicability"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/internal/suite"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// TestReference certifies the reference implementation: the suite must pass
// a correct implementation, and every rule of every fixture must have run.
// The rules of fixtures that crash the server run only on a throwaway
// cluster; elsewhere they are not-supported. The certificate states what
// was declared and verified, the faults that fired and the seed; each
// fixture's progress is reported once.
func TestReference(t *testing.T) {
	var cert *certificate.Certificate
	var progress []suite.FixtureProgress
	suite.RunWith(t, []suite.Option{
		suite.WithCertificate(func(c certificate.Certificate) { cert = &c }),
		suite.WithFixtureProgress(func(p suite.FixtureProgress) { progress = append(progress, p) }),
	}, reference.Adapter())
	if cert == nil {
		t.Fatal("no certificate")
	}
	checkProgress(t, progress, *cert)
	if cert.Seed == 0 {
		t.Errorf("seed 0; want the run's random seed recorded")
	}
	if cert.SuiteVersion != suite.Version || cert.Harness.Commit == "" || cert.Protocol != nil {
		t.Errorf("suite %q, harness %+v, protocol %+v; want version %s, a commit and no protocol", cert.SuiteVersion, cert.Harness, cert.Protocol, suite.Version)
	}
	if cert.Verified != cert.Declared || cert.Declared.ConflictPolicy == "" || cert.Declared.RedeliveryWindow == 0 || !cert.Declared.AcceptsClock {
		t.Errorf("declared %+v, verified %+v; want the reference's whole declaration, all verified", cert.Declared, cert.Verified)
	}
	t.Logf("faults fired: %v", cert.Faults)
	// Every way of injecting a fault fired; the overlapping rounds of
	// concurrent-delivery alone fire a gate each, and crash-recovery, which
	// runs only on a server the run owns, holds its deliveries in flight
	// with a sleep.
	least := map[string]int64{
		"db:raise@effect": 1, "db:raise@commit": 1, "db:terminate@effect": 1, "db:gate@effect": suite.DefaultOverlapRounds,
		"hook:panic": 1, "hook:cancel": 1,
		"proxy:cut@after-statement": 1, "proxy:cut@before-commit": 2, "proxy:cut@after-commit-complete": 1,
	}
	if cert.DatabaseKind != string(provision.KindDSN) {
		least["db:sleep@effect"] = 1
	}
	for kind, least := range least {
		if cert.Faults[kind] < least {
			t.Errorf("faults of kind %s fired %d times; want at least %d (all: %v)", kind, cert.Faults[kind], least, cert.Faults)
		}
	}
	if crashes := cert.Faults["server:crash"]; (cert.DatabaseKind != string(provision.KindDSN)) != (crashes > 0) {
		t.Errorf("%d server crashes on a %s server", crashes, cert.DatabaseKind)
	}
	// What the catalogue decides for the reference on this server is what
	// the run must have done.
	owned := cert.DatabaseKind != string(provision.KindDSN)
	notRun := notRunHere(reference.Adapter(), owned)
	// On a server the run owns every rule that applies runs (failover does
	// not apply to one server); on one named by a DSN the rules that crash
	// or fail over the server cannot, and the run is partial.
	wantStatus := certificate.StatusCertified
	for _, a := range notRun {
		if !a.NotApplicable {
			wantStatus = certificate.StatusPartial
		}
	}
	if owned == (wantStatus == certificate.StatusPartial) {
		t.Errorf("on a %s server the catalogue says these fixtures do not run: %v", cert.DatabaseKind, notRun)
	}
	if cert.Status != wantStatus || cert.Certified != (wantStatus == certificate.StatusCertified) {
		t.Errorf("reference on a %s server: status %s, certified %t; want %s\n%s", cert.DatabaseKind, cert.Status, cert.Certified, wantStatus, cert.Table())
	}
	for _, r := range cert.Rules {
		want, why := certificate.VerdictPass, ""
		if a, ok := notRun[r.Fixture]; ok {
			want, why = certificate.VerdictNotSupported, a.Reason
			if a.NotApplicable {
				want = certificate.VerdictNotApplicable
			}
		}
		if r.Verdict != want || !strings.Contains(r.Message, why) {
			t.Errorf("rule %s: verdict %s on a %s server; want %s, saying %q\n%s", r.ID, r.Verdict, cert.DatabaseKind, want, why, r.Message)
		}
	}
}

// notRunHere returns the catalogue's decision for adapter, in this process,
// on one server the run owns or not, for each fixture that does not run.
func notRunHere(adapter adapters.Adapter, owned bool) map[string]applicability.Decision {
	target := applicability.Target{
		RedeliveryWindow: adapter.Declares.RedeliveryWindow,
		AcceptsClock:     adapter.Declares.AcceptsClock,
		OwnedServer:      owned,
		ExternalEffects:  string(adapter.Declares.ExternalEffects),
	}
	notRun := map[string]applicability.Decision{}
	for _, f := range fixtures.Catalog() {
		if a := applicability.Of(f, target); !a.Runs {
			notRun[f.ID] = a
		}
	}
	return notRun
}

// checkProgress checks the fixture progress of a run of every fixture: one
// report per fixture, whose verdicts are the certificate's.
func checkProgress(t *testing.T, progress []suite.FixtureProgress, cert certificate.Certificate) {
	t.Helper()
	verdicts := map[string]certificate.Verdict{}
	for _, r := range cert.Rules {
		verdicts[r.ID] = r.Verdict
	}
	catalog := map[string]fixtures.Fixture{}
	for _, f := range fixtures.Catalog() {
		catalog[f.ID] = f
	}
	seen := map[string]bool{}
	for _, p := range progress {
		if seen[p.Fixture] {
			t.Errorf("fixture %s reported twice", p.Fixture)
		}
		seen[p.Fixture] = true
		f, ok := catalog[p.Fixture]
		if !ok {
			t.Errorf("progress of an unknown fixture %q", p.Fixture)
			continue
		}
		if len(p.Rules) != len(f.Rules) || p.Duration <= 0 || p.Started.IsZero() {
			t.Errorf("fixture %s: %d rules, duration %s, started %s; want %d rules and a time", p.Fixture, len(p.Rules), p.Duration, p.Started, len(f.Rules))
		}
		for _, r := range p.Rules {
			if r.Verdict != verdicts[r.ID] {
				t.Errorf("fixture %s: rule %s is %s in the progress and %s in the certificate", p.Fixture, r.ID, r.Verdict, verdicts[r.ID])
			}
		}
	}
	if len(seen) != len(fixtures.Catalog()) {
		t.Errorf("progress of %d fixtures; want all %d", len(seen), len(fixtures.Catalog()))
	}
}
