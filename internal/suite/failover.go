package suite

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// The ids of the fixture and its rules, written once, here: the
// catalogue and internal/catalogid are generated from the definition
// below. They are stable: labels, reports and other tools use them.
const (
	failoverID = "failover"

	failoverAcknowledgedSurvives = "failover.acknowledged-survives"
	failoverExactlyOnce          = "failover.exactly-once"
	failoverFollowsPrimary       = "failover.follows-primary"
	failoverReappliedAfterLoss   = "failover.reapplied-after-loss"
)

// failoverDefinition is the fixture's catalogue entry, with its rules'
// reasons and usual suspects, and its page in docs/.
func failoverDefinition() Definition {
	return Definition{
		Page: DocPage{File: "failover.md", Title: "failover on a replicated formation"},
		Fixture: fixtures.Fixture{
			ID: failoverID,
			Doc: "On a replicated formation (a primary and a synchronous standby run by an HA engine), acknowledge some events and hold others in flight inside their transactions, at the effect and at COMMIT, on two instances; " +
				"then fail the primary over, by the engine's own command or by a hard kill while the standby lags on purpose. " +
				"Redeliver everything unacknowledged until acknowledged, every acknowledged event once more, then a new event to each instance. " +
				"A last variant makes the replication asynchronous and reports what the deployment would lose.",
			Rules: []fixtures.Rule{
				{
					ID: failoverAcknowledgedSurvives, Level: fixtures.Must,
					Doc: "Every delivery acknowledged (Applied or Duplicate) before the failover has its effect on the new primary.",
					Reason: "An acknowledgement tells the broker to forget the event: an effect lost with the old primary is never redelivered. " +
						"On a formation a commit is durable only once the standby has it, which synchronous replication waits for; an implementation must not acknowledge sooner. " + seedTogeth,
					Suspect: "the implementation's sessions commit without waiting for the standby (synchronous_commit set to local or off), or a delivery is acknowledged before its transaction commits",
				},
				{
					ID: failoverExactlyOnce, Level: fixtures.Must,
					Doc: "After all redeliveries, every event has exactly one effect, and every answer fitted the ledger when it was given: no Applied or Duplicate without a committed effect, no Rejected from the delivery that applied it.",
					Reason: "A failover ends every connection to the old primary at an arbitrary point, COMMIT included: the implementation sees errors whose outcome it cannot know, and the broker redelivers. " +
						seedTwice,
					Suspect: "the marker and the effect are not claimed in one transaction, or a failed COMMIT is taken for a rollback or for a success without asking the database",
					Changed: "since 0.2.0 each answer is judged against the ledger when it was given: no Applied or Duplicate while no effect is committed; the delivery that applied the effect may answer Duplicate (a retry inside the delivery that finds it committed), and a later one may answer Applied. Before, the delivery that applied the effect had to answer Applied.",
				},
				{
					ID: failoverFollowsPrimary, Level: fixtures.Must,
					Doc: "After the failover, each instance applies a new event within the broker's patience, without being restarted.",
					Reason: "After a failover the old primary is gone or read-only. A consumer that keeps connecting to it acknowledges nothing until someone restarts it, while the broker's backlog grows. " +
						"The connection string names every host, with target_session_attrs=read-write, for the driver to find the new primary.",
					Suspect: "only the first host of the connection string is used (a configuration with one host and port, a driver that does not read multi-host strings), or target_session_attrs is dropped, so connections land on the old primary",
				},
				{
					ID: failoverReappliedAfterLoss, Level: fixtures.Should,
					Doc: "With asynchronous replication, a redelivery of an event whose marker and effect the failover lost is applied again.",
					Reason: "Asynchronous replication loses acknowledged commits on a failover: that is the database's configuration, which the variant reports and does not judge. " +
						"What happens next is the implementation's: deciding from the database, it applies a lost event again when the event is redelivered; deciding from a cache in front of it, it answers Duplicate and the event is lost for good.",
					Suspect: "a cache of claimed identities (in process, or in a store of its own) answers before the database is asked",
				},
			},
			Requires: []fixtures.Requirement{catalogid.NeedsFormation},
		},
	}
}

