package builtin_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// TestRegistryIsConsistent: every rule the registry names exists, none is
// named twice in an entry, correct adapters must fail nothing and broken
// ones something.
func TestRegistryIsConsistent(t *testing.T) {
	for _, problem := range builtin.Check(builtin.Entries()) {
		t.Error(problem)
	}
}

// TestCheckFindsBadEntries is the control of the test above: Check sees a
// rule that does not exist, one listed twice, and a broken adapter that
// must fail nothing; an id of the failover fixture that is not one of its
// rules is refused, whether the catalogue has the fixture yet or not.
func TestCheckFindsBadEntries(t *testing.T) {
	e, err := builtin.EntryOf("broken-case-folded")
	if err != nil {
		t.Fatal(err)
	}
	typo, twice, none, failoverTypo, unchecked := e, e, e, e, e
	typo.Fails = []string{"identity-fidelity.text-kep"}
	twice.MayFail = map[string]string{"identity-fidelity.text-kept": "twice"}
	none.Fails = nil
	failoverTypo.Fails = []string{"failover.follows-primar"}
	// A failover rule for an adapter whose verdicts on a formation no
	// test checks is a claim nothing holds it to.
	unchecked.Fails = []string{"failover.follows-primary"}
	for _, bad := range []builtin.Entry{typo, twice, none, failoverTypo, unchecked} {
		if problems := builtin.Check([]builtin.Entry{bad}); len(problems) != 1 {
			t.Errorf("Check of %+v: %q; want one problem", bad.Fails, problems)
		}
	}
}

// TestAllowedFollowsTheEntry: a rule the entry must fail allows only fail,
// one it may fail allows fail and pass, a fixture that does not apply
// allows only not-applicable, and every other rule only pass.
func TestAllowedFollowsTheEntry(t *testing.T) {
	e, err := builtin.EntryOf("broken-time-bucketed-key")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rule string
		want []certificate.Verdict
	}{
		{"retention-expiry.kept-inside-window", []certificate.Verdict{certificate.VerdictFail}},
		{"retention-expiry.concurrent-purge-safe", []certificate.Verdict{certificate.VerdictFail, certificate.VerdictPass}},
		{"double-delivery.one-effect", []certificate.Verdict{certificate.VerdictPass}},
		// It declares no external effects: the fixture does not apply.
		{"external-effect.no-loss", []certificate.Verdict{certificate.VerdictNotApplicable}},
	} {
		rule, err := fixtures.Lookup(tc.rule)
		if err != nil {
			t.Fatal(err)
		}
		if got, why := e.Allowed(rule); !slices.Equal(got, tc.want) {
			t.Errorf("Allowed(%s) = %v (%s); want %v", tc.rule, got, why, tc.want)
		}
	}
	ref, err := builtin.EntryOf("reference")
	if err != nil {
		t.Fatal(err)
	}
	// The reference passes every rule that applies where it runs: the
	// failover fixture's on a formation, crash-recovery's on one server;
	// the other is not-applicable there.
	pass, na := []certificate.Verdict{certificate.VerdictPass}, []certificate.Verdict{certificate.VerdictNotApplicable}
	for _, rule := range fixtures.Rules() {
		single, formation := pass, pass
		switch rule.Fixture {
		case "failover":
			single = na
		case "crash-recovery":
			formation = na
		}
		for d, want := range map[builtin.Deployment][]certificate.Verdict{builtin.SingleServer: single, builtin.Formation: formation} {
			if got, why := ref.AllowedOn(rule, d); !slices.Equal(got, want) {
				t.Errorf("the reference on %s, on a %s: allowed %v (%s); want %v", rule.ID, d, got, why, want)
			}
		}
	}
}

// TestLookupNamesTheKnownAdapters: an unknown name is refused with the
// list of known ones.
func TestLookupNamesTheKnownAdapters(t *testing.T) {
	_, err := builtin.Lookup("no-such-adapter")
	if err == nil || !strings.Contains(err.Error(), "broken-in-memory") {
		t.Fatalf("Lookup of an unknown adapter: %v; want an error listing the known ones", err)
	}
	if got := builtin.Names(); !slices.IsSorted(got) || len(got) != len(builtin.Entries()) {
		t.Errorf("Names() = %v; want every entry's name, sorted", got)
	}
}
