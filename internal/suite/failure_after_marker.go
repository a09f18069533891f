package suite

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/faults/pgproxy"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/hooks"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/shortdur"
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
	// arms plan the failure, each for an event of its own: the play
	// delivers those events side by side, each until terminal.
	arms []func(ctx context.Context, play *harness.Play, ev adapters.Event) planned
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
	// the instance's connections, in transaction blocks and outside them:
	// a cut at a transaction's point cannot fire where every statement
	// runs in autocommit.
	statements func() (inTransaction, autocommit int64)
	// unaimed, when set, says why a fault that did not fire could not be
	// aimed at the implementation at all (see notAimed), or "".
	unaimed func(context.Context) string
	// cleared, when set, ends a failure that persists and returns when
	// it has cleared (see persistentFailure); the play calls it once the
	// event's deliveries are over.
	cleared func(context.Context) (string, error)
}

// A persistent failure fails every try at the effect, or at COMMIT, for
// longer than a delivery's own retries (a retry helper's few attempts with
// backoff, Spring's @Retryable's three, an inbox library's five), so that a
// delivery that retries inside itself meets it on every try and must hand
// the event back to the broker; and it still fails the broker's next
// redeliveries, so that a consumer that counts an event's failed
// deliveries and gives up on it meets it too. Its end is decided by what
// the deliveries did, not by a clock: it lasts until persistentDeliveries
// deliveries of the event in a row (the first, with all its own retries,
// then the broker's redeliveries) have given the event back unacknowledged,
// and at most persistentOutage from its first firing, for a delivery that
// retries inside itself for longer than that (it then succeeds inside, as
// it would once a real outage cleared). The outage stays well inside the
// broker's patience (harness.DefaultRedeliveryPatience), so that the
// broker is still redelivering when it clears.
const (
	persistentDeliveries = 5
	persistentOutage     = 3 * time.Second
)

// persistentFailure fails every effect of ev at point, from the first
// delivery on, until persistentDeliveries of the event's deliveries have
// given it back or persistentOutage has passed since it first fired; then
// it is disarmed, and the broker's next redelivery meets no fault.
func persistentFailure(point faults.Point) func(context.Context, *harness.Play, adapters.Event) planned {
	return func(ctx context.Context, play *harness.Play, ev adapters.Event) planned {
		f, err := play.Arm(ctx, faults.Plan{Namespace: ev.Namespace, ID: ev.ID, Point: point, Action: faults.Raise})
		must(err)
		stop := make(chan struct{})
		done := make(chan error, 1)
		var span string
		go func() {
			done <- func() error {
				tick := time.NewTicker(firedPoll)
				defer tick.Stop()
				var firstFired time.Time
				var outage <-chan time.Time
				for {
					n, err := play.Fired(ctx, f)
					if err != nil {
						return err
					}
					if n > 0 && firstFired.IsZero() {
						firstFired = time.Now()
						t := time.NewTimer(persistentOutage)
						defer t.Stop()
						outage = t.C
					}
					if !firstFired.IsZero() {
						if back := givenBack(play.History(ev)); back >= persistentDeliveries {
							span = fmt.Sprintf("it failed every try (%d in all) until %d deliveries in a row had given the event back, %s after its first firing, then was disarmed", n, back, shortdur.Format(time.Since(firstFired).Round(time.Millisecond)))
							return play.Disarm(ctx, f)
						}
					}
					select {
					case <-ctx.Done():
						return context.Cause(ctx)
					case <-stop:
						if firstFired.IsZero() {
							return nil // the deliveries ended before it ever fired
						}
						// Nothing is delivered any more: the event's
						// deliveries ended while the fault still failed
						// every try.
						span = fmt.Sprintf("the deliveries ended %s after its first firing, while it still failed every try", shortdur.Format(time.Since(firstFired).Round(time.Millisecond)))
						return play.Disarm(ctx, f)
					case <-outage:
						span = fmt.Sprintf("it failed every try for %s from its first firing, then was disarmed", shortdur.Format(persistentOutage))
						return play.Disarm(ctx, f)
					case <-tick.C:
					}
				}
			}()
		}()
		return planned{
			what:  f.String(),
			fired: func(ctx context.Context) (int64, error) { return play.Fired(ctx, f) },
			cleared: func(ctx context.Context) (string, error) {
				close(stop)
				select {
				case err := <-done:
					return span, err
				case <-ctx.Done():
					return "", context.Cause(ctx)
				}
			},
		}
	}
}

