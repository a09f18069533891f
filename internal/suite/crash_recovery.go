package suite

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// Numbers of the crash-recovery fixture.
const (
	// crashInFlight is how many deliveries are in flight when the server
	// crashes, spread over two instances. As many events are delivered and
	// acknowledged before, all at once, to warm the implementation up.
	crashInFlight = 16
	// crashSleep is the least the sleep fault holds an in-flight
	// transaction: far longer than the harness takes to crash the server,
	// which ends the sleep. It is never shorter than the delivery timeout,
	// which ends a held delivery first.
	crashSleep = time.Minute
	// stallSettleMin is the least stall settle time (see stallTiming).
	stallSettleMin = 500 * time.Millisecond
	// stallPoll is how often the harness looks for stalled deliveries.
	stallPoll = 20 * time.Millisecond
	// restartBudget is what a play's budget allows for crashing the
	// server and starting it again, crash recovery included.
	restartBudget = 2 * time.Minute
)

// crashSkip is the judgement of the fixture's rules when the run cannot
// crash its server (a server named by a DSN: not-supported) or a crash is
// no scenario of its deployment (a replicated formation, where a crash of
// the primary is a failover: not-applicable); the zero judgement when it
// can. The fixture needs nothing of where the implementation runs, so it
// asks before it builds an instance.
func (s *state) crashSkip() judgement {
	return skipFor(s.applies(crashRecoveryID, nil), "")
}

// crashAndRestart crashes the run's server and starts it again, once the
// other crash-recovery plays running beside this one are ready for it too
// (see sharedCrash). It fails the node when either cannot be done; the
// recovery's evidence says whether the crash was real.
func (s *state) crashAndRestart(ctx context.Context) harness.Recovery {
	rec, err := s.crashShare.crash(ctx, s.crashServer)
	must(err)
	return rec
}

// crashServer crashes the run's server and starts it again.
func (s *state) crashServer(ctx context.Context) (harness.Recovery, error) {
	c, err := s.run.CrashServer(ctx)
	if err != nil {
		return harness.Recovery{}, fmt.Errorf("crash the server: %w", err)
	}
	rec, err := s.run.RestartServer(ctx, c)
	if err != nil {
		return rec, fmt.Errorf("restart the server after the crash: %w", err)
	}
	return rec, nil
}

// The ids of the fixture and its rules, written once, here: the
// catalogue and internal/catalogid are generated from the definition
// below. They are stable: labels, reports and other tools use them.
const (
	crashRecoveryID = "crash-recovery"

	crashRecoveryAppliedSurvives     = "crash-recovery.applied-survives"
	crashRecoveryInFlightExactlyOnce = "crash-recovery.in-flight-exactly-once"
)

// crashRecoveryDefinition is the fixture's catalogue entry, with
// its rules' reasons and usual suspects, and its page in docs/.
func crashRecoveryDefinition() Definition {
	return Definition{
		Page: DocPage{File: "crash-recovery.md", Title: "crash recovery"},
		Fixture: fixtures.Fixture{
			ID:       crashRecoveryID,
			Requires: []fixtures.Requirement{catalogid.NeedsOwnedServer, catalogid.NeedsSingleServer},
			Doc:      "Crash the database server the harness started for the run (an immediate shutdown of a throwaway cluster, SIGKILL to a container) and start it again, while the implementation keeps running and reaches the server through the harness's wire proxy, which follows it to its new address: once after a delivery was acknowledged, and once each with sixteen deliveries in flight, held inside their transactions by a database-side sleep at the effect, or stopped at their first write to the implementation's tables by a lock the harness holds. Before the in-flight deliveries, sixteen events are delivered at once to warm the implementation up; the harness crashes the server once the deliveries are held in the database, and disarms its faults first, so that none fires after the restart. The three plays run side by side, with no other play beside them, and share one crash: each holds what it holds until all three are ready. Then redeliver what was not acknowledged, to the same instances. On a server named by a DSN its rules are not-supported.",
			Rules: []fixtures.Rule{
				{
					ID: crashRecoveryAppliedSurvives, Level: fixtures.Must,
					Doc:     "After a delivery acknowledged as Applied, with its effect committed, a crash and a restart of the server, the effect is there once, and a redelivery to the same instance, which must reconnect by itself, is Duplicate.",
					Reason:  "An acknowledgement is a promise that the event is handled for good: the claim must be as durable as the effect, or the broker's next redelivery applies it again. " + seedTogeth + " Servers crash, restart and fail over; a consumer that needs restarting with them stops processing until someone notices.",
					Suspect: "deduplication state that does not survive a server crash (an UNLOGGED table, which crash recovery empties, or a cache beside the database), or a dead connection kept for ever",
					Changed: "since 0.2.0 the rows of the implementation's own tables are evidence only: before, fewer rows after the crash than before it failed the rule, whatever the redelivery answered.",
				},
				{
					ID: crashRecoveryInFlightExactlyOnce, Level: fixtures.Must,
					Doc:     "When the server crashes with deliveries in flight, each event ends with exactly one effect once the unacknowledged ones are redelivered, and no delivery, before or after the crash, was acknowledged without its effect.",
					Reason:  "A crash is the failure no error handler sees: whatever was not committed is gone, and the broker redelivers everything that was not acknowledged. " + seedTogeth + " " + seedFailure,
					Suspect: "the marker and the effect committed in separate transactions, so that a crash between the two commits leaves one without the other",
					Changed: "since 0.2.0 every answer is checked against the ledger the moment it is given, before the crash or after it: a delivery acknowledged while its event's effect was not committed fails the rule, even when the event later ends with one effect.",
				},
			},
		},
	}
}

