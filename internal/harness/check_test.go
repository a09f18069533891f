package harness_test

import (
	"errors"
	"testing"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// attempts makes attempts numbered nums of ev, on instance 1 + n%2, each
// acknowledged Duplicate but those in failed.
func attempts(ev adapters.Event, nums []int, failed ...int) []harness.Attempt {
	var out []harness.Attempt
	for _, n := range nums {
		a := harness.Attempt{Delivery: adapters.Delivery{Event: ev, Attempt: n}, Instance: 1 + n%2, Outcome: adapters.Duplicate}
		for _, f := range failed {
			if f == n {
				a.Err = errors.New("boom")
			}
		}
		out = append(out, a)
	}
	return out
}

func TestAttemptNumbersSortsAndShortens(t *testing.T) {
	ev := event("numbers")
	for _, tc := range []struct {
		nums []int
		want string
	}{
		{nil, ""},
		{[]int{7}, "7"},
		{[]int{3, 1, 2}, "1, 2, 3"},
		{[]int{11, 10, 9, 8, 7, 6, 5, 4, 3, 2}, "2, 3, 4, 5, 6, 7, 8, 9, and 2 more"},
	} {
		if got := harness.AttemptNumbers(attempts(ev, tc.nums)); got != tc.want {
			t.Errorf("AttemptNumbers(%v) = %q; want %q", tc.nums, got, tc.want)
		}
	}
}

func TestDescribeEventGroupsManyDeliveries(t *testing.T) {
	ev := event("grouped")
	effects := []ledger.Entry{{Attempt: 9}, {Attempt: 4}}
	history := attempts(ev, []int{10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 11}, 1)
	want := "event " + ev.String() + " applied 2 times (by attempt 4, 9); 11 deliveries:" +
		"\n  Duplicate: 10, attempt 2 (instance 1), 3 (instance 2), 4 (instance 1), 5 (instance 2), 6 (instance 1), 7 (instance 2), 8 (instance 1), 9 (instance 2), and 2 more" +
		"\n  error: boom: 1, attempt 1 (instance 2)"
	if got := harness.DescribeEvent(ev, effects, history); got != want {
		t.Errorf("DescribeEvent =\n%s\nwant\n%s", got, want)
	}
}
