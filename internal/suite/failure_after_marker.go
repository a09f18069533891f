package suite

import (
	"context"
	"fmt"
	"slices"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/faults/pgproxy"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/hooks"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// failure is one way the first delivery's transaction fails after its marker
// was inserted and before its effect commits.
type failure struct {
	// id is the variant's short stable id in the tree, name its name in
	// messages.
	id, name string
	// kills reports whether the failure kills the delivery's connection.
	kills bool
	// requires is what the variant needs beyond the fixture: the catalogue
	// lists the variants that need anything (failureVariants).
	requires []fixtures.Requirement
	// arm plans the failure for attempt 1 of ev.
	arm func(ctx context.Context, play *harness.Play, ev adapters.Event) planned
}

// planned is an armed failure.
type planned struct {
	// what describes the fault.
	what string
	// fired reports how often it fired.
	fired func(context.Context) (int64, error)
	// settle, when set, waits until the fault's effects on the server are
	// over, before the event is redelivered.
	settle func(context.Context) error
	// statements, when set, counts the statements the wire proxy saw on
	// the worker's connections, in transaction blocks and outside them: a
	// cut at a transaction's point cannot fire where every statement runs
	// in autocommit.
	statements func() (inTransaction, autocommit int64)
}

func dbFailure(point faults.Point, action faults.Action) func(context.Context, *harness.Play, adapters.Event) planned {
	return func(ctx context.Context, play *harness.Play, ev adapters.Event) planned {
		f, err := play.Arm(ctx, faults.Plan{Namespace: ev.Namespace, ID: ev.ID, Times: 1, Point: point, Action: action})
		must(err)
		return planned{what: f.String(), fired: func(ctx context.Context) (int64, error) { return play.Fired(ctx, f) }}
	}
}

func hookFailure(action hooks.Action) func(context.Context, *harness.Play, adapters.Event) planned {
	return func(_ context.Context, play *harness.Play, ev adapters.Event) planned {
		f := play.Hooks().Arm(hooks.Plan{Namespace: ev.Namespace, ID: ev.ID, Times: 1, Action: action})
		return planned{what: f.String(), fired: f.Fired}
	}
}

// proxyFailure cuts worker 1's connection at a protocol point, through the
// wire proxy: a black-box fault that needs no access to the implementation's
// code and works in any language. A cut at COMMIT aims at the transaction
// that applies the effect.
func proxyFailure(at pgproxy.Point, n int) func(context.Context, *harness.Play, adapters.Event) planned {
	return func(ctx context.Context, play *harness.Play, _ adapters.Event) planned {
		proxy, err := play.UseProxy(ctx)
		must(err)
		_, _ = play.Instance(ctx, 1) // built before the fault is armed
		rule := pgproxy.Rule{
			Scope: pgproxy.Scope{ApplicationNamePrefix: play.AppNamePrefix() + "w1"},
			At:    at, N: n, Action: pgproxy.Cut, Times: 1,
		}
		if at != pgproxy.AfterStatement {
			rule.Within = ledger.TableName
		}
		f, err := proxy.Arm(rule)
		must(err)
		return planned{
			what:       f.String(),
			fired:      f.Fired,
			settle:     func(ctx context.Context) error { return play.WaitCut(ctx, f) },
			statements: f.Statements,
		}
	}
}

// failures are the fixture's variants, by name. The catalogue lists those
// that need more than the fixture (the Go hooks need an implementation in
// the harness's process), from their requires, and decides whether they
// are played.
var failures = []failure{
	{id: "raise-at-effect", name: "an error raised at the effect", arm: dbFailure(faults.AtEffect, faults.Raise)},
	{id: "raise-at-commit", name: "an error raised at COMMIT", arm: dbFailure(faults.AtCommit, faults.Raise)},
	{id: "panic", name: "a panic in the effect", requires: []fixtures.Requirement{catalogid.NeedsInProcess}, arm: hookFailure(hooks.Panic)},
	{id: "cancel", name: "a cancelled context", requires: []fixtures.Requirement{catalogid.NeedsInProcess}, arm: hookFailure(hooks.Cancel)},
	{id: "kill-at-effect", name: "the connection killed at the effect", kills: true, arm: dbFailure(faults.AtEffect, faults.Terminate)},
	{id: "cut-after-statement", name: "the connection cut by the proxy after the transaction's first statement", kills: true, arm: proxyFailure(pgproxy.AfterStatement, 1)},
	{id: "cut-before-commit", name: "the connection cut by the proxy before COMMIT", kills: true, arm: proxyFailure(pgproxy.BeforeCommit, 0)},
}

// The ids of the fixture and its rules, written once, here: the
// catalogue and internal/catalogid are generated from the definition
// below. They are stable: labels, reports and other tools use them.
const (
	failureAfterMarkerID = "failure-after-marker"

	failureAfterMarkerNotAcknowledged                 = "failure-after-marker.not-acknowledged"
	failureAfterMarkerRetryApplies                    = "failure-after-marker.retry-applies"
	failureAfterMarkerSurvivesKilledConnection        = "failure-after-marker.survives-killed-connection"
	failureAfterMarkerProcessSurvivesKilledConnection = "failure-after-marker.process-survives-killed-connection"
)

// failureAfterMarkerDefinition is the fixture's catalogue entry, with
// its rules' reasons and usual suspects, and its page in docs/.
func failureAfterMarkerDefinition() Definition {
	return Definition{
		Page: DocPage{File: "failures.md", Title: "failures around the commit"},
		Fixture: fixtures.Fixture{
			ID:       failureAfterMarkerID,
			Variants: failureVariants(),
			Doc:      "Make the transaction fail after the marker is inserted and before the effect commits (an error at the effect, an error at COMMIT, a panic in the effect, a cancelled context, the connection killed by the server or cut by the wire proxy), then redeliver. The panic and the cancelled context are Go hooks in the effect: for an implementation in another process (--exec) they are not-supported, and the other variants cover the same failure.",
			Rules: []fixtures.Rule{
				{
					ID: failureAfterMarkerNotAcknowledged, Level: fixtures.Must,
					Doc:     "A delivery whose transaction failed is not acknowledged: it returns an error.",
					Reason:  "An acknowledged delivery is never redelivered; acknowledging a rolled-back delivery loses the event.",
					Suspect: "errors from the effect or from COMMIT are swallowed and the delivery is acknowledged anyway",
				},
				{
					ID: failureAfterMarkerRetryApplies, Level: fixtures.Must,
					Doc:     "The redelivery after the failure is Applied and the ledger ends with exactly one effect.",
					Reason:  seedFailure + " " + seedTogeth,
					Suspect: "the marker is committed in its own transaction before the effect, so the retry finds it and drops the event",
				},
				{
					ID: failureAfterMarkerSurvivesKilledConnection, Level: fixtures.Must,
					Doc:     "After its connection was killed mid-transaction, the same instance still applies new events.",
					Reason:  "Connections die in production; a consumer that cannot recover from one stops processing everything after it.",
					Suspect: "a broken connection is kept and reused, or a transaction is left open on it",
				},
				{
					ID: failureAfterMarkerProcessSurvivesKilledConnection, Level: fixtures.Should,
					Doc:     "When its connection is killed mid-transaction, the implementation's process survives: it reports the error and goes on, and no supervisor has to restart it.",
					Reason:  "A supervisor restarts a consumer that dies, and the broker redelivers what it had in flight, so a crash loses nothing the MUST rules judge; but every crash drops the work of every delivery the process had in flight, and a process that dies on every lost connection turns a database failover into a crash loop. node-postgres, for one, kills the process on an 'error' event nobody listens to, on the pool or on a checked-out client.",
					Suspect: "an error event with no listener (node-postgres's pool, or a client checked out of it), or an exception that escapes the handler",
				},
			},
		},
	}
}

// failureVariants are the failures the catalogue lists: those that need
// more than the fixture.
func failureVariants() []fixtures.Variant {
	var vs []fixtures.Variant
	for _, f := range failures {
		if len(f.requires) > 0 {
			vs = append(vs, fixtures.Variant{ID: f.id, Name: f.name, Requires: slices.Clone(f.requires)})
		}
	}
	return vs
}

func (s *state) failureAfterMarker() {
	s.describeFixture(failureAfterMarkerID, func() {
		for i, f := range failures {
			s.group(f.id, f.name, func() {
				var (
					ev              = newEvent(failureAfterMarkerID, fmt.Sprint(i+1))
					after           = newEvent(failureAfterMarkerID, fmt.Sprintf("%d-after", i+1))
					what            string
					fired           int64
					first           harness.Attempt
					tries, next     []harness.Attempt // tries: first, then its redeliveries
					effects, nextFx []ledger.Entry
					history         []harness.Attempt
					skip            string
					unfired         string // why every rule of the play is not-supported, or fails, when the fault did not fire
					crashes         []string
				)
				// One instance to build; the failing delivery, its
				// redeliveries until terminal and, after a killed
				// connection, a new event until terminal.
				pn := s.play(failureAfterMarkerID+" / "+f.name, work{calls: 1}.plus(untilTerminal(2)))
				pn.gather(func(ctx context.Context) {
					play := pn.begin(ctx)
					// Only an instance knows where it applies the effect;
					// one that cannot be built fails its first delivery
					// below, as before.
					var impl adapters.Implementation
					if listsVariant(failureAfterMarkerID, f.id) {
						if built, err := play.Instance(ctx, 1); err == nil {
							impl = built
						}
					}
					if skip = s.applies(failureAfterMarkerID, impl).Excludes(f.id); skip != "" {
						return
					}
					plan := f.arm(ctx, play, ev)
					what = plan.what
					first = play.Deliver(ctx, 1, ev)
					if plan.settle != nil {
						must(plan.settle(ctx))
					}
					tries = play.RedeliverUntilTerminal(ctx, 1, ev, []harness.Attempt{first})
					var err error
					fired, err = plan.fired(ctx)
					must(err)
					effects, err = play.Effects(ctx, ev)
					must(err)
					history = play.History(ev)
					if fired == 0 && plan.statements != nil {
						if inTx, auto := plan.statements(); inTx == 0 && auto > 0 {
							unfired = fmt.Sprintf("inconclusive: the planned fault (%s) did not fire, because no transaction was ever opened on worker 1's connections: the wire proxy saw %d statements there, each in autocommit, and none in a transaction block, so there was no transaction to cut; this variant cannot test such an implementation", what, auto)
						}
					}
					if f.kills {
						next = play.DeliverUntilTerminal(ctx, 1, after)
						nextFx, err = play.Effects(ctx, after)
						must(err)
						crashes = play.CrashesOf(1)
					}
				})

				// notFired judges a play whose fault did not fire: it is
				// inconclusive where the implementation gave the fault no
				// chance that is not a failure (it opened no transaction);
				// else what the deliveries show fails every rule.
				notFired := func() judgement {
					if skip != "" {
						return notSupported(skip)
					}
					if fired > 0 {
						return judgement{}
					}
					if unfired != "" {
						return notSupported(unfired)
					}
					last := tries[len(tries)-1]
					var seen string
					switch {
					case !last.Terminal():
						seen = fmt.Sprintf("no delivery of the event was acknowledged: it ended %s after %d deliveries, none of which reached the point where the fault was planned", last.Result(), len(tries))
					case len(effects) == 0:
						seen = fmt.Sprintf("attempt 1 ended %s without applying the effect, the point where the fault was planned, though the event was new", first.Result())
					default:
						seen = fmt.Sprintf("attempt 1 ended %s and the ledger holds %d effects, yet the effect never reached the point where the fault was planned", first.Result(), len(effects))
					}
					return judgement{problems: []string{fmt.Sprintf("the planned fault (%s) did not fire: %s\n%s", what, seen, harness.DescribeEvent(ev, effects, history))}}
				}

				pn.judgedRule(failureAfterMarkerNotAcknowledged, func() judgement {
					if j := notFired(); j.final() {
						return j
					}
					if first.Acked() {
						return judgement{problems: []string{fmt.Sprintf("fault %s fired, yet attempt 1 was acknowledged as %s\n%s",
							what, first.Outcome, harness.DescribeEvent(ev, effects, history))}}
					}
					return judgement{}
				})
				pn.judgedRule(failureAfterMarkerRetryApplies, func() judgement {
					if j := notFired(); j.final() {
						return j
					}
					last := tries[len(tries)-1]
					if len(tries) > 1 && last.Acked() && last.Outcome == adapters.Applied && len(effects) == 1 {
						return judgement{}
					}
					then := fmt.Sprintf("then the redelivery ended %s (expected Applied)", last.Result())
					if len(tries) == 1 {
						then = fmt.Sprintf("attempt 1 was acknowledged as %s, so the broker redelivered nothing", last.Outcome)
					}
					return judgement{problems: []string{fmt.Sprintf("fault %s fired %s; %s, and the ledger holds %d effects (expected 1)\n%s",
						what, harness.Times(fired), then, len(effects), harness.DescribeEvent(ev, effects, history))}}
				})
				if f.kills {
					pn.judgedRule(failureAfterMarkerSurvivesKilledConnection, func() judgement {
						if j := notFired(); j.final() {
							return j
						}
						last := next[len(next)-1]
						if last.Acked() && last.Outcome == adapters.Applied && len(nextFx) == 1 {
							return judgement{}
						}
						return judgement{problems: []string{fmt.Sprintf("after its connection was killed (%s), worker 1 handled a new event badly\n%s",
							what, harness.DescribeEvent(after, nextFx, next))}}
					})
					pn.judgedRule(failureAfterMarkerProcessSurvivesKilledConnection, func() judgement {
						if j := notFired(); j.final() {
							return j
						}
						if len(crashes) == 0 {
							return judgement{}
						}
						return judgement{leadless: true, problems: []string{fmt.Sprintf("after its connection was killed (%s), worker 1's process crashed %s and was restarted, as a supervisor would; the first crash: %s",
							what, harness.Times(len(crashes)), crashes[0])}}
					})
				}
			})
		}
	})
}
