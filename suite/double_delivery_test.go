package suite

import (
	"errors"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/harness"
)

// TestUnsharedClaim checks the observation double-delivery adds to its
// failures: it is made exactly when each instance applied the event once
// and answered Duplicate afterwards, the history of a dedup set held in
// process memory.
func TestUnsharedClaim(t *testing.T) {
	at := func(instance int, outcome adapters.Outcome) []harness.Attempt {
		return []harness.Attempt{{Instance: instance, Outcome: outcome}}
	}
	failed := []harness.Attempt{{Instance: 2, Err: errors.New("boom")}}
	applied, dup := adapters.Applied, adapters.Duplicate
	cases := []struct {
		name  string
		first []harness.Attempt
		later [][]harness.Attempt
		want  string // a fragment of the observation, or "" for none
	}{
		{"in memory per instance", at(1, applied),
			[][]harness.Attempt{at(2, applied), at(1, dup), at(2, dup), at(1, dup)}, "redelivery 1 on another worker"},
		{"the other instance applies later", at(1, applied),
			[][]harness.Attempt{at(1, dup), at(2, applied), at(2, dup)}, "redelivery 2 on another worker"},
		{"correct", at(1, applied), [][]harness.Attempt{at(2, dup), at(1, dup)}, ""},
		{"no marker at all", at(1, applied), [][]harness.Attempt{at(2, applied), at(1, applied)}, ""},
		{"the instance that applied applies again", at(1, applied), [][]harness.Attempt{at(1, applied), at(2, dup)}, ""},
		{"a redelivery unacknowledged", at(1, applied), [][]harness.Attempt{at(2, applied), failed}, ""},
		{"the first delivery not applied", at(1, dup), [][]harness.Attempt{at(2, applied), at(1, dup)}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := unsharedClaim(c.first, c.later)
			switch {
			case c.want == "" && got != "":
				t.Fatalf("observation made for a history that does not show an unshared claim: %s", got)
			case c.want != "" && !strings.Contains(got, c.want):
				t.Fatalf("observation %q; want one naming %q", got, c.want)
			case c.want != "" && !strings.Contains(got, "not shared between instances"):
				t.Fatalf("observation %q does not name the cause", got)
			}
		})
	}
}

// TestCauseReplacesSuspect checks that a cause read from the deliveries
// takes the place of the rule's usual suspect, which would mislead, and
// that the suspect is given when there is none, and not for a play the
// harness cut short.
func TestCauseReplacesSuspect(t *testing.T) {
	r, err := fixtures.Lookup(fixtures.DoubleDeliveryOneEffect)
	if err != nil {
		t.Fatal(err)
	}
	problems := []string{"expected exactly one effect"}
	caused := failureMessage(r, judgement{problems: problems, cause: "the claim is not shared"})
	if !strings.Contains(caused, "The deliveries show the cause: the claim is not shared.") || strings.Contains(caused, r.Suspect) {
		t.Errorf("with a cause, the message is %q; want the cause and not the suspect %q", caused, r.Suspect)
	}
	guessed := failureMessage(r, judgement{problems: problems})
	if !strings.Contains(guessed, "This usually means: "+r.Suspect) {
		t.Errorf("without a cause, the message is %q; want the suspect", guessed)
	}
	if unplayed := failureMessage(r, judgement{problems: problems, unplayed: true}); strings.Contains(unplayed, r.Suspect) {
		t.Errorf("for a play cut short, the message is %q; want no suspect", unplayed)
	}
}