// Numbers of the failover fixture.
const (
	// failoverSettled is how many events are acknowledged before the
	// failover, delivered all at once over two instances.
	failoverSettled = 8
	// failoverLagging is how many events are delivered, all at once over
	// two instances, while the standby lags.
	failoverLagging = 4
	// lagWindowMin is the least the lagging deliveries get before the
	// primary is killed: a COMMIT that does not wait for the standby
	// returns far sooner. The HA engine was measured not to react to the
	// stalled replication for 11 s, so the window is safe well past this.
	lagWindowMin = time.Second
	// lagWindowMax bounds it on a slow machine.
	lagWindowMax = 4 * time.Second
	// failoverWaits is what a play's budget allows for restoring the
	// formation, failing it over and restoring it again.
	failoverWaits = 4 * time.Minute
)

// failoverWay is one way the fixture fails the primary over.
type failoverWay struct {
	// id is the variant's short stable id in the tree, name its name in
	// messages.
	id, name string
	kind     provision.FailoverKind
	// lag makes the standby lag on purpose before the failover, so that a
	// commit that did not wait for it is lost.
	lag bool
}

var failoverWays = []failoverWay{
	{id: "controlled", name: "a controlled failover (the HA engine's own command)", kind: provision.FailoverControlled},
	{id: "hard-kill", name: "a hard kill of the primary while its standby lags", kind: provision.FailoverHardKill, lag: true},
}

func (s *state) failover() {
	s.describeFixture(failoverID, func() {
		for _, w := range failoverWays {
			s.failoverSync(w)
		}
		s.failoverAsync()
	})
}

// failoverEvents makes n events of the fixture, named prefix-1 to
// prefix-n, spread over the two instances.
func failoverEvents(prefix string, n int) []*inFlight {
	fs := make([]*inFlight, n)
	for i := range fs {
		fs[i] = &inFlight{ev: newEvent(failoverID, fmt.Sprintf("%s-%d", prefix, i+1)), instance: 1 + i%2}
	}
	return fs
}

// failoverRun is what a failover play saw, shared by its rules.
type failoverRun struct {
	skip judgement
	// story says what the play did, for every rule's message.
	story string
	fo    harness.FailedOver
	// at is when the failover began, as an offset from the play's start,
	// the scale of the attempts' Started and Ended.
	at time.Duration
	// lag is how far the standby was behind when the primary was killed;
	// the zero Lag when the play did not stall the replication.
	lag provision.Lag
	// all are every event of the play but the fresh ones, fresh the new
	// event delivered to each instance after the failover.
	all, fresh []*inFlight
	// onOld and afterFailover are the effects of each event (by id) read
	// on the old primary right before the failover, and on the new one
	// right after it.
	onOld, afterFailover map[string]int
}

// ackedBefore returns the first acknowledgement of f that ended before
// the failover, and whether there is one.
func (r *failoverRun) ackedBefore(f *inFlight) (harness.Attempt, bool) {
	for _, a := range f.history {
		if a.Acked() && a.Ended < r.at {
			return a, true
		}
	}
	return harness.Attempt{}, false
}

