package harness

import (
	"fmt"
	"strings"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// DescribeEvent summarises, for a failure message, what the ledger and the
// history say about one event: how often it was applied and by which
// attempts, and how every delivery ended.
func DescribeEvent(ev adapters.Event, effects []ledger.Entry, attempts []Attempt) string {
	var b strings.Builder
	fmt.Fprintf(&b, "event %s applied %s", ev, times(len(effects)))
	if len(effects) > 0 {
		nums := make([]string, len(effects))
		for i, e := range effects {
			nums[i] = fmt.Sprint(e.Attempt)
		}
		fmt.Fprintf(&b, " (by attempt %s)", strings.Join(nums, ", "))
	}
	if len(attempts) == 0 {
		b.WriteString("; it was never delivered")
		return b.String()
	}
	b.WriteString("; deliveries:")
	for _, a := range attempts {
		fmt.Fprintf(&b, "\n  attempt %d on worker %d: %s", a.Delivery.Attempt, a.Instance, a.Result())
	}
	return b.String()
}

// Outcomes counts the acknowledged outcomes of attempts and the attempts
// that were not acknowledged.
func Outcomes(attempts []Attempt) (counts map[adapters.Outcome]int, unacked int) {
	counts = map[adapters.Outcome]int{}
	for _, a := range attempts {
		if a.Acked() {
			counts[a.Outcome]++
		} else {
			unacked++
		}
	}
	return counts, unacked
}

func times(n int) string {
	switch n {
	case 0:
		return "0 times"
	case 1:
		return "once"
	default:
		return fmt.Sprintf("%d times", n)
	}
}
