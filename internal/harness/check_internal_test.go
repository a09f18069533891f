package harness

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/adapters"
)

// TestDescribeEventGroupsErrorsThatNameTheirAttempt: errors that differ
// only by the number of their own attempt, as the exec adapter writes
// them, make one line per kind of error, not one per delivery.
func TestDescribeEventGroupsErrorsThatNameTheirAttempt(t *testing.T) {
	ev := adapters.Event{Namespace: "n", ID: "1"}
	var attempts []Attempt
	for n := 1; n <= 30; n++ {
		instance := 1 + n%2
		attempts = append(attempts, Attempt{
			Delivery: adapters.Delivery{Event: ev, Attempt: n},
			Instance: instance,
			Err:      fmt.Errorf("deliver n/1 attempt %d: process 1 of instance %d crashed (after 10 attempts)", n, instance),
		})
	}
	got := DescribeEvent(ev, nil, attempts)
	lines := strings.Split(got, "\n")
	if len(lines) != 3 {
		t.Fatalf("30 deliveries with two kinds of error make %d lines; want a header and one per kind:\n%s", len(lines), got)
	}
	for _, want := range []string{
		"  error: deliver n/1 attempt #: process 1 of instance 1 crashed (after 10 attempts): 15, attempt 2 (instance 1), 4 (instance 1)",
		"  error: deliver n/1 attempt #: process 1 of instance 2 crashed (after 10 attempts): 15, attempt 1 (instance 2), 3 (instance 2)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no line %q in:\n%s", want, got)
		}
	}

	// Only the attempt's own number, as a whole word, is masked.
	for _, tc := range []struct {
		attempt int
		err     string
		want    string
	}{
		{1, "attempt 1: also attempt 10 and reattempt 1", "error: attempt #: also attempt 10 and reattempt 1"},
		{7, "no number here", "error: no number here"},
	} {
		a := Attempt{Delivery: adapters.Delivery{Event: ev, Attempt: tc.attempt}, Err: errors.New(tc.err)}
		if got := groupResult(a); got != tc.want {
			t.Errorf("groupResult(attempt %d, %q) = %q; want %q", tc.attempt, tc.err, got, tc.want)
		}
	}
}