// failoverSync plays one failover of a formation replicating
// synchronously, with deliveries acknowledged before, held in flight at
// the effect and at COMMIT, and (for a hard kill) made while the standby
// lags; it judges the three MUST rules.
func (s *state) failoverSync(w failoverWay) {
	s.group(w.id, w.name, func() {
		r := &failoverRun{}
		// Two instances to build; the warm-up until terminal, at once;
		// the held and lagging deliveries, at once; the redeliveries
		// until terminal, side by side; every acknowledged event once
		// more; a new event to each instance, side by side.
		pn := s.play(failoverID+" / "+w.name, work{calls: 4, waits: failoverWaits}.plus(untilTerminal(4))).disruptsServer()
		pn.gather(func(ctx context.Context) {
			if r.skip = skipFor(s.applies(failoverID, nil), w.id); r.skip.final() {
				return
			}
			must(s.run.RestoreFormation(ctx), "bring the formation to a primary and a synchronous secondary")
			play := pn.begin(ctx)
			settled := failoverEvents("acked", failoverSettled)
			held := failoverEvents("held", 4)
			var lagging []*inFlight
			if w.lag {
				lagging = failoverEvents("lagging", failoverLagging)
			}
			r.all = append(append(append([]*inFlight(nil), settled...), held...), lagging...)
			pn.at("the warm-up")
			slowest, atOnce := s.warmUp(ctx, play, settled)

			// Hold two deliveries at their effects and two at COMMIT, one
			// of each on each instance.
			pn.at("holding deliveries in flight")
			sleep := max(crashSleep, s.cfg.deliveryTimeout)
			var sleeps []*faults.Fault
			for i, f := range held {
				point := faults.AtEffect
				if i >= 2 {
					point = faults.AtCommit
				}
				fault, err := play.Arm(ctx, faults.Plan{Namespace: f.ev.Namespace, ID: f.ev.ID, Times: 1, Point: point, Action: faults.Sleep, Sleep: sleep})
				must(err, "arm a sleep at %s for %s", point, f.ev)
				sleeps = append(sleeps, fault)
			}
			heldFlight := s.deliverAll(ctx, held, func(f *inFlight) {
				f.attempts = []harness.Attempt{play.Deliver(ctx, f.instance, f.ev)}
			})
			settle, limit := stallTiming(s.cfg.deliveryTimeout, slowest)
			heldNow, err := awaitStall(ctx, heldBySleeps(play, sleeps), heldFlight, len(held), settle, 0, limit)
			must(err, "count the deliveries held in flight")
			// Disarmed while the formation still replicates, so that no
			// redelivery after the failover is held again.
			must(play.DisarmAll(ctx), "disarm the sleeps before the failover")

			var (
				stall       *provision.ReplicationStall
				lagFlight   *flight
				lagReturned int64
				lagWaited   time.Duration
			)
			if w.lag {
				pn.at("stalling the replication")
				stall, err = s.run.StallReplication(ctx)
				must(err, "make the standby lag")
				lagFlight = s.deliverAll(ctx, lagging, func(f *inFlight) {
					f.attempts = []harness.Attempt{play.Deliver(ctx, f.instance, f.ev)}
				})
				lagReturned, lagWaited = waitReturned(ctx, lagFlight, len(lagging), min(max(lagWindowMin, 2*slowest), lagWindowMax))
				r.lag, err = stall.Lag(ctx)
				must(err, "measure how far the standby lags")
			}
			r.onOld = effectCounts(ctx, play, r.all)
			pn.at("failing over")
			r.fo, err = s.run.FailOver(ctx, w.kind)
			if stall != nil {
				_ = stall.Resume() // the hard kill ended it
			}
			must(err, "fail the formation over")
			r.at = r.fo.Started.Sub(play.Started())
			heldFlight.wait()
			if lagFlight != nil {
				lagFlight.wait()
			}
			for _, f := range r.all {
				f.history = play.History(f.ev)
			}
			r.afterFailover = effectCounts(ctx, play, r.all)

			// As a broker would, side by side: every event not
			// acknowledged is redelivered until terminal, to the instance
			// that had it; every acknowledged one once more, to the other
			// instance, as after an acknowledgement lost with the old
			// primary's connections.
			pn.at("redelivering after the failover")
			s.deliverAll(ctx, r.all, func(f *inFlight) {
				if f.last().Terminal() {
					f.attempts = append(f.attempts, play.DeliverUntilTerminal(ctx, 3-f.instance, f.ev)...)
					return
				}
				f.attempts = play.RedeliverUntilTerminal(ctx, f.instance, f.ev, f.attempts)
			}).wait()
			pn.at("a new event to each instance")
			r.fresh = failoverEvents("after", 2)
			s.deliverAll(ctx, r.fresh, func(f *inFlight) {
				f.attempts = play.DeliverUntilTerminal(ctx, f.instance, f.ev)
			}).wait()
			for _, f := range append(append([]*inFlight(nil), r.all...), r.fresh...) {
				f.effects, err = play.Effects(ctx, f.ev)
				must(err)
				f.history = play.History(f.ev)
			}
			r.story = fmt.Sprintf("%s; %d of %d deliveries were held in flight (a sleep at the effect and at COMMIT on each instance) when it began; %s",
				r.fo, heldNow, len(held), warmUpNote(len(settled), atOnce, slowest))
			if w.lag {
				r.story += fmt.Sprintf("; the standby lagged %s when the primary was killed: %d of %d deliveries made during the stall had returned after %s",
					lagString(r.lag), lagReturned, len(lagging), lagWaited.Round(time.Millisecond))
			}
			pn.at("restoring the formation")
			must(s.run.RestoreFormation(ctx), "restore the formation after the failover")
		})

		pn.judgedRule(failoverAcknowledgedSurvives, func() judgement {
			if j := r.preconditions(w); j.final() {
				return j
			}
			var problems []string
			acked := 0
			for _, f := range r.all {
				a, ok := r.ackedBefore(f)
				if !ok {
					continue
				}
				acked++
				if r.afterFailover[f.ev.ID] > 0 {
					continue
				}
				p := fmt.Sprintf("event %s was acknowledged as %s by instance %d %s before the failover began, yet the new primary has no effect of it; ",
					f.ev, a.Outcome, a.Instance, (r.at - a.Ended).Round(time.Millisecond))
				if r.onOld[f.ev.ID] > 0 {
					p += "its effect was committed on the old primary (read there right before the failover) and never reached the standby: the commit was acknowledged before the standby had it"
					if w.lag {
						p += fmt.Sprintf(" (the standby lagged %s)", lagString(r.lag))
					}
					p += ". Hint: does the implementation's session set synchronous_commit to local or off?"
				} else {
					p += "its effect was not on the old primary either, right before the failover: the delivery was acknowledged without a committed effect"
				}
				problems = append(problems, p+"\n"+harness.DescribeEvent(f.ev, f.effects, f.history))
			}
			if len(problems) > 0 && w.lag && !r.lag.Synchronous() {
				// The engine stopped waiting for the standby during the
				// stall: a commit then was acknowledged without it,
				// whatever the implementation asked for.
				return notSupported(fmt.Sprintf("%d acknowledged deliveries have no effect on the new primary, but the primary no longer waited for its standby when it was killed (synchronous_standby_names was empty: the HA engine had stopped replicating synchronously by then), so a commit may have been acknowledged without the standby whatever the implementation asked for, and the loss cannot be told apart from the formation's own; %s",
					len(problems), r.story))
			}
			if len(problems) > 0 {
				problems[0] += "\n" + r.story
				return judgement{problems: problems}
			}
			return judgement{note: fmt.Sprintf("%d deliveries acknowledged before the failover, each with its effect on the new primary; %s", acked, r.story)}
		})
		pn.judgedRule(failoverExactlyOnce, func() judgement {
			if j := r.preconditions(w); j.final() {
				return j
			}
			var problems []string
			for _, f := range r.all {
				if seen := exactlyOnceProblem(f); seen != "" {
					problems = append(problems, fmt.Sprintf("event %s %s\n%s", f.ev, seen, harness.DescribeEvent(f.ev, f.effects, f.history)))
				}
			}
			if len(problems) > 0 {
				problems[0] += "\n" + r.story
				return judgement{problems: problems}
			}
			return judgement{note: fmt.Sprintf("all %d events have one effect, from a delivery answered Applied or one whose outcome the failover left unknown; %s", len(r.all), r.story)}
		})
		pn.judgedRule(failoverFollowsPrimary, func() judgement {
			if j := r.preconditions(w); j.final() {
				return j
			}
			var problems, took []string
			for _, f := range r.fresh {
				last := f.last()
				if last.Acked() && last.Outcome == adapters.Applied && len(f.effects) == 1 {
					took = append(took, fmt.Sprintf("instance %d in %s (%d deliveries)", f.instance, (last.Ended-f.attempts[0].Started).Round(time.Millisecond), len(f.attempts)))
					continue
				}
				problems = append(problems, fmt.Sprintf("after the failover, instance %d did not apply the new event %s: %d deliveries within the broker's patience (%s), the last ended %s; it has %d effects. "+
					"Hint: an implementation that keeps only the first host of the connection string, or does not ask for target_session_attrs=read-write, stays on the old primary (%s).\n%s",
					f.instance, f.ev, len(f.attempts), s.cfg.redeliveryPatience, last.Result(), len(f.effects), r.fo.Before.Name, harness.DescribeEvent(f.ev, f.effects, f.history)))
			}
			if len(problems) > 0 {
				problems[0] += "\n" + r.story
				return judgement{problems: problems}
			}
			return judgement{note: "each instance applied a new event on the new primary, without being restarted: " + strings.Join(took, ", ") + "; " + r.story}
		})
	})
}

