package harness

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/shortdur"
)

// DescribeEvent summarises, for a failure message, what the ledger and the
// history say about one event: how often it was applied and by which
// attempts, and how every delivery ended.
func DescribeEvent(ev adapters.Event, effects []ledger.Entry, attempts []Attempt) string {
	var b strings.Builder
	fmt.Fprintf(&b, "event %s applied %s", ev, Times(len(effects)))
	if len(effects) > 0 {
		byAttempt := make([]int, len(effects))
		for i, e := range effects {
			byAttempt[i] = e.Attempt
		}
		slices.Sort(byAttempt)
		fmt.Fprintf(&b, " (by attempt %s)", firstFew(byAttempt, func(n int) string { return fmt.Sprint(n) }))
	}
	if len(attempts) == 0 {
		b.WriteString("; it was never delivered")
		return b.String()
	}
	if len(attempts) <= groupAbove {
		b.WriteString("; deliveries:")
		for _, a := range attempts {
			fmt.Fprintf(&b, "\n  attempt %d on instance %d%s: %s", a.Delivery.Attempt, a.Instance, redelivered(a), a.Result())
		}
		writeGaveUp(&b, attempts)
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
		slices.SortFunc(group, byAttemptNumber)
		fmt.Fprintf(&b, "\n  %s: %d, attempt %s", r, len(group), firstFew(group, func(a Attempt) string {
			if a.Delay > 0 {
				return fmt.Sprintf("%d (instance %d, +%s)", a.Delivery.Attempt, a.Instance, shortdur.Format(a.Delay.Round(time.Millisecond)))
			}
			return fmt.Sprintf("%d (instance %d)", a.Delivery.Attempt, a.Instance)
		}))
	}
	writeGaveUp(&b, attempts)
	return b.String()
}

// redelivered says, for a redelivery, how long the broker paused before
// it: the broker's patience is part of the evidence.
func redelivered(a Attempt) string {
	if a.Delay <= 0 {
		return ""
	}
	return ", redelivered " + shortdur.Format(a.Delay.Round(time.Millisecond)) + " after the attempt before"
}

// writeGaveUp says why the broker stopped redelivering, if it gave up:
// once per reason, naming the attempts after which it did.
func writeGaveUp(b *strings.Builder, attempts []Attempt) {
	var reasons []string
	after := map[string][]Attempt{}
	for _, a := range attempts {
		if a.GaveUp == "" {
			continue
		}
		if _, ok := after[a.GaveUp]; !ok {
			reasons = append(reasons, a.GaveUp)
		}
		after[a.GaveUp] = append(after[a.GaveUp], a)
	}
	for _, why := range reasons {
		word := "attempt"
		if len(after[why]) > 1 {
			word = "attempts"
		}
		fmt.Fprintf(b, "\n  the broker gave up after %s %s: %s", word, AttemptNumbers(after[why]), why)
	}
}

// AttemptNumbers lists the numbers of attempts in order, at most
// listAtMost of them, e.g. "2, 3, 5, 6, 7, 8, 9, 10, and 6 more".
func AttemptNumbers(attempts []Attempt) string {
	sorted := slices.SortedFunc(slices.Values(attempts), byAttemptNumber)
	return firstFew(sorted, func(a Attempt) string { return fmt.Sprint(a.Delivery.Attempt) })
}

func byAttemptNumber(x, y Attempt) int { return x.Delivery.Attempt - y.Delivery.Attempt }

// firstFew names the first listAtMost of items with name, and says how
// many more there are.
func firstFew[T any](items []T, name func(T) string) string {
	var names []string
	for _, it := range items[:min(len(items), listAtMost)] {
		names = append(names, name(it))
	}
	if len(items) > listAtMost {
		names = append(names, fmt.Sprintf("and %d more", len(items)-listAtMost))
	}
	return strings.Join(names, ", ")
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

// Times says how many times something happened, in words the harness's
// messages share: "0 times", "once", "3 times".
func Times[N ~int | ~int64](n N) string {
	switch n {
	case 0:
		return "0 times"
	case 1:
		return "once"
	default:
		return fmt.Sprintf("%d times", n)
	}
}
