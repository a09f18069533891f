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
}

// cutDelivery arms rule on the play's proxy for worker 1's connections,
// delivers ev once, waits until the cut backends are gone, and redelivers ev
// to the same worker until terminal, as a broker does after an error.
func (s *state) cutDelivery(ctx context.Context, play *harness.Play, ev adapters.Event, at pgproxy.Point, n int) proxyCut {
	proxy, err := play.UseProxy(ctx)
	must(err)
	// Build the worker first: whatever it does at construction is not part
	// of the fault.
	_, _ = play.Instance(ctx, 1)
	c := proxyCut{ev: ev}
	c.fault, err = proxy.Arm(pgproxy.Rule{
		Scope:  pgproxy.Scope{ApplicationNamePrefix: play.AppNamePrefix() + "w1"},
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
	must(play.WaitCut(ctx, c.fault), "wait for the cut backend to end")
	c.tries = play.RedeliverUntilTerminal(ctx, 1, ev, []harness.Attempt{c.first})
	c.effects, err = play.Effects(ctx, ev)
	must(err)
	c.history = play.History(ev)
	return c
}

// check judges the cut: the fault must have fired, and the redelivery must
// end with want and exactly one effect.
func (c proxyCut) check(want adapters.Outcome) []string {
	describe := harness.DescribeEvent(c.ev, c.effects, c.history)
	if c.fired == 0 {
		last := c.tries[len(c.tries)-1]
		seen := fmt.Sprintf("attempt 1 ended %s without a statement that applies the effect reaching that point", c.first.Result())
		if !last.Terminal() {
			seen = fmt.Sprintf("no delivery of the event was acknowledged (the last of %d ended %s), and none applied the effect", len(c.tries), last.Result())
		}
		return []string{fmt.Sprintf("the planned fault (%s) did not fire: %s\n%s", c.fault, seen, describe)}
	}
	last := c.tries[len(c.tries)-1]
	if len(c.tries) > 1 && last.Acked() && last.Outcome == want && len(c.effects) == 1 {
		return nil
	}
	then := fmt.Sprintf("then the redelivery ended %s (expected %s)", last.Result(), want)
	if len(c.tries) == 1 {
		then = "so the broker redelivered nothing: the implementation said it had handled the event when it could not know whether its COMMIT had been applied"
	}
	return []string{fmt.Sprintf("fault %s fired; attempt 1 ended %s; %s, and the ledger holds %d effects (expected 1)\n%s",
		c.fault, c.first.Result(), then, len(c.effects), describe)}
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
					Doc:     "After an ambiguous commit, the redelivery is Duplicate and the ledger holds exactly one effect.",
					Reason:  "The commonest real source of duplicates: the server committed, the acknowledgement never reached the consumer, the broker redelivers. The marker committed with the effect is what makes the redelivery harmless. " + seedTogeth,
					Suspect: "the marker and the effect are committed in separate transactions, so a lost COMMIT answer leaves one without the other",
				},
				{
					ID: ambiguousCommitLostCommitApplies, Level: fixtures.Must,
					Doc:     "When the connection is cut before COMMIT reaches the server, the redelivery is Applied and the ledger holds exactly one effect.",
					Reason:  seedFailure,
					Suspect: "part of the work committed earlier, in a transaction of its own, so the retry finds a marker without its effect",
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

		pn.rule(ambiguousCommitRedeliveryDuplicate, func() []string { return committed.check(adapters.Duplicate) })
		pn.rule(ambiguousCommitLostCommitApplies, func() []string { return rolledBack.check(adapters.Applied) })
	})
}
