package certificate

import (
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/catalogid"
)

// ruleVerdicts returns a result for every rule of the catalogue, each with
// verdict v except those named in except.
func ruleVerdicts(v Verdict, except map[string]Verdict) []RuleResult {
	var rules []RuleResult
	for _, r := range fixtures.Rules() {
		res := RuleResult{ID: r.ID, Fixture: r.Fixture, Level: r.Level, Doc: r.Doc, Verdict: v}
		if e, ok := except[r.ID]; ok {
			res.Verdict = e
		}
		rules = append(rules, res)
	}
	return rules
}

func TestVerify(t *testing.T) {
	all := adapters.Declaration{ConflictPolicy: adapters.RejectConflicts, RedeliveryWindow: 24 * time.Hour, AcceptsClock: true}
	for _, tc := range []struct {
		name     string
		declared adapters.Declaration
		except   map[string]Verdict
		want     adapters.Declaration
	}{
		{"every rule passed", all, nil, all},
		{"a conflict rule failed", all, map[string]Verdict{catalogid.ConflictingPayloadConflictDetected: VerdictFail},
			adapters.Declaration{RedeliveryWindow: 24 * time.Hour, AcceptsClock: true}},
		{"a retention rule failed", all, map[string]Verdict{catalogid.RetentionExpiryStateBounded: VerdictFail},
			adapters.Declaration{ConflictPolicy: adapters.RejectConflicts}},
		{"a retention rule skipped", all, map[string]Verdict{catalogid.RetentionExpiryKeptInsideWindow: VerdictSkipped},
			adapters.Declaration{ConflictPolicy: adapters.RejectConflicts}},
		{"the real clock", adapters.Declaration{ConflictPolicy: adapters.RejectConflicts, RedeliveryWindow: 2 * time.Second}, nil,
			adapters.Declaration{ConflictPolicy: adapters.RejectConflicts, RedeliveryWindow: 2 * time.Second}},
		{"nothing declared", adapters.Declaration{}, nil, adapters.Declaration{}},
	} {
		if got := Verify(tc.declared, ruleVerdicts(VerdictPass, tc.except)); got != tc.want {
			t.Errorf("%s: verified %+v; want %+v", tc.name, got, tc.want)
		}
	}
	// Without a window the retention rules are not-supported: no window,
	// and no clock, is verified.
	notSupported := map[string]Verdict{}
	for _, r := range fixtures.Rules() {
		if r.Fixture == catalogid.RetentionExpiry {
			notSupported[r.ID] = VerdictNotSupported
		}
	}
	if got := Verify(adapters.Declaration{ConflictPolicy: adapters.RejectConflicts, AcceptsClock: true}, ruleVerdicts(VerdictPass, notSupported)); got != (adapters.Declaration{ConflictPolicy: adapters.RejectConflicts}) {
		t.Errorf("retention not-supported: verified %+v; want the conflict policy only", got)
	}
}

// TestEveryVerifiedPartIsKnown: each part of a declaration that a fixture
// of the catalogue says it verifies is one Verify copies, so that no
// fixture's claim is silently dropped.
func TestEveryVerifiedPartIsKnown(t *testing.T) {
	all := adapters.Declaration{ConflictPolicy: adapters.RejectConflicts, RedeliveryWindow: 24 * time.Hour, AcceptsClock: true, ExternalEffects: adapters.Outbox}
	for _, f := range fixtures.Catalog() {
		var only []RuleResult
		for _, r := range ruleVerdicts(VerdictPass, nil) {
			if r.Fixture == f.ID {
				only = append(only, r)
			}
		}
		v := Verify(all, only)
		set := 0
		for _, isSet := range []bool{v.ConflictPolicy != "", v.RedeliveryWindow != 0, v.AcceptsClock, v.ExternalEffects != ""} {
			if isSet {
				set++
			}
		}
		if set != len(f.Verifies) {
			t.Errorf("fixture %s verifies %q, of which Verify set %d parts: %+v", f.ID, f.Verifies, set, v)
		}
	}
}

// TestStatus: a run is certified only when every MUST rule ran and passed;
// partial when no MUST rule failed but one did not run; not certified when
// a MUST rule failed. A SHOULD rule decides nothing.
func TestStatus(t *testing.T) {
	should := func(rules []RuleResult, id string) []RuleResult {
		for i := range rules {
			if rules[i].ID == id {
				rules[i].Level = fixtures.Should
			}
		}
		return rules
	}
	must := 0
	for _, r := range fixtures.Rules() {
		if r.Level == fixtures.Must {
			must++
		}
	}
	for _, tc := range []struct {
		name   string
		rules  []RuleResult
		want   Status
		notRun int
	}{
		{"every rule passed", ruleVerdicts(VerdictPass, nil), StatusCertified, 0},
		{"a rule failed", ruleVerdicts(VerdictPass, map[string]Verdict{catalogid.DoubleDeliveryOneEffect: VerdictFail}), StatusNotCertified, 0},
		{"a failure beside rules that did not run", ruleVerdicts(VerdictNotSupported, map[string]Verdict{catalogid.DoubleDeliveryOneEffect: VerdictFail}), StatusNotCertified, must - 1},
		{"a MUST rule not-supported", ruleVerdicts(VerdictPass, map[string]Verdict{catalogid.CrashRecoveryAppliedSurvives: VerdictNotSupported}), StatusPartial, 1},
		{"a MUST rule filtered out", ruleVerdicts(VerdictPass, map[string]Verdict{catalogid.BadInputRunContinues: VerdictSkipped}), StatusPartial, 1},
		{"a SHOULD rule not-supported", should(ruleVerdicts(VerdictPass, map[string]Verdict{catalogid.BadInputRunContinues: VerdictNotSupported}), catalogid.BadInputRunContinues), StatusCertified, 0},
		{"a SHOULD rule failed", should(ruleVerdicts(VerdictPass, map[string]Verdict{catalogid.BadInputRunContinues: VerdictFail}), catalogid.BadInputRunContinues), StatusCertified, 0},
		{"nothing ran", ruleVerdicts(VerdictSkipped, nil), StatusPartial, must},
		{"external-effect not-applicable", ruleVerdicts(VerdictPass, map[string]Verdict{
			catalogid.ExternalEffectStableKey: VerdictNotApplicable, catalogid.ExternalEffectExactlyOnceAtDestination: VerdictNotApplicable,
			catalogid.ExternalEffectNoLoss: VerdictNotApplicable, catalogid.ExternalEffectNoNewKeyForDuplicates: VerdictNotApplicable,
		}), StatusCertified, 0},
		{"no rules at all", nil, StatusNotCertified, 0},
	} {
		c := Certificate{Rules: tc.rules}
		c.Status = StatusOf(tc.rules)
		if c.Status != tc.want || len(c.NotRun()) != tc.notRun {
			t.Errorf("%s: status %s with %d MUST rules not run; want %s and %d", tc.name, c.Status, len(c.NotRun()), tc.want, tc.notRun)
		}
	}
	for st, want := range map[Status]string{StatusCertified: "CERTIFIED", StatusPartial: "PARTIAL", StatusNotCertified: "NOT CERTIFIED", StatusInterrupted: "INTERRUPTED", "": "NOT CERTIFIED"} {
		if got := (Certificate{Status: st}).Headline(); got != want {
			t.Errorf("Headline of %q = %q; want %q", st, got, want)
		}
	}
}
