package suite

import (
	"context"
	"fmt"
	"strings"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// redeliveries is how often double-delivery redelivers after the first
// delivery, alternating between two instances; then it redelivers once more
// to a third instance (freshInstance), which has never seen the event, as an
// instance started after a restart or to scale up.
const (
	redeliveries  = 10
	freshInstance = 3
)

// newEvent returns an event of the fixture with a payload that names it.
func newEvent(fixture, id string) adapters.Event {
	return adapters.Event{
		Namespace: "harmless." + fixture,
		ID:        id,
		Payload:   fmt.Appendf(nil, `{"fixture":%q,"id":%q}`, fixture, id),
	}
}

// The ids of the fixture and its rules, written once, here: the
// catalogue and internal/catalogid are generated from the definition
// below. They are stable: labels, reports and other tools use them.
const (
	doubleDeliveryID = "double-delivery"

	doubleDeliveryFirstApplied        = "double-delivery.first-applied"
	doubleDeliveryRedeliveryDuplicate = "double-delivery.redelivery-duplicate"
	doubleDeliveryOneEffect           = "double-delivery.one-effect"
)

// doubleDeliveryDefinition is the fixture's catalogue entry, with
// its rules' reasons and usual suspects, and its page in docs/.
func doubleDeliveryDefinition() Definition {
	return Definition{
		Page: DocPage{File: "concurrency.md", Title: "duplicates, one after another and at once"},
		Fixture: fixtures.Fixture{
			ID:  doubleDeliveryID,
			Doc: "Deliver an event once, then redeliver it ten times, one after another, alternating between two instances, and once more to a third instance that has never seen it.",
			Rules: []fixtures.Rule{
				{
					ID: doubleDeliveryFirstApplied, Level: fixtures.Must,
					Doc:     "The first delivery of a new event is acknowledged as Applied, with the event's effect committed when it answers.",
					Reason:  "A run in which nothing is ever applied proves nothing; an implementation must apply new events. " + seedClaim,
					Suspect: "the claim is never made, or the effect is skipped even when the claim succeeds",
					Changed: "since 0.2.0 the Applied answer is checked against the ledger the moment it is given: an Applied with no effect committed fails the rule, where before only the answer was read.",
				},
				{
					ID: doubleDeliveryRedeliveryDuplicate, Level: fixtures.Must,
					Doc:     "Every redelivery of an applied event is acknowledged as Duplicate.",
					Reason:  "Brokers deliver at least once; a redelivery must be recognised by the event's identity, or the consumer cannot tell it from new work. " + seedTwice,
					Suspect: "no marker is stored, or the marker is keyed by something that changes between deliveries (a broker message id, a timestamp)",
				},
				{
					ID: doubleDeliveryOneEffect, Level: fixtures.Must,
					Doc:     "After twelve deliveries the ledger holds exactly one effect, from the first delivery.",
					Reason:  seedTwice,
					Suspect: "the effect is applied without checking the claim's result",
				},
			},
		},
	}
}

func (s *state) doubleDelivery() {
	s.describeFixture(doubleDeliveryID, func() {
		var (
			ev      = newEvent(doubleDeliveryID, "1")
			first   []harness.Attempt
			later   [][]harness.Attempt // the last to freshInstance
			effects []ledger.Entry
			all     []harness.Attempt
			rows    int64 // the implementation's rows, at the end
			rowsErr error
		)
		describe := func() string {
			return harness.DescribeEvent(ev, effects, all) + "\nno fault was planned"
		}
		// Three instances to build, then twelve deliveries one after
		// another.
		pn := s.play(doubleDeliveryID, work{calls: 3}.plus(untilTerminal(2+redeliveries)))
		pn.gather(func(ctx context.Context) {
			play := pn.begin(ctx)
			pn.at("the first delivery")
			first = play.DeliverUntilTerminal(ctx, 1, ev)
			for i := range redeliveries + 1 {
				pn.at("redelivery %d of %d", i+1, redeliveries+1)
				instance := 2 - i%2 // alternate: instance 2, 1, 2, ..., then a fresh one
				if i == redeliveries {
					instance = freshInstance
				}
				later = append(later, play.DeliverUntilTerminal(ctx, instance, ev))
			}
			var err error
			effects, err = play.Effects(ctx, ev)
			must(err)
			all = play.History(ev)
			rows, rowsErr = play.StateRows(ctx)
		})

		pn.rule(doubleDeliveryFirstApplied, func() []string {
			last := first[len(first)-1]
			switch {
			case last.Unbacked():
				return []string{fmt.Sprintf("the first delivery answered %s while the ledger held no effect of the event; Applied promises the effect committed\n%s",
					last.Outcome, describe())}
			case last.Acked() && last.Outcome == adapters.Applied:
				return nil
			}
			return []string{fmt.Sprintf("the first delivery ended %s; expected Applied\n%s",
				last.Result(), describe())}
		})
		pn.judgedRule(doubleDeliveryRedeliveryDuplicate, func() judgement {
			var problems []string
			for i, tries := range later {
				last := tries[len(tries)-1]
				if !last.Acked() || last.Outcome != adapters.Duplicate {
					problems = append(problems, fmt.Sprintf("redelivery %d (attempt %d) ended %s; expected Duplicate",
						i+1, last.Delivery.Attempt, last.Result()))
				}
			}
			if len(problems) == 0 {
				return judgement{}
			}
			cause, hint := unsharedClaim(first, later, rows, rowsErr)
			return judgement{problems: append(problems, describe()), cause: cause, hint: hint}
		})
		pn.judgedRule(doubleDeliveryOneEffect, func() judgement {
			if len(effects) == 1 && effects[0].Attempt == first[len(first)-1].Delivery.Attempt {
				return judgement{}
			}
			cause, hint := unsharedClaim(first, later, rows, rowsErr)
			return judgement{problems: []string{fmt.Sprintf("expected exactly one effect, by attempt %d; observed:\n%s",
				first[len(first)-1].Delivery.Attempt, describe())}, cause: cause, hint: hint}
		})
	})
}

// unsharedClaim reads from the history whether the claim lives in each
// instance alone: the first delivery was Applied, every redelivery to an
// instance that had applied the event was Duplicate, and every other
// instance, the fresh one included, applied it again on its first
// delivery. It returns the cause as a fact when the evidence rules out the
// alternatives (the implementation keeps no row in the database at all, so
// its claims can only be in its memory), else a hint, worded as one, to
// follow the evidence in the message (a key that includes the instance would
// look the same), else neither: when an instance that had never seen the
// event answered Duplicate, the claim is shared, and the cause lies
// elsewhere.
func unsharedClaim(first []harness.Attempt, later [][]harness.Attempt, rows int64, rowsErr error) (cause, hint string) {
	applied := first[len(first)-1]
	if !applied.Acked() || applied.Outcome != adapters.Applied {
		return "", ""
	}
	seen := map[int]bool{applied.Instance: true}
	var other []string // redeliveries (from 1) applied by an instance new to the event
	for i, tries := range later {
		last := tries[len(tries)-1]
		if !last.Acked() {
			return "", ""
		}
		switch {
		case last.Outcome == adapters.Duplicate && seen[last.Instance]:
		case last.Outcome == adapters.Applied && !seen[last.Instance]:
			seen[last.Instance] = true
			other = append(other, fmt.Sprint(i+1))
		default:
			return "", ""
		}
	}
	if len(other) == 0 {
		return "", ""
	}
	pattern := fmt.Sprintf("each of %d instances applied the event once, the first delivery on instance %d and redeliveries %s on instances new to it, and every other redelivery, to an instance that had applied it, was Duplicate",
		len(seen), applied.Instance, strings.Join(other, ", "))
	if rowsErr == nil && rows == 0 {
		return "the claim is not shared between instances: " + pattern + ", and the implementation keeps no row in the database, so its claims live in each process's memory", ""
	}
	return "", "the claim is not shared between instances (a dedup set held in process memory, or a key that includes the instance): " + pattern
}
