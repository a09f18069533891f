package suite

import (
	"errors"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/harness"
)

// TestUnsharedClaim checks the observation double-delivery adds to its
// failures: it is made exactly when each instance applied the event once
// and answered Duplicate afterwards, the history of a dedup set held in
// process memory; stated as the cause only when the implementation keeps
// no row in the database, else as a hint; and never when an instance new
// to the event answered Duplicate, which shows a shared claim.
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
			[][]harness.Attempt{at(2, applied), at(1, dup), at(2, dup), at(1, dup), at(3, applied)}, "redeliveries 1, 5 on instances new to it"},
		{"the other instance applies later", at(1, applied),
			[][]harness.Attempt{at(1, dup), at(2, applied), at(2, dup)}, "redeliveries 2 on instances new to it"},
		{"correct", at(1, applied), [][]harness.Attempt{at(2, dup), at(1, dup), at(3, dup)}, ""},
		{"a fresh instance answers Duplicate", at(1, applied),
			[][]harness.Attempt{at(2, applied), at(1, dup), at(2, dup), at(3, dup)}, ""},
		{"no marker at all", at(1, applied), [][]harness.Attempt{at(2, applied), at(1, applied)}, ""},
		{"the instance that applied applies again", at(1, applied), [][]harness.Attempt{at(1, applied), at(2, dup)}, ""},
		{"a redelivery unacknowledged", at(1, applied), [][]harness.Attempt{at(2, applied), failed}, ""},
		{"the first delivery not applied", at(1, dup), [][]harness.Attempt{at(2, applied), at(1, dup)}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, rows := range []int64{0, 3} {
				cause, hint := unsharedClaim(c.first, c.later, rows, nil)
				got := cause + hint
				switch {
				case c.want == "" && got != "":
					t.Fatalf("with %d rows, observation made for a history that does not show an unshared claim: %s", rows, got)
				case c.want != "" && !strings.Contains(got, c.want):
					t.Fatalf("with %d rows, observation %q; want one naming %q", rows, got, c.want)
				case c.want != "" && !strings.Contains(got, "not shared between instances"):
					t.Fatalf("with %d rows, observation %q does not name the cause", rows, got)
				case c.want != "" && rows == 0 && cause == "":
					t.Fatalf("with no row in the database, %q is only a hint; want it stated as the cause", hint)
				case c.want != "" && rows > 0 && cause != "":
					t.Fatalf("with %d rows in the database, %q is stated as the cause; a key that includes the instance would look the same", rows, cause)
				}
			}
		})
	}
}

// TestCauseReplacesSuspect checks that a cause read from the deliveries
// takes the place of the rule's usual suspect, which would mislead, and
// that the suspect is given when there is none, and not for a play the
// harness cut short.
func TestCauseReplacesSuspect(t *testing.T) {
	r, err := fixtures.Lookup(catalogid.DoubleDeliveryOneEffect)
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
	hinted := failureMessage(r, judgement{problems: problems, hint: "the key depends on the calendar"})
	if !strings.Contains(hinted, "This may mean: the key depends on the calendar.") || strings.Contains(hinted, r.Suspect) {
		t.Errorf("with a hint, the message is %q; want the hint, worded as one, and not the suspect", hinted)
	}
	led := failureMessage(r, judgement{problems: problems, lead: "none of the play's 3 deliveries was acknowledged"})
	if !strings.Contains(led, "First, what the play shows: none of the play's 3 deliveries") || strings.Contains(led, r.Suspect) {
		t.Errorf("with a lead, the message is %q; want the lead first and no guess", led)
	}
	if strings.Index(led, "none of the play's") > strings.Index(led, "expected exactly one effect") {
		t.Errorf("the lead comes after the problems: %q", led)
	}
}
