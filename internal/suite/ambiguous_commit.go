package suite

import (
	"context"
	"fmt"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults/pgproxy"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// proxyCut is the evidence of one delivery whose connection the proxy cut,
// and of what followed.
type proxyCut struct {
	ev      adapters.Event
	fault   *pgproxy.Fault
	fired   int64
	first   harness.Attempt
	tries   []harness.Attempt // first, then its redeliveries
	effects []ledger.Entry
	history []harness.Attempt
	unaimed string // why the fault could not be aimed at the implementation, see notAimed
}

// cutDelivery arms rule on the play's proxy for instance 1's connections,
// delivers ev once, waits until the cut backends are gone, and redelivers ev
// to the same instance until terminal, as a broker does after an error.
func (s *state) cutDelivery(ctx context.Context, play *harness.Play, ev adapters.Event, at pgproxy.Point, n int) proxyCut {
	proxy := play.Proxy()
	// Build the instance first: whatever it does at construction is not part
	// of the fault.
	_, _ = play.Instance(ctx, 1)
	c := proxyCut{ev: ev}
	var err error
	c.fault, err = proxy.Arm(pgproxy.Rule{
		Scope:  pgproxy.Scope{Client: harness.ProxyClient(1)},
		At:     at,
		N:      n,
		Action: pgproxy.Cut,
		Times:  1,
		// The transaction that applies the effect: an implementation
		// that commits its claim or a lease on its own first must not
		// have that COMMIT taken for the effect's.
		Within: ledger.TableName,
	})
	must(err)
	c.first = play.Deliver(ctx, 1, ev)
	c.fired, err = c.fault.Fired(ctx)
	must(err)
	c.unaimed = notAimed(ctx, play, c.fault, 1)
	must(play.WaitCut(ctx, c.fault), "wait for the cut backend to end")
	c.tries = play.RedeliverUntilTerminal(ctx, 1, ev, []harness.Attempt{c.first})
	c.effects, err = play.Effects(ctx, ev)
	must(err)
	c.history = play.History(ev)
	return c
}

// judge judges the cut by what the answers and the ledger show: the
// event ends applied exactly once (see appliedOnce), and no delivery was
// acknowledged while no effect of the event was committed. How the
// implementation got there, whether the delivery that met the cut
// returned an error or retried inside itself, is its own business. A cut
// that did not fire exercised nothing: the play then fails the rule only
// where the outcome is wrong anyway, and is otherwise not-supported.
func (c proxyCut) judge() judgement {
	var problems []string
	if p := unbackedProblem(c.history); p != "" {
		problems = append(problems, p)
	}
	problems = append(problems, appliedOnce(c.tries, c.effects)...)
	describe := harness.DescribeEvent(c.ev, c.effects, c.history) + fmt.Sprintf("\nfault %s fired %s", c.fault, harness.Times(c.fired))
	if len(problems) > 0 {
		if c.fired == 0 {
			problems = append([]string{fmt.Sprintf("the planned fault (%s) did not fire, and still:", c.fault)}, problems...)
		}
		problems[len(problems)-1] += "\n" + describe
		return judgement{problems: problems, hint: answersHint(c.tries, c.history, len(c.effects))}
	}
	switch {
	case c.unaimed != "":
		return notSupported(c.unaimed)
	case c.fired == 0:
		return notSupported(fmt.Sprintf("inconclusive: the planned fault (%s) did not fire, so this play exercised no lost COMMIT answer: attempt %d answered %s and the ledger holds %s of the event",
			c.fault, c.first.Delivery.Attempt, c.first.Result(), effectCount(len(c.effects))))
	}
	last := c.tries[len(c.tries)-1]
	if len(c.tries) == 1 {
		return judgement{note: fmt.Sprintf("fault %s fired; the delivery that met it answered %s, with the one effect committed", c.fault, last.Result())}
	}
	return judgement{note: fmt.Sprintf("fault %s fired; attempt %d answered %s, and the redelivery %s", c.fault, c.first.Delivery.Attempt, c.first.Result(), last.Result())}
}

// The ids of the fixture and its rules, written once, here: the
// catalogue and internal/catalogid are generated from the definition
// below. They are stable: labels, reports and other tools use them.
const (
	ambiguousCommitID = "ambiguous-commit"

	ambiguousCommitRedeliveryDuplicate = "ambiguous-commit.redelivery-duplicate"
	ambiguousCommitLostCommitApplies   = "ambiguous-commit.lost-commit-applies"
)

// ambiguousCommitDefinition is the fixture's catalogue entry, with
// its rules' reasons and usual suspects, and its page in docs/.
func ambiguousCommitDefinition() Definition {
	return Definition{
		Page: DocPage{File: "failures.md", Title: "failures around the commit"},
		Fixture: fixtures.Fixture{
			ID:  ambiguousCommitID,
			Doc: "Put a wire-protocol proxy between the implementation and the server. Cut the connection after the server answered COMMIT and before the implementation sees the answer (the ambiguous commit: committed, but the implementation gets an error), then redeliver. Also cut it before COMMIT is forwarded (the server rolls back), then redeliver.",
			Rules: []fixtures.Rule{
				{
					ID: ambiguousCommitRedeliveryDuplicate, Level: fixtures.Must,
					Doc:     "After an ambiguous commit (committed, its answer lost), the event ends with one effect and every answer fits it: none acknowledged without the effect, none Applied twice, and a redelivery recognises the event.",
					Reason:  "The commonest real source of duplicates: the server committed, the acknowledgement never reached the consumer, the broker redelivers. The marker committed with the effect is what makes the redelivery harmless. " + seedTogeth,
					Suspect: "the marker and the effect are committed in separate transactions, so a lost COMMIT answer leaves one without the other",
					Changed: "since 0.2.0 the delivery that met the cut may answer Applied, having made sure its own COMMIT landed (a retry inside the delivery that reads back a claim token), and a redelivery may answer Applied when no delivery before it was acknowledged: before, the cut delivery had to return an error and the redelivery answer Duplicate.",
				},
				{
					ID: ambiguousCommitLostCommitApplies, Level: fixtures.Must,
					Doc:     "When the connection is cut before COMMIT reaches the server, the event ends applied exactly once: no delivery is acknowledged without its effect, and one, retrying inside itself or redelivered, applies it.",
					Reason:  seedFailure + " A COMMIT whose answer was lost may not have happened: an implementation that takes it for a success acknowledges an event it never applied.",
					Suspect: "part of the work committed earlier, in a transaction of its own, so the retry finds a marker without its effect; or an error at COMMIT taken for a success",
					Changed: "since 0.2.0 the delivery that met the cut may be the one that answers Applied (a retry inside the delivery), and no acknowledgement may come while no effect is committed: before, the redelivery had to answer Applied.",
				},
			},
		},
	}
}

func (s *state) ambiguousCommit() {
	s.describeFixture(ambiguousCommitID, func() {
		var committed, rolledBack proxyCut
		// One instance to build; two cuts, each a delivery and then
		// redeliveries until terminal.
		pn := s.play(ambiguousCommitID, work{calls: 1}.plus(untilTerminal(2)))
		pn.gather(func(ctx context.Context) {
			play := pn.begin(ctx)
			pn.at("the cut after COMMIT's answer")
			committed = s.cutDelivery(ctx, play, newEvent(ambiguousCommitID, "after-commit"), pgproxy.AfterCommitComplete, 0)
			pn.at("the cut before COMMIT")
			rolledBack = s.cutDelivery(ctx, play, newEvent(ambiguousCommitID, "before-commit"), pgproxy.BeforeCommit, 0)
		})

		// Closures: the cuts are gathered after the rules are added.
		pn.judgedRule(ambiguousCommitRedeliveryDuplicate, func() judgement { return committed.judge() })
		pn.judgedRule(ambiguousCommitLostCommitApplies, func() judgement { return rolledBack.judge() })
	})
}
