package suite

import (
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// externalChildEnv names, in a child process of TestExternalEffect, the
// built-in adapter to certify on the external-effect fixture.
const externalChildEnv = "HARMLESS_TEST_EXTERNAL"

// TestExternalEffectChild runs the suite on one built-in adapter. It runs
// only in a child process started by TestExternalEffect.
func TestExternalEffectChild(t *testing.T) {
	runChildSuite(t, externalChildEnv, "TestExternalEffect", func(name string) (adapters.Adapter, []Option, bool) {
		a, err := builtin.Lookup(name)
		return a, nil, err == nil
	})
}

// TestExternalEffect: the reference, with its outbox, passes every rule
// of external-effect; an adapter that declares no external effects gets
// not-applicable, saying "external effects: none declared", which leaves
// its status certified. Only the fixture runs: -run leaves the other
// rules out, and the children pass.
func TestExternalEffect(t *testing.T) {
	dsn := pgtest.DSN(t)
	filter := runFixtures("TestExternalEffectChild", catalogid.ExternalEffect)
	ours := func(cert certificate.Certificate) []certificate.RuleResult {
		var rules []certificate.RuleResult
		for _, r := range cert.Rules {
			if r.Fixture == catalogid.ExternalEffect {
				rules = append(rules, r)
			}
		}
		return rules
	}
	t.Run("the reference passes", func(t *testing.T) {
		cert, output, took := runTestChild(t, "TestExternalEffectChild", []string{filter}, []string{"HARMLESS_DSN=" + dsn, externalChildEnv + "=reference"}, 0)
		rules := ours(cert)
		if len(rules) != 4 {
			t.Fatalf("%d external-effect rules in the certificate; want 4\n%s", len(rules), tail(output, 40))
		}
		for _, r := range rules {
			if r.Verdict != certificate.VerdictPass {
				t.Errorf("%s: %s\n%s", r.ID, r.Verdict, r.Message)
			}
		}
		for _, kind := range []string{"dest:status-500", "dest:status-503", "dest:drop-after-process", "dest:down", "dest:slow", "dest:hold", "db:raise@commit"} {
			if cert.Faults[kind] == 0 {
				t.Errorf("fault %s never fired: faults %v", kind, cert.Faults)
			}
		}
		t.Logf("the fixture took %s in the child", took)
	})
	t.Run("no external effects declared is not-applicable", func(t *testing.T) {
		const alt = "alt-serializable"
		a, err := builtin.Lookup(alt)
		if err != nil || a.Declares.ExternalEffects != adapters.NoExternalEffects {
			t.Fatalf("%s: %v, declares %q; want a built-in without external effects", alt, err, a.Declares.ExternalEffects)
		}
		cert, output, _ := runTestChild(t, "TestExternalEffectChild", []string{filter}, []string{"HARMLESS_DSN=" + dsn, externalChildEnv + "=" + alt}, 0)
		rules := ours(cert)
		if len(rules) != 4 {
			t.Fatalf("%d external-effect rules in the certificate; want 4\n%s", len(rules), tail(output, 40))
		}
		for _, r := range rules {
			if r.Verdict != certificate.VerdictNotApplicable || r.Message != "external effects: none declared" {
				t.Errorf("%s: %s (%s); want not-applicable, external effects: none declared", r.ID, r.Verdict, r.Message)
			}
		}
		if st := certificate.StatusOf(rules); st != certificate.StatusCertified {
			t.Errorf("status of the not-applicable rules alone: %s; want certified", st)
		}
		if !strings.Contains(output, "not-applicable: external effects: none declared") {
			t.Errorf("the child's output does not say not-applicable and why\n%s", tail(output, 40))
		}
	})
}