// givenBack counts the deliveries in history that ended unacknowledged,
// one after another, since the last acknowledged or refused one.
func givenBack(history []harness.Attempt) int {
	n := 0
	for _, a := range history {
		if a.Terminal() {
			n = 0
			continue
		}
		n++
	}
	return n
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

// proxyFailure cuts instance 1's connection at a protocol point, through the
// wire proxy: a black-box fault that needs no access to the implementation's
// code and works in any language. A cut at COMMIT aims at the transaction
// that applies the effect.
func proxyFailure(at pgproxy.Point, n int) func(context.Context, *harness.Play, adapters.Event) planned {
	return func(ctx context.Context, play *harness.Play, _ adapters.Event) planned {
		proxy := play.Proxy()

		_, _ = play.Instance(ctx, 1) // built before the fault is armed
		rule := pgproxy.Rule{
			Scope: pgproxy.Scope{Client: harness.ProxyClient(1)},
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
			unaimed:    func(ctx context.Context) string { return notAimed(ctx, play, f, 1) },
		}
	}
}

// failures are the fixture's variants, by name. The catalogue lists those
// that need more than the fixture (the Go hooks need an implementation in
// the harness's process), from their requires, and decides whether they
// are played.
var failures = []failure{
	{id: "raise-at-effect", name: "an error raised at the effect", arms: one(dbFailure(faults.AtEffect, faults.Raise))},
	{id: "raise-at-commit", name: "an error raised at COMMIT", arms: one(dbFailure(faults.AtCommit, faults.Raise))},
	{id: "panic", name: "a panic in the effect", requires: []fixtures.Requirement{catalogid.NeedsInProcess}, arms: one(hookFailure(hooks.Panic))},
	{id: "cancel", name: "a cancelled context", requires: []fixtures.Requirement{catalogid.NeedsInProcess}, arms: one(hookFailure(hooks.Cancel))},
	{id: "kill-at-effect", name: "the connection killed at the effect", kills: true, arms: one(dbFailure(faults.AtEffect, faults.Terminate))},
	{id: "cut-after-statement", name: "the connection cut by the proxy after the transaction's first statement", kills: true, arms: one(proxyFailure(pgproxy.AfterStatement, 1))},
	{id: "cut-before-commit", name: "the connection cut by the proxy before COMMIT", kills: true, arms: one(proxyFailure(pgproxy.BeforeCommit, 0))},
	// Both points at once, one event each: the outage is the play's
	// cost, paid once.
	{id: "persistent", name: "an error raised at the effect, and at COMMIT, on every try for a while", arms: []func(context.Context, *harness.Play, adapters.Event) planned{
		persistentFailure(faults.AtEffect), persistentFailure(faults.AtCommit),
	}},
}

// one is the arms of a variant that fails one event.
func one(arm func(context.Context, *harness.Play, adapters.Event) planned) []func(context.Context, *harness.Play, adapters.Event) planned {
	return []func(context.Context, *harness.Play, adapters.Event) planned{arm}
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
			Doc:      "Make the transaction fail after the marker is inserted and before the effect commits (an error at the effect, an error at COMMIT, a panic in the effect, a cancelled context, the connection killed by the server or cut by the wire proxy), once, then redeliver what was not acknowledged; and make every try at the effect, or at COMMIT, fail from the first, longer than a delivery's own retries, until " + strconv.Itoa(persistentDeliveries) + " deliveries in a row have given the event back (at most " + shortdur.Format(persistentOutage) + "), while the broker redelivers. The panic and the cancelled context are Go hooks in the effect: for an implementation in another process (--exec) they are not-supported, and the other variants cover the same failure. A play whose failure never fired proves nothing and judges only what its answers and the ledger show.",
			Rules: []fixtures.Rule{
				{
					ID: failureAfterMarkerNotAcknowledged, Level: fixtures.Must,
					Doc:     "No delivery is acknowledged while the event's effect is not committed: one that meets the failure answers an error, or retries inside itself and answers Applied once its effect is committed.",
					Reason:  "An acknowledgement tells the broker the event is handled for good: an Applied or a Duplicate given while the effect rolled back, or before it is committed, loses the event, since nothing redelivers it. " + seedFailure,
					Suspect: "errors from the effect or from COMMIT are swallowed and the delivery is acknowledged anyway, or the marker is committed in its own transaction, so that a delivery that finds it answers Duplicate although the effect rolled back",
					Changed: "since 0.2.0 it judges the answers against the ledger, not whether an error came back: before, a delivery that met the fault had to return an error, which failed a correct delivery that retries inside itself and answers Applied with its effect committed.",
				},
				{
					ID: failureAfterMarkerRetryApplies, Level: fixtures.Must,
					Doc:     "After the failure, once or lasting seconds, the event ends applied exactly once: the broker's redeliveries end acknowledged, at most one delivery answered Applied, and the ledger holds one effect.",
					Reason:  seedFailure + " " + seedTogeth + " A failure can outlast a delivery's own retries: the event must still be applied when the broker redelivers it after the failure has cleared.",
					Suspect: "the marker is committed in its own transaction before the effect, so a redelivery finds it and drops the event; or a delivery gives up on its effect after its own retries while its claim stays",
					Changed: "since 0.2.0 the delivery that met the failure may be the one that answers Applied (a retry inside the delivery), and a failure that persists over " + strconv.Itoa(persistentDeliveries) + " deliveries is played too: before, the redelivery had to answer Applied.",
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
					Changed: "since 0.2.0 a play whose connection was never killed (its fault did not fire) is not-supported: before, it failed the rule.",
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

// failedEvent is what one event of a failure-after-marker play left
// behind: the failure planned for it, the delivery that met it and the
// broker's redeliveries after it, the ledger and the history.
type failedEvent struct {
	ev      adapters.Event
	what    string // the fault, in words
	fired   int64
	span    string // how a persistent failure went
	first   harness.Attempt
	tries   []harness.Attempt // first, then its redeliveries
	effects []ledger.Entry
	history []harness.Attempt
	unfired string // why the fault could not fire, when the harness can say
	unaimed string // why it could not even be aimed at the implementation (see notAimed)
}

// failEvent plans the failure arm for ev on instance 1, delivers ev, lets
// the broker redeliver it until terminal, and gathers the evidence.
func failEvent(ctx context.Context, play *harness.Play, ev adapters.Event, arm func(context.Context, *harness.Play, adapters.Event) planned) failedEvent {
	plan := arm(ctx, play, ev)
	e := failedEvent{ev: ev, what: plan.what}
	e.first = play.Deliver(ctx, 1, ev)
	if plan.settle != nil {
		must(plan.settle(ctx))
	}
	e.tries = play.RedeliverUntilTerminal(ctx, 1, ev, []harness.Attempt{e.first})
	var err error
	if plan.cleared != nil {
		e.span, err = plan.cleared(ctx)
		must(err)
	}
	e.fired, err = plan.fired(ctx)
	must(err)
	e.effects, err = play.Effects(ctx, ev)
	must(err)
	e.history = play.History(ev)
	if e.fired == 0 && plan.unaimed != nil {
		e.unaimed = plan.unaimed(ctx)
	}
	if e.fired == 0 && e.unaimed == "" && plan.statements != nil {
		if inTx, auto := plan.statements(); inTx == 0 && auto > 0 {
			e.unfired = fmt.Sprintf("no transaction was ever opened on instance 1's connections: the wire proxy saw %d statements there, each in autocommit, and none in a transaction block, so there was no transaction to cut", auto)
		}
	}
	return e
}

// describe is the event's evidence for a failure message.
func (e failedEvent) describe() string {
	d := harness.DescribeEvent(e.ev, e.effects, e.history) + fmt.Sprintf("\nfault %s fired %s", e.what, harness.Times(e.fired))
	if e.span != "" {
		d += ": " + e.span
	}
	return d
}

// outcome says, for a rule that held, how the failure went.
func (e failedEvent) outcome() string {
	last := e.tries[len(e.tries)-1]
	if len(e.tries) == 1 {
		return fmt.Sprintf("fault %s fired %s; the delivery that met it answered %s", e.what, harness.Times(e.fired), last.Result())
	}
	return fmt.Sprintf("fault %s fired %s; %d deliveries, the last answered %s", e.what, harness.Times(e.fired), len(e.tries), last.Result())
}

// judge judges a rule on the events of a play by what their answers and
// the ledger show (problems finds an event's violations; hint guesses at
// their cause). A fault that did not fire exercised nothing: the event
// then fails the rule only where its outcome is wrong anyway, and is
// otherwise left out, saying why; a play none of whose faults fired is
// not-supported.
func (s *state) judgeFailures(events []failedEvent, problems func(failedEvent) []string, hint func(failedEvent) string) judgement {
	var found, notes, unfired []string
	var hints []string
	for _, e := range events {
		p := problems(e)
		switch {
		case len(p) > 0:
			if e.fired == 0 {
				p = append([]string{fmt.Sprintf("the planned fault (%s) did not fire, and still:", e.what)}, p...)
			}
			p[len(p)-1] += "\n" + e.describe()
			found = append(found, p...)
			if h := hint(e); h != "" && !slices.Contains(hints, h) {
				hints = append(hints, h)
			}
		case e.unaimed != "":
			unfired = append(unfired, e.unaimed)
		case e.fired == 0:
			unfired = append(unfired, s.unfiredReason(e.what, e.unfired, e.first, e.tries, e.effects))
		default:
			notes = append(notes, e.outcome())
		}
	}
	switch {
	case len(found) > 0:
		return judgement{problems: found, hint: strings.Join(hints, "; or ")}
	case len(notes) == 0:
		return notSupported(strings.Join(unfired, "; "))
	case len(unfired) > 0:
		notes = append(notes, "partly inconclusive: "+strings.Join(unfired, "; "))
	}
	return judgement{note: strings.Join(notes, "; ")}
}

func (s *state) failureAfterMarker() {
	s.describeFixture(failureAfterMarkerID, func() {
		for i, f := range failures {
			s.group(f.id, f.name, func() {
				var (
					events  []failedEvent
					after   = newEvent(failureAfterMarkerID, fmt.Sprintf("%d-after", i+1))
					next    []harness.Attempt
					nextFx  []ledger.Entry
					skip    string
					crashes []string
				)
				// One instance to build; the failing deliveries, side by
				// side, their redeliveries until terminal and, after a
				// killed connection, a new event until terminal.
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
					events = make([]failedEvent, len(f.arms))
					var wg sync.WaitGroup
					for k, arm := range f.arms {
						id := fmt.Sprint(i + 1)
						if len(f.arms) > 1 {
							id += fmt.Sprintf("-%d", k+1)
						}
						wg.Go(func() {
							defer s.recoverGather(ctx)
							events[k] = failEvent(ctx, play, newEvent(failureAfterMarkerID, id), arm)
						})
					}
					wg.Wait()
					if f.kills {
						next = play.DeliverUntilTerminal(ctx, 1, after)
						var err error
						nextFx, err = play.Effects(ctx, after)
						must(err)
						crashes = play.CrashesOf(1)
					}
				})

				fired := func() bool {
					return slices.ContainsFunc(events, func(e failedEvent) bool { return e.fired > 0 })
				}
				noHint := func(failedEvent) string { return "" }
				pn.judgedRule(failureAfterMarkerNotAcknowledged, func() judgement {
					if skip != "" {
						return notSupported(skip)
					}
					return s.judgeFailures(events, func(e failedEvent) []string {
						if p := unbackedProblem(e.history); p != "" {
							return []string{p}
						}
						return nil
					}, func(e failedEvent) string { return answersHint(e.tries, e.history, len(e.effects)) })
				})
				pn.judgedRule(failureAfterMarkerRetryApplies, func() judgement {
					if skip != "" {
						return notSupported(skip)
					}
					return s.judgeFailures(events, func(e failedEvent) []string { return appliedOnce(e.tries, e.effects) },
						func(e failedEvent) string { return answersHint(e.tries, e.history, len(e.effects)) })
				})
				if f.kills {
					pn.judgedRule(failureAfterMarkerSurvivesKilledConnection, func() judgement {
						if skip != "" {
							return notSupported(skip)
						}
						j := s.judgeFailures(events, func(e failedEvent) []string {
							last := next[len(next)-1]
							if last.Acked() && last.Outcome == adapters.Applied && len(nextFx) == 1 {
								return nil
							}
							when := fmt.Sprintf("after its connection was killed (%s)", e.what)
							if e.fired == 0 {
								when = "after the play, whose fault did not fire"
							}
							return []string{fmt.Sprintf("%s, instance 1 handled a new event badly\n%s",
								when, harness.DescribeEvent(after, nextFx, next))}
						}, noHint)
						j.note = "" // the killed event's outcome is the other rules'
						return j
					})
					pn.judgedRule(failureAfterMarkerProcessSurvivesKilledConnection, func() judgement {
						switch {
						case skip != "":
							return notSupported(skip)
						case len(crashes) > 0 && fired():
							return judgement{leadless: true, problems: []string{fmt.Sprintf("after its connection was killed (%s), instance 1's process crashed %s and was restarted, as a supervisor would; the first crash: %s",
								events[0].what, harness.Times(len(crashes)), crashes[0])}}
						}
						j := s.judgeFailures(events, func(failedEvent) []string { return nil }, noHint)
						j.note = ""
						return j
					})
				}
			})
		}
	})
}

// unfiredReason says why a failure-after-marker play whose fault did not
// fire proves nothing, from what it saw: why the fault could not fire,
// when the harness knows (why), else how the event's deliveries went.
// Its words state only that: a fault that did not fire is no evidence
// against the implementation.
func (s *state) unfiredReason(what, why string, first harness.Attempt, tries []harness.Attempt, effects []ledger.Entry) string {
	msg := fmt.Sprintf("inconclusive: the planned fault (%s) did not fire, so this play exercised no failure", what)
	if why != "" {
		return msg + ": " + why + "; this variant cannot test such an implementation"
	}
	last := tries[len(tries)-1]
	switch {
	case len(effects) == 0:
		return msg + fmt.Sprintf("; no effect of the event was applied, and the last of %d deliveries answered %s", len(tries), last.Result())
	default:
		return msg + fmt.Sprintf("; attempt %d answered %s, and the ledger holds %s of the event, applied where the fault was not planned to meet it", first.Delivery.Attempt, first.Result(), effectCount(len(effects)))
	}
}
