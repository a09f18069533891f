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
	typo, twice, none, failoverTypo := e, e, e, e
	typo.Fails = []string{"identity-fidelity.text-kep"}
	twice.MayFail = map[string]string{"identity-fidelity.text-kept": "twice"}
	none.Fails = nil
	failoverTypo.Fails = []string{"failover.follows-primar"}
	for _, bad := range []builtin.Entry{typo, twice, none, failoverTypo} {
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
	for _, rule := range fixtures.Rules() {
		if got, why := ref.Allowed(rule); !slices.Equal(got, []certificate.Verdict{certificate.VerdictPass}) {
			t.Errorf("the reference on %s: allowed %v (%s); it must pass every rule", rule.ID, got, why)
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
