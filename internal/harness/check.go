package harness

import (
	"fmt"
	"slices"
	"strconv"
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
		byAttempt := make([]int, len(effects))
		for i, e := range effects {
			byAttempt[i] = e.Attempt
		}
		slices.Sort(byAttempt)
		var nums []string
		for _, n := range byAttempt[:min(len(byAttempt), listAtMost)] {
			nums = append(nums, fmt.Sprint(n))
		}
		if len(byAttempt) > listAtMost {
			nums = append(nums, fmt.Sprintf("and %d more", len(byAttempt)-listAtMost))
		}
		fmt.Fprintf(&b, " (by attempt %s)", strings.Join(nums, ", "))
	}
	if len(attempts) == 0 {
		b.WriteString("; it was never delivered")
		return b.String()
	}
	if len(attempts) <= groupAbove {
		b.WriteString("; deliveries:")
		for _, a := range attempts {
			fmt.Fprintf(&b, "\n  attempt %d on worker %d: %s", a.Delivery.Attempt, a.Instance, a.Result())
		}
		return b.String()
	}
	// Many deliveries (a concurrent round): group them by result.
	fmt.Fprintf(&b, "; %d deliveries:", len(attempts))
	var results []string
	byResult := map[string][]Attempt{}
	for _, a := range attempts {
		r := groupResult(a)
		if _, ok := byResult[r]; !ok {
			results = append(results, r)
		}
		byResult[r] = append(byResult[r], a)
	}
	for _, r := range results {
		group := byResult[r]
		slices.SortFunc(group, func(x, y Attempt) int { return x.Delivery.Attempt - y.Delivery.Attempt })
		var nums []string
		for _, a := range group[:min(len(group), listAtMost)] {
			nums = append(nums, fmt.Sprintf("%d (worker %d)", a.Delivery.Attempt, a.Instance))
		}
		if len(group) > listAtMost {
			nums = append(nums, fmt.Sprintf("and %d more", len(group)-listAtMost))
		}
		fmt.Fprintf(&b, "\n  %s: %d, attempt %s", r, len(group), strings.Join(nums, ", "))
	}
	return b.String()
}

// groupResult is a's result as DescribeEvent groups it: an error that
// names the attempt's own number ("deliver x attempt 5: ...", as the exec
// adapter writes) has it masked as "attempt #", so that errors differing
// only by it fall into one group, which lists the attempts.
func groupResult(a Attempt) string {
	r := a.Result()
	if a.Err == nil {
		return r
	}
	own := "attempt " + strconv.Itoa(a.Delivery.Attempt)
	var b strings.Builder
	for {
		i := strings.Index(r, own)
		if i < 0 {
			b.WriteString(r)
			return b.String()
		}
		end := i + len(own)
		whole := (i == 0 || !isWordByte(r[i-1])) && (end == len(r) || !isWordByte(r[end]))
		b.WriteString(r[:i])
		if whole {
			b.WriteString("attempt #")
		} else {
			b.WriteString(own)
		}
		r = r[end:]
	}
}

func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// DescribeEvent lists up to groupAbove deliveries one by one, more grouped
// by result, naming at most listAtMost attempts of each group.
const (
	groupAbove = 6
	listAtMost = 8
)

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