func (s *state) crashRecovery() {
	s.describeFixture(crashRecoveryID, func() {
		s.crashAfterAck()
		for _, st := range stalls {
			s.crashInFlight(st)
		}
	})
}

// crashAfterAck crashes the server after a delivery was acknowledged, then
// redelivers the event to the same instance.
func (s *state) crashAfterAck() {
	s.group("after-ack", "after an acknowledged delivery", func() {
		var (
			skip                  judgement
			ev                    = newEvent(crashRecoveryID, "acked")
			before, after         []harness.Attempt
			rowsBefore, rowsAfter int64
			restored, effects     []ledger.Entry
			history               []harness.Attempt
			rec                   harness.Recovery
			// reached counts the statements the server completed on
			// instance 1's connections during the redeliveries after
			// the restart: whether it reconnected.
			reached int64
		)
		// One instance to build; a delivery until terminal before the
		// crash, a redelivery until terminal after it; the restart.
		pn := s.play(crashRecoveryID+" / after an acknowledged delivery", work{calls: 1, waits: restartBudget}.plus(untilTerminal(2))).disruptsServer().crashesTogether()
		pn.gather(func(ctx context.Context) {
			if skip = s.crashSkip(); skip.final() {
				return
			}
			play := pn.begin(ctx)
			before = play.DeliverUntilTerminal(ctx, 1, ev)
			var err error
			rowsBefore, err = play.StateRows(ctx)
			must(err)
			rec = s.crashAndRestart(ctx)
			restored, err = play.Effects(ctx, ev)
			must(err)
			rowsAfter, err = play.StateRows(ctx)
			must(err)
			stmts := play.Proxy().Seen(1).Statements()
			after = play.DeliverUntilTerminal(ctx, 1, ev)
			reached = play.Proxy().Seen(1).Statements() - stmts
			effects, err = play.Effects(ctx, ev)
			must(err)
			history = play.History(ev)
		})

		pn.judgedRule(crashRecoveryAppliedSurvives, func() judgement {
			if skip.final() {
				return skip
			}
			if p := rec.Problem(); p != "" {
				return notSupported("inconclusive: the planned crash of the server did not happen as planned, so this play proves nothing: " + p)
			}
			describe := fmt.Sprintf("\n%s\nthe implementation's tables in the play's schema held %d rows before the crash and %d after it\n%s", rec, rowsBefore, rowsAfter, harness.DescribeEvent(ev, effects, history))
			if first := before[len(before)-1]; first.Unbacked() {
				return judgement{problems: []string{fmt.Sprintf("before the crash, the delivery to instance 1 answered %s while the ledger held no effect of the event%s", first.Outcome, describe)}}
			} else if !first.Acked() || first.Outcome != adapters.Applied {
				return judgement{problems: []string{fmt.Sprintf("before the crash, the delivery to instance 1 ended %s (expected Applied): nothing acknowledged could be lost%s",
					first.Result(), describe)}}
			}
			var seen []string
			if len(restored) != 1 {
				seen = append(seen, fmt.Sprintf("right after the restart the ledger holds %d effects of the event acknowledged as Applied before the crash (expected 1)", len(restored)))
			}
			switch last := after[len(after)-1]; {
			case !last.Acked() && reached > 0:
				seen = append(seen, fmt.Sprintf("after the restart instance 1 acknowledged none of %d redeliveries, the last ended %s: it reconnected (the server completed %d of its statements during them), and still answered none as Duplicate", len(after), last.Result(), reached))
			case !last.Acked():
				seen = append(seen, fmt.Sprintf("after the restart instance 1 acknowledged none of %d redeliveries, the last ended %s: it did not reconnect by itself", len(after), last.Result()))
			case last.Outcome != adapters.Duplicate:
				seen = append(seen, fmt.Sprintf("after the restart the redelivery to instance 1 ended %s (expected Duplicate)", last.Outcome))
			}
			if len(effects) != 1 {
				seen = append(seen, fmt.Sprintf("after the redelivery the ledger holds %d effects (expected 1)", len(effects)))
			}
			if len(seen) > 0 {
				return judgement{problems: []string{strings.Join(seen, "; ") + describe}}
			}
			note := fmt.Sprintf("%s; the implementation's tables held %d row(s) before the crash and %d after; the redelivery to instance 1 was Duplicate", rec, rowsBefore, rowsAfter)
			if failed := len(after) - 1; failed > 0 {
				note += fmt.Sprintf(" after %d failed attempt(s) (the first ended %s)", failed, after[0].Result())
			}
			return judgement{note: note}
		})
	})
}