// preconditions is the judgement of every rule of a failover play whose
// planned fault did not happen as planned: the fixture does not apply,
// the failover left no evidence, or the stall made the standby lag by
// nothing; the zero judgement when the play can be judged.
func (r *failoverRun) preconditions(w failoverWay) judgement {
	switch {
	case r.skip.final():
		return r.skip
	case r.fo.Problem() != "":
		return notSupported("inconclusive: the planned failover did not happen as planned, so this play proves nothing: " + r.fo.Problem())
	case w.lag && r.lag.Bytes <= 0:
		return notSupported(fmt.Sprintf("the planned stall of the replication did not make the standby lag (%s): nothing reached the primary while it lasted, so this variant proves nothing about commits the standby did not have; %s",
			lagString(r.lag), r.story))
	}
	return judgement{}
}

// exactlyOnceProblem says how the event f, after the failover and all its
// redeliveries, breaks exactly-once; "" when it does not: it has one
// effect, from a delivery answered Applied, or from one whose outcome the
// failover left unknown when none was answered Applied.
func exactlyOnceProblem(f *inFlight) string {
	switch {
	case len(unbacked(f.history)) > 0:
		return "was acknowledged while the ledger held no effect of it: " + unbackedList(f.history)
	case len(f.effects) == 0 && ackedApplied(f.history):
		return "was acknowledged as Applied, yet has no effect after the failover and every redelivery"
	case len(f.effects) > 1:
		return fmt.Sprintf("has %d effects (expected 1)", len(f.effects))
	case !f.last().Terminal():
		return fmt.Sprintf("was never acknowledged after the failover: %d deliveries, the last to instance %d ended %s; it has %d effects",
			len(f.attempts), f.last().Instance, f.last().Result(), len(f.effects))
	case len(f.effects) != 1:
		return fmt.Sprintf("has %d effects (expected 1)", len(f.effects))
	}
	// Two Applied answers are no violation here on their own: a failover
	// that loses a committed effect (a session that commits without the
	// standby, as failover.acknowledged-survives judges) makes the
	// redelivery apply it again, rightly. Each answer is judged as it
	// was given, against the ledger then.
	by := f.effects[0].Attempt
	for _, a := range f.history {
		if a.Acked() && a.Outcome == adapters.Rejected && a.Delivery.Attempt == by {
			return fmt.Sprintf("has its one effect from attempt %d, which instance %d answered Rejected: the answer disagrees with the ledger", by, a.Instance)
		}
	}
	return ""
}

