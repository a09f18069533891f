package suite

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// TestPatternHint: a conflicting copy handled right in sequence but not in
// flight points to a race, and only then: the conflicting-payload
// fixture's pattern, which the fold asks for.
func TestPatternHint(t *testing.T) {
	seq := catalogid.ConflictingPayload + " / " + conflictSequentialVariant
	inFlight := catalogid.ConflictingPayload + " / " + conflictInFlightVariant
	first := catalogid.ConflictingPayload + " / conflicting copy first"
	for _, tc := range []struct {
		name             string
		rule             string
		passed, failed   []string
		wantRace, wantNo bool
	}{
		{"sequential passed, in flight failed", catalogid.ConflictingPayloadConflictDetected, []string{seq, first}, []string{inFlight}, true, false},
		{"every variant failed", catalogid.ConflictingPayloadConflictDetected, nil, []string{seq, inFlight, first}, false, true},
		{"sequential failed", catalogid.ConflictingPayloadNoSecondEffect, []string{inFlight}, []string{seq}, false, true},
		{"in flight failed but sequential did not run", catalogid.ConflictingPayloadConflictDetected, []string{first}, []string{inFlight}, false, true},
		{"another fixture", catalogid.ConcurrentDeliveryOneEffect, []string{seq}, []string{inFlight}, false, true},
	} {
		r, err := fixtures.Lookup(tc.rule)
		if err != nil {
			t.Fatal(err)
		}
		got := patternHint(r, tc.passed, tc.failed)
		if tc.wantRace && !strings.Contains(got, "race") || tc.wantNo && got != "" {
			t.Errorf("%s: patternHint = %q", tc.name, got)
		}
	}
}

// TestClaimantHint: the failed-claimant hint follows the plays' effects
// and their Duplicate answers.
func TestClaimantHint(t *testing.T) {
	effects := func(n int) []ledger.Entry { return make([]ledger.Entry, n) }
	dup := contender{attempt: harness.Attempt{Outcome: adapters.Duplicate}, whileHeld: true}
	failed := harness.Attempt{Err: errors.New("the claimant failed")}
	extra := claimantResult{effects: effects(3), claimant: failed}
	lostDup := claimantResult{effects: effects(0), claimant: failed, contenders: []contender{dup}}
	stuck := claimantResult{effects: effects(0), claimant: failed}
	fine := claimantResult{effects: effects(1)}
	r, _ := fixtures.Lookup(catalogid.ConcurrentDeliveryFailedClaimantNotLost)
	for _, tc := range []struct {
		name  string
		plays []claimantResult
		want  []string // fragments, or none for the rule's usual suspect
		not   []string
	}{
		{"applied more than once", []claimantResult{fine, extra}, []string{"check-then-insert"}, []string{r.Suspect}},
		{"lost, copies acknowledged Duplicate", []claimantResult{lostDup}, nil, nil},
		{"lost, no Duplicate at all", []claimantResult{stuck}, []string{"no copy was acknowledged Duplicate"}, []string{"busy answers Duplicate"}},
		{"both kinds of loss and extra effects", []claimantResult{extra, lostDup, stuck}, []string{"check-then-insert", "no copy was acknowledged Duplicate", r.Suspect}, nil},
	} {
		got := claimantHint(tc.plays)
		if len(tc.want) == 0 && got != "" {
			t.Errorf("%s: claimantHint = %q; want the usual suspect", tc.name, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: claimantHint = %q; want it to name %q", tc.name, got, w)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(got, w) {
				t.Errorf("%s: claimantHint = %q; want it not to name %q", tc.name, got, w)
			}
		}
	}
}

// TestBeforeMidnight: the kept-inside-window play's t0 is before a UTC
// midnight that falls inside the span from it, however short the span,
// from any start: the day (and hour) always change inside the window.
func TestBeforeMidnight(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for i := range 2000 {
		start := harness.ClockStart(uint64(i), "s1")
		span := []time.Duration{2 * time.Microsecond, time.Second, time.Hour, 24*time.Hour - 14*time.Minute, 72 * time.Hour}[i%5]
		t0 := beforeMidnight(start, span, rng)
		end := t0.Add(span)
		if t0.UTC().YearDay() == end.UTC().YearDay() || t0.UTC().Hour() == end.UTC().Hour() && span < time.Hour {
			t.Fatalf("from %s, t0 %s and t0+%s = %s: the span crosses no midnight", start, t0, span, end)
		}
		if start.Hour() == 0 && start.Minute() == 0 && start.Second() == 0 && start.Nanosecond() == 0 {
			t.Errorf("ClockStart(%d) = %s, a midnight", i, start)
		}
	}
}