// stall is a way to hold in-flight deliveries where the server's crash
// hits them.
type stall struct {
	// id is the variant's short stable id in the tree, name its name in
	// messages.
	id, name string
	// arm prepares the stall of events, holding each for at least hold,
	// and returns a function that counts the deliveries it holds in the
	// database right now, what it is and a function that ends it. It
	// returns a reason instead when the implementation gives it nothing
	// to hold.
	arm func(ctx context.Context, play *harness.Play, events []adapters.Event, hold time.Duration) (held func(context.Context) (int, error), what string, release func(context.Context) error, unsupported string)
}

var stalls = []stall{
	{id: "sleep-at-effect", name: "held inside their transactions by a sleep at the effect", arm: sleepAtEffect},
	{id: "held-writes", name: "stopped at their first write to the implementation's tables", arm: holdWrites},
}

// sleepAtEffect plans a long sleep at the effect of each event's first
// attempt: each delivery stalls with its transaction open, its claim (if it
// made one) and its effect inserted but not committed. A delivery counts
// as held while its fault has fired and its backend still sleeps: one
// whose sleep ended (a cancelled statement, a lost connection) is not.
// The crash disarms the sleeps (see harness.Run.CrashServer), so a first
// attempt that reaches the server only after the restart is not held.
func sleepAtEffect(ctx context.Context, play *harness.Play, events []adapters.Event, hold time.Duration) (func(context.Context) (int, error), string, func(context.Context) error, string) {
	sleep := max(crashSleep, hold)
	sleeps := make([]*faults.Fault, len(events))
	for i, ev := range events {
		var err error
		sleeps[i], err = play.Arm(ctx, faults.Plan{Namespace: ev.Namespace, ID: ev.ID, Times: 1, Point: faults.AtEffect, Action: faults.Sleep, Sleep: sleep})
		must(err)
	}
	return heldBySleeps(play, sleeps), fmt.Sprintf("a sleep of %s at the effect of each event's attempt 1", sleep), nil, ""
}

// heldBySleeps returns a function that counts the deliveries the sleep
// faults hold in the database right now: those whose fault has fired and
// whose backend still sleeps; one whose sleep ended (a cancelled
// statement, a lost connection) is not held.
func heldBySleeps(play *harness.Play, sleeps []*faults.Fault) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		fired := 0
		for _, f := range sleeps {
			n, err := play.Fired(ctx, f)
			if err != nil {
				return 0, err
			}
			if n > 0 {
				fired++
			}
		}
		sleeping, err := play.SleepingInFaults(ctx)
		return min(fired, sleeping), err
	}
}

// holdWrites locks the implementation's tables against writes: each
// delivery stalls at its first write to its deduplication state, after
// whatever it committed before that write.
func holdWrites(ctx context.Context, play *harness.Play, _ []adapters.Event, _ time.Duration) (func(context.Context) (int, error), string, func(context.Context) error, string) {
	h, err := play.HoldWrites(ctx)
	must(err)
	if h == nil {
		return nil, "", nil, "the implementation keeps no table in the schema the harness gave it, so the harness has no write of it to hold"
	}
	return h.Waiting, "the harness's EXCLUSIVE lock on " + h.String(), h.Release, ""
}