// effectCounts reads how many effects each event of fs has in the ledger
// now, by event id.
func effectCounts(ctx context.Context, play *harness.Play, fs []*inFlight) map[string]int {
	counts := make(map[string]int, len(fs))
	for _, f := range fs {
		es, err := play.Effects(ctx, f.ev)
		must(err, "read the effects of %s", f.ev)
		counts[f.ev.ID] = len(es)
	}
	return counts
}

// waitReturned waits until the n deliveries of fl have returned or limit
// has passed, and says how many had returned and how long it waited.
func waitReturned(ctx context.Context, fl *flight, n int, limit time.Duration) (int64, time.Duration) {
	began := time.Now()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(stallPoll)
	defer tick.Stop()
	for fl.returned.Load() < int64(n) {
		select {
		case <-ctx.Done():
			return fl.returned.Load(), time.Since(began)
		case <-deadline.C:
			return fl.returned.Load(), time.Since(began)
		case <-tick.C:
		}
	}
	return fl.returned.Load(), time.Since(began)
}

// lagString describes how far the standby lagged.
func lagString(l provision.Lag) string {
	sync := "the primary waiting for it"
	if !l.Synchronous() {
		sync = "the primary not waiting for it: synchronous_standby_names empty"
	}
	return fmt.Sprintf("%d bytes behind the primary (received up to %s, the primary had flushed up to %s; %s)", l.Bytes, l.StandbyReceived, l.PrimaryFlush, sync)
}

