package suite

import (
	"errors"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/adapters"
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