// inFlight is one event of an in-flight play and what became of it.
type inFlight struct {
	ev       adapters.Event
	instance int
	attempts []harness.Attempt // every delivery, in order
	effects  []ledger.Entry
	history  []harness.Attempt
}

func (f *inFlight) last() harness.Attempt { return f.attempts[len(f.attempts)-1] }

// crashEvents makes n events of the fixture, named prefix-1 to prefix-n, spread
// over the two instances.
func crashEvents(prefix string, n int) []*inFlight {
	fs := make([]*inFlight, n)
	for i := range fs {
		fs[i] = &inFlight{ev: newEvent(crashRecoveryID, fmt.Sprintf("%s-%d", prefix, i+1)), instance: 1 + i%2}
	}
	return fs
}

// flight is deliveries made all at once: how many have started and how
// many have returned.
type flight struct {
	started, returned atomic.Int64
	done              sync.WaitGroup
}

// deliverAll starts deliver for every event at once, each on a goroutine
// of its own.
func (s *state) deliverAll(ctx context.Context, fs []*inFlight, deliver func(*inFlight)) *flight {
	fl := &flight{}
	for _, f := range fs {
		fl.done.Add(1)
		go func() {
			defer s.recoverGather(ctx)
			defer fl.done.Done()
			fl.started.Add(1)
			deliver(f)
			fl.returned.Add(1)
		}()
	}
	return fl
}

// wait waits until every delivery has returned.
func (fl *flight) wait() { fl.done.Wait() }

// warmUp delivers fs all at once and waits until each is acknowledged or
// given up on, so that whatever the implementation needs to handle that many
// deliveries at once (connections, child processes) exists before the
// crash, as in a service in steady state. The deliveries are held at their
// effects (see harness.Play.GateEffects, which takes no lock an
// implementation with a short lock_timeout would give up on) until all of
// them are there, or until no more have joined for stallSettleMin, or at
// the stall's limit: an
// implementation that finishes one delivery before the next arrives would
// otherwise never need more than one connection or process. It returns how
// long the slowest delivery took, which says how long a delivery takes to
// reach the database under that load, and how many were held at once.
func (s *state) warmUp(ctx context.Context, play *harness.Play, fs []*inFlight) (slowest time.Duration, atOnce int) {
	// Built first, so that building one (an implementation's migrations,
	// say) does not wait for the deliveries the warm-up holds.
	for _, n := range []int{1, 2} {
		_, err := play.Instance(ctx, n)
		must(err, "build instance %d", n)
	}
	_, limit := stallTiming(s.cfg.deliveryTimeout, 0)
	events := make([]adapters.Event, len(fs))
	for i, f := range fs {
		events[i] = f.ev
	}
	gate, err := play.GateEffects(ctx, events, limit)
	must(err, "hold the warm-up deliveries at their effects")
	fl := s.deliverAll(ctx, fs, func(f *inFlight) {
		f.attempts = play.DeliverUntilTerminal(ctx, f.instance, f.ev)
	})
	atOnce, heldErr := awaitStall(ctx, gate.Waiting, fl, len(fs), stallSettleMin, 0, limit)
	releaseErr := gate.Open(ctx)
	fl.wait()
	must(heldErr, "count the warm-up deliveries held at their effects")
	must(releaseErr, "release the warm-up deliveries")
	for _, f := range fs {
		for _, a := range f.attempts {
			slowest = max(slowest, a.Ended-a.Started)
		}
	}
	return slowest, atOnce
}

// warmUpNote describes the warm-up for a rule's message.
func warmUpNote(n, atOnce int, slowest time.Duration) string {
	return fmt.Sprintf("the warm-up had %d of %d deliveries at their effects at once, the slowest took %s", atOnce, n, slowest.Round(time.Millisecond))
}

// stallTiming is how long awaitStall waits for the in-flight deliveries to
// stall. A delivery that takes longer than the delivery timeout is
// cancelled, which ends its stall, so the wait ends well before: at half
// the delivery timeout (limit). It ends early once some deliveries are held
// and no more have joined them for settle: an implementation that lets
// fewer deliveries into the database at once (a small pool, one
// connection) is crashed with those that got in. Settle is at least the
// slowest warm-up delivery, so an implementation that takes that long to
// bring a delivery to the database, under the same load, gets the time.
func stallTiming(deliveryTimeout, slowestWarmUp time.Duration) (settle, limit time.Duration) {
	limit = deliveryTimeout / 2
	return min(max(stallSettleMin, slowestWarmUp), limit), limit
}