// failoverAsync makes the formation's replication asynchronous, lets the
// standby lag while deliveries are acknowledged, kills the primary and
// reports what the deployment lost: information about the database's
// configuration, which decides nothing. It judges one SHOULD rule, what
// the implementation does when a lost event is redelivered.
func (s *state) failoverAsync() {
	s.group("async-replication", "asynchronous replication, a hard kill while the standby lags", func() {
		r := &failoverRun{}
		var (
			lost     []*inFlight // acknowledged before the failover, without an effect after it
			lagging  []*inFlight
			returned int64
		)
		pn := s.play(failoverID+" / asynchronous replication", work{calls: 4, waits: failoverWaits}.plus(untilTerminal(2))).disruptsServer()
		pn.gather(func(ctx context.Context) {
			if r.skip = skipFor(s.applies(failoverID, nil), "async-replication"); r.skip.final() {
				return
			}
			must(s.run.RestoreFormation(ctx), "bring the formation to a primary and a secondary")
			must(s.run.SetSynchronous(ctx, false), "make the replication asynchronous")
			// Whatever happens next, the formation is left synchronous
			// and whole for what follows.
			defer func() {
				_ = s.run.RestoreFormation(ctx)
				_ = s.run.SetSynchronous(ctx, true)
			}()
			play := pn.begin(ctx)
			settled := failoverEvents("acked", failoverSettled)
			lagging = failoverEvents("lagging", 2*failoverLagging)
			r.all = append(append([]*inFlight(nil), settled...), lagging...)
			pn.at("the warm-up")
			slowest, _ := s.warmUp(ctx, play, settled)
			pn.at("stalling the replication")
			stall, err := s.run.StallReplication(ctx)
			must(err, "make the standby lag")
			fl := s.deliverAll(ctx, lagging, func(f *inFlight) {
				f.attempts = []harness.Attempt{play.Deliver(ctx, f.instance, f.ev)}
			})
			returned, _ = waitReturned(ctx, fl, len(lagging), min(max(lagWindowMin, 2*slowest), lagWindowMax))
			r.lag, err = stall.Lag(ctx)
			must(err, "measure how far the standby lags")
			r.onOld = effectCounts(ctx, play, r.all)
			pn.at("killing the primary")
			r.fo, err = s.run.FailOver(ctx, provision.FailoverHardKill)
			_ = stall.Resume()
			must(err, "fail the formation over")
			r.at = r.fo.Started.Sub(play.Started())
			fl.wait()
			for _, f := range r.all {
				f.history = play.History(f.ev)
			}
			r.afterFailover = effectCounts(ctx, play, r.all)
			for _, f := range r.all {
				if _, ok := r.ackedBefore(f); ok && r.afterFailover[f.ev.ID] == 0 {
					lost = append(lost, f)
				}
			}
			// The broker redelivers what is not acknowledged, and, as
			// after a replay or acknowledgements lost with the old
			// primary's connections, the events the failover lost.
			pn.at("redelivering after the failover")
			s.deliverAll(ctx, r.all, func(f *inFlight) {
				switch {
				case !f.last().Terminal():
					f.attempts = play.RedeliverUntilTerminal(ctx, f.instance, f.ev, f.attempts)
				case r.afterFailover[f.ev.ID] == 0:
					f.attempts = append(f.attempts, play.DeliverUntilTerminal(ctx, f.instance, f.ev)...)
				}
			}).wait()
			for _, f := range r.all {
				f.effects, err = play.Effects(ctx, f.ev)
				must(err)
				f.history = play.History(f.ev)
			}
			s.reportAsyncFailover(r, lost, returned, len(lagging))
		})

		pn.judgedRule(failoverReappliedAfterLoss, func() judgement {
			switch {
			case r.skip.final():
				return r.skip
			case r.fo.Problem() != "":
				return judgement{problems: []string{"the planned failover did not happen: " + r.fo.Problem()}}
			case len(lost) == 0:
				return notSupported(fmt.Sprintf("the failover lost no acknowledged event, so nothing was there to apply again: %d of %d deliveries made while the standby lagged %s were acknowledged before the primary was killed; %s",
					returned, len(lagging), lagString(r.lag), r.fo))
			}
			var problems []string
			for _, f := range lost {
				last := f.last()
				if last.Acked() && last.Outcome == adapters.Applied && len(f.effects) == 1 {
					continue
				}
				p := fmt.Sprintf("event %s was acknowledged before the failover, which lost its marker and its effect (the new primary has none); redelivered, it ended %s and has %d effects",
					f.ev, last.Result(), len(f.effects))
				if last.Acked() && last.Outcome == adapters.Duplicate {
					p += ": the implementation answered Duplicate for an event the database holds no effect of. Hint: does something in front of the database (a cache of claimed identities) decide before the database is asked?"
				}
				problems = append(problems, p+"\n"+harness.DescribeEvent(f.ev, f.effects, f.history))
			}
			if len(problems) > 0 {
				problems[0] += "\n" + r.fo.String()
				return judgement{problems: problems}
			}
			return judgement{note: fmt.Sprintf("the failover lost %d acknowledged events, and each was applied again when redelivered; %s", len(lost), r.fo)}
		})
	})
}

