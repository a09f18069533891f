package suite

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// redeliveries is how often double-delivery redelivers after the first
// delivery.
const redeliveries = 10

// newEvent returns an event of the fixture with a payload that names it.
func newEvent(fixture, id string) adapters.Event {
	return adapters.Event{
		Namespace: "harmless." + fixture,
		ID:        id,
		Payload:   fmt.Appendf(nil, `{"fixture":%q,"id":%q}`, fixture, id),
	}
}

func (s *state) doubleDelivery() {
	Describe(fixtures.DoubleDelivery, Label("fixture:"+fixtures.DoubleDelivery), Ordered, ContinueOnFailure, func() {
		var (
			ev      = newEvent(fixtures.DoubleDelivery, "1")
			first   []harness.Attempt
			later   [][]harness.Attempt
			effects []ledger.Entry
			all     []harness.Attempt
		)
		describe := func() string {
			return harness.DescribeEvent(ev, effects, all) + "\nno fault was planned"
		}
		// Two instances to build, then eleven deliveries one after another.
		sc := s.scenario(fixtures.DoubleDelivery, work{calls: 2}.plus(untilTerminal(1+redeliveries)))
		BeforeAll(func(ctx SpecContext) {
			play := sc.begin(ctx)
			sc.at("the first delivery")
			first = play.DeliverUntilTerminal(ctx, 1, ev)
			for i := range redeliveries {
				sc.at("redelivery %d of %d", i+1, redeliveries)
				worker := 2 - i%2 // alternate: worker 2, 1, 2, ...
				later = append(later, play.DeliverUntilTerminal(ctx, worker, ev))
			}
			var err error
			effects, err = play.Effects(ctx, ev)
			Expect(err).NotTo(HaveOccurred())
			all = play.History(ev)
		}, sc.timeout())

		sc.rule(fixtures.DoubleDeliveryFirstApplied, func() []string {
			last := first[len(first)-1]
			if last.Acked() && last.Outcome == adapters.Applied {
				return nil
			}
			return []string{fmt.Sprintf("the first delivery ended %s; expected Applied\n%s",
				last.Result(), describe())}
		})
		sc.causedRule(fixtures.DoubleDeliveryRedeliveryDuplicate, func() ([]string, string) {
			var problems []string
			for i, tries := range later {
				last := tries[len(tries)-1]
				if !last.Acked() || last.Outcome != adapters.Duplicate {
					problems = append(problems, fmt.Sprintf("redelivery %d (attempt %d) ended %s; expected Duplicate",
						i+1, last.Delivery.Attempt, last.Result()))
				}
			}
			if len(problems) == 0 {
				return nil, ""
			}
			return append(problems, describe()), unsharedClaim(first, later)
		})
		sc.causedRule(fixtures.DoubleDeliveryOneEffect, func() ([]string, string) {
			if len(effects) == 1 && effects[0].Attempt == first[len(first)-1].Delivery.Attempt {
				return nil, ""
			}
			return []string{fmt.Sprintf("expected exactly one effect, by attempt %d; observed:\n%s",
				first[len(first)-1].Delivery.Attempt, describe())}, unsharedClaim(first, later)
		})
	})
}

// unsharedClaim is the cause of the failure of an implementation whose claim
// lives in one instance's memory, or "" when the deliveries do not show one:
// the first delivery was Applied, every redelivery to its instance was
// Duplicate, and the other instance applied the event again on its first
// redelivery and answered Duplicate after that. Rule hints guess at a cause
// from one rule's failure; this one is read from the history, and tells a
// dedup set held in process memory from a marker keyed on something that
// changes.
func unsharedClaim(first []harness.Attempt, later [][]harness.Attempt) string {
	applied := first[len(first)-1]
	if !applied.Acked() || applied.Outcome != adapters.Applied {
		return ""
	}
	seen := map[int]bool{applied.Instance: true}
	var other []string // redeliveries (from 1) applied by an instance new to the event
	for i, tries := range later {
		last := tries[len(tries)-1]
		if !last.Acked() {
			return ""
		}
		switch {
		case last.Outcome == adapters.Duplicate && seen[last.Instance]:
		case last.Outcome == adapters.Applied && !seen[last.Instance]:
			seen[last.Instance] = true
			other = append(other, fmt.Sprint(i+1))
		default:
			return ""
		}
	}
	if len(other) == 0 {
		return ""
	}
	return fmt.Sprintf("the claim is not shared between instances (a dedup set held in process memory, not in the database): each instance applied the event once, the first delivery on worker %d and redelivery %s on another worker, and every other redelivery, to a worker that had applied it, was Duplicate",
		applied.Instance, strings.Join(other, ", "))
}