// crashInFlight warms the implementation up with as many concurrent
// deliveries as will be in flight, crashes the server while deliveries are
// held by st, then redelivers every event that is not acknowledged to the
// instance that had it.
func (s *state) crashInFlight(st stall) {
	s.group("in-flight-"+st.id, "with deliveries in flight, "+st.name, func() {
		var (
			skip            judgement
			what            string
			settled, flying []*inFlight
			all             []*inFlight // settled, then flying
			slowestWarmUp   time.Duration
			warmedAtOnce    int
			waited          time.Duration
			heldAtCrash     int
			returnedAtCrash int64
			redelivered     int
			rec             harness.Recovery
			heldErr         error
		)
		// Two instances to build; the warm-up's deliveries until terminal,
		// at once, and the wait for them at their effects; the in-flight
		// deliveries, at once, and the wait for them to stall; the
		// restart; then every event redelivered until terminal, one after
		// another.
		_, stallLimit := stallTiming(s.cfg.deliveryTimeout, 0)
		pn := s.play(crashRecoveryID+" / with deliveries in flight, "+st.name,
			work{calls: 3, waits: 2*stallLimit + restartBudget}.plus(untilTerminal(2))).disruptsServer().crashesTogether()
		pn.gather(func(ctx context.Context) {
			if skip = s.crashSkip(); skip.final() {
				return
			}
			play := pn.begin(ctx)
			settled, flying = crashEvents("settled", crashInFlight), crashEvents("in-flight", crashInFlight)
			all = append(append([]*inFlight(nil), settled...), flying...)
			slowestWarmUp, warmedAtOnce = s.warmUp(ctx, play, settled)

			events := make([]adapters.Event, len(flying))
			for i, f := range flying {
				events[i] = f.ev
			}
			held, desc, release, unsupported := st.arm(ctx, play, events, s.cfg.deliveryTimeout)
			if what = desc; unsupported != "" {
				skip = notSupported(unsupported)
				return
			}

			began := time.Now()
			fl := s.deliverAll(ctx, flying, func(f *inFlight) {
				f.attempts = []harness.Attempt{play.Deliver(ctx, f.instance, f.ev)}
			})
			settle, limit := stallTiming(s.cfg.deliveryTimeout, slowestWarmUp)
			heldAtCrash, heldErr = awaitStall(ctx, held, fl, len(flying), settle, settle, limit)
			waited = time.Since(began)
			returnedAtCrash = fl.returned.Load()
			rec = s.crashAndRestart(ctx)
			// The deliveries the crash hit return once their connections
			// die; one that retries by itself may succeed after the
			// restart.
			fl.wait()
			if release != nil {
				_ = release(ctx) // the crash ended the hold
			}
			// As a broker would, side by side: every event not acknowledged
			// is redelivered at once, each until terminal.
			var unacked []*inFlight
			for _, f := range all {
				if !f.last().Terminal() {
					unacked = append(unacked, f)
				}
			}
			redelivered = len(unacked)
			s.deliverAll(ctx, unacked, func(f *inFlight) {
				f.attempts = play.RedeliverUntilTerminal(ctx, f.instance, f.ev, f.attempts)
			}).wait()
			for _, f := range all {
				var err error
				f.effects, err = play.Effects(ctx, f.ev)
				must(err)
				f.history = play.History(f.ev)
			}
		})

		pn.judgedRule(crashRecoveryInFlightExactlyOnce, func() judgement {
			if skip.final() {
				return skip
			}
			if p := rec.Problem(); p != "" {
				return notSupported("inconclusive: the planned crash of the server did not happen as planned, so this play proves nothing: " + p)
			}
			if heldErr != nil {
				return notSupported(fmt.Sprintf("inconclusive: the harness could not tell whether the planned stall (%s) held any delivery: %v", what, heldErr))
			}
			story := fmt.Sprintf("%d of %d in-flight deliveries were held by %s when the server crashed, %s after they started, %d had returned (%s); %s",
				heldAtCrash, len(flying), what, waited.Round(time.Millisecond), returnedAtCrash, warmUpNote(len(settled), warmedAtOnce, slowestWarmUp), rec)
			// Safety is judged whatever the crash hit: an event applied
			// twice, or acknowledged and lost, is a violation. Liveness (an
			// event never acknowledged) is this variant's only when the
			// crash hit deliveries in flight; otherwise it is
			// applied-survives' to judge.
			var problems, unanswered []string
			for _, f := range all {
				var seen string
				live := false
				switch {
				case len(unbacked(f.history)) > 0:
					seen = "was acknowledged while the ledger held no effect of it: " + unbackedList(f.history)
				case len(f.effects) == 0 && ackedApplied(f.history):
					seen = "was acknowledged as Applied, yet has no effect after the crash"
				case len(f.effects) > 1:
					seen = fmt.Sprintf("has %d effects (expected 1)", len(f.effects))
				case !f.last().Terminal():
					seen = fmt.Sprintf("was never acknowledged after the restart: %d deliveries to instance %d, the last ended %s; it has %d effects",
						len(f.attempts), f.instance, f.last().Result(), len(f.effects))
					live = true
				case len(f.effects) != 1:
					seen = fmt.Sprintf("has %d effects (expected 1)", len(f.effects))
				}
				switch {
				case seen == "":
				case live && heldAtCrash == 0:
					unanswered = append(unanswered, f.ev.String())
				default:
					problems = append(problems, fmt.Sprintf("event %s %s\n%s", f.ev, seen, harness.DescribeEvent(f.ev, f.effects, f.history)))
				}
			}
			if len(problems) > 0 {
				problems[0] += "\n" + story
				return judgement{problems: problems}
			}
			// No delivery was in flight when the server crashed: every one
			// had returned (an implementation that gives up waiting on a
			// lock, say, and asks for redelivery), so the crash proved
			// nothing about in-flight work, though no event was applied
			// twice or lost.
			if heldAtCrash == 0 {
				msg := fmt.Sprintf("the planned stall held no delivery when the server crashed, so this variant proves nothing about work in flight: %s; no event has more than one effect and none acknowledged was lost", story)
				if len(unanswered) > 0 {
					msg += fmt.Sprintf("; %d events were never acknowledged after the restart (%s), which applied-survives judges", len(unanswered), strings.Join(unanswered[:min(len(unanswered), 3)], ", "))
				}
				return notSupported(msg)
			}
			return judgement{note: fmt.Sprintf("%s; %d events redelivered after the restart; all %d events have one effect", story, redelivered, len(all))}
		})
	})
}