// reportAsyncFailover reports what the asynchronous variant saw, for the
// certificate: what the deployment lost, which is information about the
// database's configuration, not a verdict on the implementation. Its
// facts are listed in docs/reports.md.
func (s *state) reportAsyncFailover(r *failoverRun, lost []*inFlight, returned int64, lagging int) {
	acknowledged, appliedAgain := 0, 0
	for _, f := range r.all {
		if _, ok := r.ackedBefore(f); ok {
			acknowledged++
		}
	}
	names := []string{}
	for _, f := range lost {
		names = append(names, f.ev.String())
		if last := f.last(); last.Acked() && last.Outcome == adapters.Applied && len(f.effects) == 1 {
			appliedAgain++
		}
	}
	s.report(certificate.Report{
		Fixture: failoverID,
		Title:   "async-replication",
		Note: fmt.Sprintf("asynchronous replication: %d of %d deliveries made while the standby lagged %s were acknowledged before the primary was killed; the failover lost %d acknowledged events, %d of which were applied again when redelivered, twice in the eyes of anyone who saw the first",
			returned, lagging, lagString(r.lag), len(lost), appliedAgain),
		Facts: map[string]any{
			"failover":          r.fo.String(),
			"lag_bytes":         r.lag.Bytes,
			"during_stall":      lagging,
			"acknowledged":      acknowledged,
			"acknowledged_lost": len(lost),
			"lost":              names,
			"applied_again":     appliedAgain,
		},
	})
}