// ackedApplied reports whether any of attempts was acknowledged as Applied.
func ackedApplied(attempts []harness.Attempt) bool {
	for _, a := range attempts {
		if a.Acked() && a.Outcome == adapters.Applied {
			return true
		}
	}
	return false
}

// awaitStall waits until each of the n deliveries of fl is held or has
// returned, and the number held has not changed for holdFor; or until all
// have started, some are held, and their number has not changed for settle
// or for twice as long as the first took to be held, whichever is longer
// (on a loaded machine everything takes longer); or until limit has passed.
// It returns how many were held then, at once when all have returned.
//
// holdFor lets the implementation's own timeouts act on the held
// deliveries before the harness goes on, as they would in production,
// where a crash does not come the instant a delivery blocks: one that
// gives up waiting must then show what it does about it (an error, to be
// redelivered; or an acknowledgement, which must be true).
func awaitStall(ctx context.Context, held func(context.Context) (int, error), fl *flight, n int, settle, holdFor, limit time.Duration) (int, error) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(stallPoll)
	defer tick.Stop()
	began := time.Now()
	last, since := 0, began
	allStarted := false
	for {
		k, err := held(ctx)
		returned := int(fl.returned.Load())
		if err != nil || returned >= n {
			return k, err
		}
		if !allStarted && fl.started.Load() >= int64(n) {
			// A delivery the harness had not even started yet could not
			// have joined: the settle time counts from here at the
			// earliest.
			allStarted, since = true, time.Now()
		}
		switch {
		case k != last:
			if last == 0 {
				settle = max(settle, 2*time.Since(began))
			}
			last, since = k, time.Now()
			if k+returned >= n && holdFor == 0 {
				return k, nil
			}
		case k+returned >= n && time.Since(since) >= holdFor:
			return k, nil
		case k > 0 && allStarted && time.Since(since) >= settle:
			return k, nil
		}
		select {
		case <-ctx.Done():
			return k, context.Cause(ctx)
		case <-deadline.C:
			return k, nil
		case <-tick.C:
		}
	}
}
