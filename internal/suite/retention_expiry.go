package suite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/applicability"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/shortdur"
)

// The retention-expiry fixture's sizes.
const (
	// retentionBatch is how many events the purge race claims at its start
	// (they expire before it) and how many half a window later (they are
	// still inside the window while it runs).
	retentionBatch = 8
	// racePurges is how many purges run, one after another and on each
	// instance in turn, during the purge race.
	racePurges = 8
	// raceContenders is how many deliveries run side by side during the
	// purge race, half of them on each instance: each alternates a new
	// event and a redelivery of a recent one until the last purge has
	// ended, or until it has made raceSteps deliveries. With these sizes
	// the race costs about a tenth of a second against the reference,
	// and a purge that loses the claims made while it runs
	// (broken-rebuild-purge) loses tens of them in every run.
	raceContenders = 4
	raceSteps      = 48
	// raceDetails is how many of the new events the purge race broke a
	// failure describes in full.
	raceDetails = 3
	// stepEvents is how many new events each step of the many-windows
	// play delivers; a step lasts a quarter of the window.
	stepEvents     = 5
	stepsPerWindow = 4
	// stateBound is the most rows the many-windows play allows: the
	// window covers at most stepsPerWindow steps besides the current one,
	// and one more step's worth is slack.
	stateBound = stepEvents * (stepsPerWindow + 2)
	// clockSteps and realTimeSteps are how many steps the many-windows
	// play runs: five windows on the harness's clock, two in real time.
	clockSteps    = 20
	realTimeSteps = 8
)

// retention is how the fixture runs against the adapter: on the harness's
// clock or in real time, with which window and margin, or not at all.
type retention struct {
	// unsupported, when set, is why no rule of the fixture applies.
	unsupported string
	mode        string
	window      time.Duration
	// eps is the margin before the window's end (where a purge must never
	// remove the marker) and after it (where a purge must have removed it).
	eps   time.Duration
	steps int
}

// newRetention decides how the fixture runs against an implementation that
// declares d; a, the catalogue's decision, says whether it runs at all.
// Declarations select the rules; they never weaken them.
func newRetention(a applicability.Decision, d adapters.Declaration) retention {
	w := d.RedeliveryWindow
	switch {
	case !a.Runs:
		return retention{unsupported: a.Reason}
	case d.AcceptsClock:
		// A hundredth of the window, but never so small that PostgreSQL's
		// microsecond timestamps could blur the window's end.
		return retention{mode: "clock", window: w, eps: max(w/100, min(w/4, time.Millisecond)), steps: clockSteps}
	}
	return retention{mode: "real-time", window: w, eps: w / 4, steps: realTimeSteps}
}

// realTime returns d when the fixture plays in real time, and 0 on the
// harness's clock, where moving time costs nothing.
func (r retention) realTime(d time.Duration) time.Duration {
	if r.mode == "real-time" {
		return d
	}
	return 0
}

// applies is the judgement of a rule of the fixture when the fixture does
// not apply (not-supported, saying why), and the zero judgement when it
// does.
func (r retention) applies() judgement {
	return notSupported(r.unsupported)
}

func (r retention) String() string {
	if r.unsupported != "" {
		return "not supported: the implementation " + r.unsupported
	}
	return fmt.Sprintf("%s mode, W=%s, ε=%s", r.mode, shortdur.Format(r.window), shortdur.Format(r.eps))
}

// timeline is the time a play runs in: the harness's manual clock,
// which it moves, or real time, which it waits for. Plays read and move
// time only through it, so they are the same in both modes.
type timeline struct {
	manual *harness.ManualClock // nil in real time
	t0     time.Time            // the play's start, for messages
}

// newTimeline returns the play's timeline. On the harness's clock it stops
// the clock, which runs elsewhere, since the play needs its times
// exact; when crossing is positive it sets the clock first to a t0 from
// which crossing ends past a midnight, UTC: a day's and an hour's end, so
// that a key or a check that depends on the calendar is caught inside the
// window. The place of t0 before midnight is drawn from rng.
func newTimeline(play *harness.Play, rng *rand.Rand, crossing time.Duration) *timeline {
	_, manual := play.Clock()
	tl := &timeline{manual: manual}
	if manual != nil {
		manual.Freeze()
		if crossing > 0 {
			manual.Set(beforeMidnight(manual.Now(), crossing, rng))
		}
	}
	tl.t0 = tl.Now()
	return tl
}

// beforeMidnight returns a time before the first midnight (UTC) after now,
// by a random amount between a microsecond and crossing (or a day, if
// that is less), so that the span of crossing from it contains that
// midnight.
func beforeMidnight(now time.Time, crossing time.Duration, rng *rand.Rand) time.Time {
	now = now.UTC()
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	most := min(crossing, 24*time.Hour) / time.Microsecond
	early := time.Duration(1+rng.Int64N(max(int64(most)-1, 1))) * time.Microsecond
	return midnight.Add(-early)
}

// Now is the time on the timeline.
func (tl *timeline) Now() time.Time {
	if tl.manual != nil {
		return tl.manual.Now()
	}
	return time.Now()
}

// AdvanceTo moves the timeline to t: it sets the manual clock, or waits
// until the real time has reached t. Waiting is the play itself (time
// must pass for the window to end), not a way to synchronise.
func (tl *timeline) AdvanceTo(ctx context.Context, t time.Time) error {
	if tl.manual != nil {
		tl.manual.Set(t)
		return nil
	}
	for {
		wait := time.Until(t)
		if wait <= 0 {
			return nil
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return context.Cause(ctx)
		case <-timer.C:
		}
	}
}

// at names t for messages, relative to the play's start.
func (tl *timeline) at(t time.Time) string {
	d := t.Sub(tl.t0)
	switch {
	case d == 0:
		return "t0"
	case d < 0:
		return "t0-" + tl.since(t, tl.t0)
	}
	return "t0+" + tl.since(tl.t0, t)
}

// since names the time from a to b for messages; real time is shown to the
// millisecond.
func (tl *timeline) since(a, b time.Time) string {
	d := b.Sub(a)
	if tl.manual == nil {
		d = d.Round(time.Millisecond)
	}
	return shortdur.Format(d)
}

// calendar says, on the harness's clock, where a and b fall in the UTC
// calendar when they fall on different days or hours; "" in real time,
// or when they share both.
func (tl *timeline) calendar(a, b time.Time) string {
	if tl.manual == nil {
		return ""
	}
	a, b = a.UTC(), b.UTC()
	const layout = "2006-01-02 15:04:05 UTC"
	switch {
	case a.Truncate(24*time.Hour) != b.Truncate(24*time.Hour):
		return fmt.Sprintf("on the harness's clock the claim was at %s and the redelivery at %s, on another UTC day", a.Format(layout), b.Format(layout))
	case a.Truncate(time.Hour) != b.Truncate(time.Hour):
		return fmt.Sprintf("on the harness's clock the claim was at %s and the redelivery at %s, in another UTC hour", a.Format(layout), b.Format(layout))
	}
	return ""
}

// span names the interval from a to b for messages.
func (tl *timeline) span(a, b time.Time) string {
	if from, to := tl.at(a), tl.at(b); from != to {
		return "from " + from + " to " + to
	}
	return "at " + tl.at(a)
}

// purge is one purge the harness made and what came of it.
type purge struct {
	at, cutoff time.Time
	removed    int64
	err        error
}

// purge asks instance to purge with cutoff = now - W.
func (r retention) purge(ctx context.Context, play *harness.Play, tl *timeline, instance int) purge {
	p := purge{at: tl.Now()}
	p.cutoff = p.at.Add(-r.window)
	p.removed, p.err = play.Purge(ctx, instance, p.cutoff)
	return p
}

func (p purge) describe(tl *timeline) string {
	if p.err != nil {
		return fmt.Sprintf("the purge at %s (cutoff %s) failed: %v", tl.at(p.at), tl.at(p.cutoff), p.err)
	}
	return fmt.Sprintf("the purge at %s (cutoff %s) reported %d removed", tl.at(p.at), tl.at(p.cutoff), p.removed)
}

// notApplied returns a problem when the initial delivery of ev did not end
// Applied: the play then has no claim to keep or expire.
func notApplied(ev adapters.Event, tries []harness.Attempt) string {
	last := tries[len(tries)-1]
	if last.Acked() && last.Outcome == adapters.Applied {
		return ""
	}
	return fmt.Sprintf("the first delivery of %s ended %s after %d attempts; expected Applied, so the play has no claim to keep or expire",
		ev, last.Result(), len(tries))
}

// The ids of the fixture and its rules, written once, here: the
// catalogue and internal/catalogid are generated from the definition
// below. They are stable: labels, reports and other tools use them.
const (
	retentionExpiryID = "retention-expiry"

	retentionExpiryKeptInsideWindow    = "retention-expiry.kept-inside-window"
	retentionExpiryPurgedAfterWindow   = "retention-expiry.purged-after-window"
	retentionExpiryConcurrentPurgeSafe = "retention-expiry.concurrent-purge-safe"
	retentionExpiryStateBounded        = "retention-expiry.state-bounded"
)

// retentionExpiryDefinition is the fixture's catalogue entry, with
// its rules' reasons and usual suspects, and its page in docs/.
func retentionExpiryDefinition() Definition {
	return Definition{
		Page: DocPage{File: "retention.md", Title: "retention of deduplication state"},
		Fixture: fixtures.Fixture{
			ID:       retentionExpiryID,
			Verifies: []string{"redelivery_window_s", "accepts_clock"},
			Requires: []fixtures.Requirement{catalogid.NeedsRedeliveryWindow},
			Doc:      "With the harness's clock (or, for implementations that cannot take it, real time and a short declared window W): deliver at t0; purge and redeliver at t0+W-ε; purge at t0+W+ε and redeliver to the instance that purged; purge again and again, on both instances, while first deliveries of new events and redeliveries of events inside the window go on, then redeliver every one of them; and drive many events through many windows with periodic purges, then redeliver the first of them.",
			Rules: []fixtures.Rule{
				{
					ID: retentionExpiryKeptInsideWindow, Level: fixtures.Must,
					Doc:     "Inside the declared redelivery window a purge keeps the event recognised: after a purge at t0+W-ε, a redelivery of the event claimed at t0 is Duplicate, and the ledger holds its one effect.",
					Reason:  seedWindow,
					Suspect: "dedup state purged inside the redelivery window (a retention shorter than the broker's redelivery window)",
					Changed: "since 0.2.0 it is judged by the answers and the ledger; the rows of the implementation's tables are evidence, no longer required, so state kept outside the play's schema is judged the same.",
				},
				{
					ID: retentionExpiryPurgedAfterWindow, Level: fixtures.Must,
					Doc:     "After the window a purge removes the event's state: after a purge at t0+W+ε, a redelivery to the instance that purged is Applied again, and the implementation's tables in the play's schema, if it keeps any, hold no row.",
					Reason:  "Dedup state kept for ever grows without bound; the window is the contract that makes removing it safe.",
					Suspect: "no purge at all, or a purge that ignores its cutoff",
					Changed: "since 0.2.0 the answer after the purge is judged (it was information only), alone when the implementation keeps no table in the play's schema.",
				},
				{
					ID: retentionExpiryConcurrentPurgeSafe, Level: fixtures.Must,
					Doc:     "Purges that run while deliveries go on, on both instances, lose no claim: every event claimed before or during them, inside the window, is Duplicate whenever it is redelivered, during or after the purges, and the ledger holds its one effect.",
					Reason:  "Purges run from a cron or a background loop while every instance goes on claiming; they must only ever remove expired state, never a claim committed while they run.",
					Suspect: "a purge that removes by the wrong cutoff, or that rebuilds or moves the marker table while claims go on (copy, drop and rename), losing the claims made meanwhile",
					Changed: "since 0.2.0 events first delivered while the purges run are judged too: before, only events claimed before them were.",
				},
				{
					ID: retentionExpiryStateBounded, Level: fixtures.Must,
					Doc:     "Over many windows with periodic purges, what was claimed more than a window before the last purge is forgotten (a redelivery of it is Applied again), and the implementation's tables in the play's schema, if it keeps any, stay bounded by the window, not by the history.",
					Reason:  seedWindow + " No longer: state proportional to history is a slow outage.",
					Suspect: "a purge that never runs, or removes nothing",
					Changed: "since 0.2.0 the answers are judged first (a redelivery of what was claimed more than a window before the last purge is Applied again), alone when the implementation keeps no table in the play's schema.",
				},
			},
		},
	}
}

func (s *state) retentionExpiry() {
	// The fixture needs a window it can play, which the declaration alone
	// decides: it is known when the tree is built.
	r := newRetention(s.applies(retentionExpiryID, nil), s.adapter.Declares)
	s.describeFixture(retentionExpiryID, func() {
		s.retentionOneEvent(r)
		s.retentionPurgeRace(r)
		s.retentionManyWindows(r)
	})
}

// retentionOneEvent takes one event through its window: it must be
// recognised at t0+W-ε, after a purge, and forgotten after a purge at
// t0+W+ε.
func (s *state) retentionOneEvent(r retention) {
	s.group("one-event", "one event through its window", func() {
		var (
			ev          = newEvent(retentionExpiryID, "window")
			tl          *timeline
			schema      string
			claimedBy   time.Time // the first delivery ran from tl.t0 to claimedBy
			reclaimed   bool      // the redelivery inside the window claimed the event again
			first       []harness.Attempt
			inside      purge
			keptInside  stored
			redelivery  []harness.Attempt
			redelivered time.Time
			effects     []ledger.Entry
			history     []harness.Attempt
			after       purge
			keptAfter   stored
			late        []harness.Attempt // after expiry, to the instance that purged
			lateAt      time.Time
		)
		// Two instances to build; the first delivery, the redelivery
		// inside the window and the one after it, each until terminal; two
		// purges; in real time, two windows of waiting.
		pn := s.play(retentionExpiryID+" / one event through its window", work{calls: 2 + 2, waits: r.realTime(2 * (r.window + r.eps))}.plus(untilTerminal(3)))
		pn.gather(func(ctx context.Context) {
			s.cfg.logf("retention-expiry: %s", r)
			if r.unsupported != "" {
				return
			}
			play := pn.begin(ctx)
			schema = play.Schema()
			tl = newTimeline(play, s.rand("retention one event t0"), r.window-r.eps)
			first = play.DeliverUntilTerminal(ctx, 1, ev)
			claimedBy = tl.Now()

			must(tl.AdvanceTo(ctx, tl.t0.Add(r.window-r.eps)))
			inside = r.purge(ctx, play, tl, 1)
			var err error
			keptInside, err = storedState(ctx, play)
			must(err)
			redelivered = tl.Now()
			redelivery = play.DeliverUntilTerminal(ctx, 2, ev)
			effects, err = play.Effects(ctx, ev)
			must(err)
			history = play.History(ev)
			// A redelivery that claimed the event again (a violation of
			// kept-inside-window) starts a new window: expiry is judged
			// from the last claim, so each rule reports only its own fault.
			if slices.ContainsFunc(redelivery, func(a harness.Attempt) bool { return a.Acked() && a.Outcome == adapters.Applied }) {
				reclaimed, claimedBy = true, tl.Now()
			}

			must(tl.AdvanceTo(ctx, claimedBy.Add(r.window+r.eps)))
			after = r.purge(ctx, play, tl, 1)
			keptAfter, err = storedState(ctx, play)
			must(err)
			// To the instance that purged: whether a purge removed the
			// event's state is asked of the instance that ran it.
			lateAt = tl.Now()
			late = play.DeliverUntilTerminal(ctx, 1, ev)
			s.cfg.logf("retention-expiry (one event): %s after the purge at %s, %s after the purge at %s; a redelivery after it, at %s, ended %s",
				keptInside, tl.at(inside.at), keptAfter, tl.at(after.at), tl.at(lateAt), late[len(late)-1].Result())
		})

		pn.judgedRule(retentionExpiryKeptInsideWindow, func() judgement {
			if j := r.applies(); j.final() {
				return j
			}
			var problems []string
			hint := ""
			if p := notApplied(ev, first); p != "" {
				problems = append(problems, p)
			}
			switch {
			case inside.err != nil:
				problems = append(problems, inside.describe(tl))
			case !inside.cutoff.Before(tl.t0):
				// The purge may rightly have removed the marker: what
				// follows proves nothing about the window.
				if len(problems) == 0 {
					return notSupported(fmt.Sprintf("inconclusive: the harness was late, it purged at %s with a cutoff after the claim at t0, so the play proves nothing about the window (a loaded machine in real-time mode; run it again)",
						tl.at(inside.at)))
				}
				return judgement{problems: problems}
			}
			last := redelivery[len(redelivery)-1]
			if !last.Acked() || last.Outcome != adapters.Duplicate {
				msg := fmt.Sprintf("after %s, the redelivery at %s (attempt %d), %s after the claim and inside the window of %s, ended %s; expected Duplicate",
					inside.describe(tl), tl.at(redelivered), last.Delivery.Attempt, tl.since(tl.t0, redelivered), shortdur.Format(r.window), last.Result())
				if cal := tl.calendar(tl.t0, redelivered); cal != "" {
					msg += "; " + cal
					if keptInside.rows > 0 && last.Acked() && last.Outcome == adapters.Applied {
						hint = "the key depends on the calendar (the claim's UTC day or hour): the implementation's tables still held rows after the purge, yet the redelivery on another day claimed the event again"
					}
				}
				problems = append(problems, msg)
			}
			if len(effects) != 1 {
				problems = append(problems, fmt.Sprintf("the ledger holds %d effects of %s after the redelivery inside the window; expected exactly one", len(effects), ev))
			}
			if len(problems) == 0 {
				if keptInside.tables == 0 {
					return judgement{note: fmt.Sprintf("the implementation keeps no table in the play's schema (%s), so the play judged its answers alone: after %s, the redelivery at %s was Duplicate, and the ledger holds one effect",
						schema, inside.describe(tl), tl.at(redelivered))}
				}
				return judgement{}
			}
			// What the harness saw of the stored state, as evidence
			// beside the answers: where the implementation keeps its state
			// is its own business.
			problems = append(problems, "after that purge "+keptInside.describe(schema))
			problems = append(problems, harness.DescribeEvent(ev, effects, history))
			return judgement{problems: problems, hint: hint}
		})
		pn.judgedRule(retentionExpiryPurgedAfterWindow, func() judgement {
			if j := r.applies(); j.final() {
				return j
			}
			var problems []string
			if p := notApplied(ev, first); p != "" {
				problems = append(problems, p)
			}
			if after.err != nil {
				return judgement{problems: append(problems, after.describe(tl))}
			}
			claim := "claimed"
			if reclaimed {
				claim = "claimed again by the redelivery inside the window,"
			}
			age := fmt.Sprintf("was %s by %s and is %s old, past the window of %s", claim, tl.at(claimedBy), tl.since(claimedBy, after.at), shortdur.Format(r.window))
			last := late[len(late)-1]
			forgot := last.Acked() && last.Outcome == adapters.Applied
			if last.Acked() && !forgot {
				problems = append(problems, fmt.Sprintf("after %s, a redelivery of %s to instance 1, which ran the purge, ended %s (attempt %d): the implementation still recognised the event, which %s; expected Applied, its state removed",
					after.describe(tl), ev, last.Result(), last.Delivery.Attempt, age))
			}
			if keptAfter.rows != 0 {
				problems = append(problems, fmt.Sprintf("after %s, the implementation's tables in the play's schema still hold %s; expected none: the only event, %s, %s",
					after.describe(tl), countRows(keptAfter.rows), ev, age))
			}
			switch {
			case len(problems) > 0:
				return judgement{problems: problems}
			case !last.Acked() && keptAfter.tables == 0:
				return notSupported(fmt.Sprintf("inconclusive: after %s, a redelivery of %s ended %s, and the implementation keeps no table in the play's schema (%s), so the play shows nothing about whether the purge removed its state",
					after.describe(tl), ev, last.Result(), schema))
			case !last.Acked():
				return judgement{note: fmt.Sprintf("after %s, the implementation's tables in the play's schema hold no row; a redelivery after it ended %s", after.describe(tl), last.Result())}
			}
			note := fmt.Sprintf("after %s, a redelivery of %s at %s to instance 1, which ran the purge, ended Applied: the implementation no longer recognised the event", after.describe(tl), ev, tl.at(lateAt))
			if keptAfter.tables == 0 {
				note += fmt.Sprintf("; it keeps no table in the play's schema (%s), so the play judged that answer alone", schema)
			}
			return judgement{note: note}
		})
	})
}

// stored is what the harness sees of the state an implementation keeps in
// the play's schema: how many tables it has there, and their rows. It is
// evidence beside the answers, never instead of them: an implementation
// may keep its state elsewhere.
type stored struct {
	tables int
	rows   int64
}

// storedState counts the implementation's tables in the play's schema and
// their rows.
func storedState(ctx context.Context, play *harness.Play) (stored, error) {
	tables, err := play.StateTables(ctx)
	if err != nil {
		return stored{}, err
	}
	rows, err := play.StateRows(ctx)
	if err != nil {
		return stored{}, err
	}
	return stored{tables: len(tables), rows: rows}, nil
}

func (st stored) String() string {
	if st.tables == 0 {
		return "no table"
	}
	return countRows(st.rows)
}

// describe says what the harness saw in schema, the play's.
func (st stored) describe(schema string) string {
	if st.tables == 0 {
		return fmt.Sprintf("the implementation keeps no table in the play's schema (%s): the harness cannot see its state", schema)
	}
	return fmt.Sprintf("the implementation's tables in the play's schema held %s", countRows(st.rows))
}

// racePurge is one purge of the purge race, with the instance that ran it
// and when it ran in real time, as offsets from the play's start (as
// [harness.Attempt.Started] and Ended are), so that deliveries can be
// placed against it whichever clock the play runs on.
type racePurge struct {
	purge
	instance int
	from, to time.Duration
}

// raceEvent is one event of the purge race and every delivery of it, in
// chains of deliveries until terminal.
type raceEvent struct {
	ev adapters.Event
	// fresh marks an event first delivered during the race; the others
	// were claimed half a window before it.
	fresh bool
	// instance is the instance that delivered the event first.
	instance int
	// from and to bound, for a new event, the harness's call that
	// delivered it first, until terminal, as offsets from the play's
	// start.
	from, to time.Duration
	first    []harness.Attempt   // the first delivery: during the race, or before it
	during   [][]harness.Attempt // redeliveries during the race
	after    []harness.Attempt   // the redelivery after the purges
	effects  []ledger.Entry
	history  []harness.Attempt
}

// problem says how the event's deliveries break what a purge must keep: a
// new event's first delivery Applied, every later delivery Duplicate, and
// one effect, by the attempt that was Applied. "" when they do not.
func (e *raceEvent) problem() string {
	chains := append(append([][]harness.Attempt{e.first}, e.during...), e.after)
	claim, from := 0, 0 // the attempt acknowledged Applied; the first chain judged
	if !e.fresh {
		// Claimed before the race: notApplied reports a first delivery
		// that was not Applied.
		if last := e.first[len(e.first)-1]; last.Acked() && last.Outcome == adapters.Applied {
			claim = last.Delivery.Attempt
		}
		from = 1
	}
	var wrong []string
	for i := from; i < len(chains); i++ {
		last := chains[i][len(chains[i])-1]
		what, want := "a redelivery during the purges", adapters.Duplicate
		switch {
		case i == 0:
			what, want = "the first delivery", adapters.Applied
		case i == len(chains)-1:
			what = "the redelivery after the purges"
		}
		switch {
		case !last.Acked() || last.Outcome != want:
			wrong = append(wrong, fmt.Sprintf("%s, on instance %d, ended %s (attempt %d)", what, last.Instance, last.Result(), last.Delivery.Attempt))
		case want == adapters.Applied:
			claim = last.Delivery.Attempt
		}
	}
	switch {
	case len(e.effects) != 1:
		wrong = append(wrong, fmt.Sprintf("the ledger holds %d effects of it", len(e.effects)))
	case claim == 0:
		wrong = append(wrong, fmt.Sprintf("its one effect in the ledger is by attempt %d, which was not acknowledged Applied", e.effects[0].Attempt))
	case e.effects[0].Attempt != claim:
		wrong = append(wrong, fmt.Sprintf("its one effect in the ledger is by attempt %d, not by attempt %d, which was acknowledged Applied", e.effects[0].Attempt, claim))
	}
	return strings.Join(wrong, "; ")
}

// firstOverlap returns the number (from 1) of the first purge that ran
// while e's first delivery was in flight, and 0 when none did.
func (e *raceEvent) firstOverlap(purges []racePurge) int {
	for i, p := range purges {
		if e.from < p.to && e.to > p.from {
			return i + 1
		}
	}
	return 0
}

// sideBySide delivers each of events to instance n until terminal, all at
// once, and returns their attempts in the order of events.
func (s *state) sideBySide(ctx context.Context, play *harness.Play, n int, events []adapters.Event) [][]harness.Attempt {
	tries := make([][]harness.Attempt, len(events))
	var wg sync.WaitGroup
	for i, ev := range events {
		wg.Add(1)
		go func() {
			defer s.recoverGather(ctx)
			defer wg.Done()
			tries[i] = play.DeliverUntilTerminal(ctx, n, ev)
		}()
	}
	wg.Wait()
	return tries
}

// retentionPurgeRace purges, again and again, on both instances, while
// deliveries go on until the last purge has ended: first deliveries of
// new events and redeliveries of events claimed half a window before,
// from raceContenders deliveries side by side on both instances; each
// purge starts while a new event's first delivery is in flight.
// Afterwards every event is redelivered: the purges must have removed
// only expired state, and never a claim made while they ran. The harness
// knows nothing of how the implementation purges: it only makes sure that
// claims are being made whenever a purge runs.
func (s *state) retentionPurgeRace(r retention) {
	s.group("purge-race", "purge while deliveries run", func() {
		var (
			tl                *timeline
			setup             []string // initial deliveries that were not Applied
			oldBy, recentFrom time.Time
			raceFrom, raceBy  time.Time
			recent, fresh     []*raceEvent
			purges            []racePurge
		)
		// Two instances to build; the old and the recent events, each
		// batch side by side; then the race: the purges one after another
		// after a delivery until terminal, while each contender makes at
		// most raceSteps deliveries until terminal; then the redeliveries
		// after it, side by side, at most raceSteps/2 new events and a
		// share of the recent ones for each contender; in real time, a
		// window of waiting.
		after := raceSteps/2 + retentionBatch/raceContenders + 1
		pn := s.play(retentionExpiryID+" / purge while deliveries run",
			work{calls: 2 + racePurges, waits: r.realTime(r.window + r.eps)}.plus(untilTerminal(2+raceSteps+after)))
		pn.gather(func(ctx context.Context) {
			if r.unsupported != "" {
				return
			}
			play := pn.begin(ctx)
			tl = newTimeline(play, nil, 0)
			batch := func(prefix string) []adapters.Event {
				events := make([]adapters.Event, retentionBatch)
				for i := range events {
					events[i] = newEvent(retentionExpiryID, fmt.Sprintf("%s-%d", prefix, i+1))
				}
				return events
			}
			old := batch("old")
			for i, tries := range s.sideBySide(ctx, play, 1, old) {
				if p := notApplied(old[i], tries); p != "" {
					setup = append(setup, p)
				}
			}
			oldBy = tl.Now()
			must(tl.AdvanceTo(ctx, oldBy.Add(r.window/2)))
			recentFrom = tl.Now()
			events := batch("recent")
			for i, tries := range s.sideBySide(ctx, play, 1, events) {
				if p := notApplied(events[i], tries); p != "" {
					setup = append(setup, p)
				}
				recent = append(recent, &raceEvent{ev: events[i], instance: 1, first: tries})
			}
			// The old events are now past the window, the recent ones
			// half a window and ε inside it.
			must(tl.AdvanceTo(ctx, oldBy.Add(r.window+r.eps)))

			// Build instance 2 before the race, so that construction is
			// not part of it. A factory failure shows up in the attempts.
			_, _ = play.Instance(ctx, 2)
			pn.at("the purge race")
			since := func() time.Duration { return time.Since(play.Started()) }
			// mu guards fresh, recent's during, the new events'
			// deliveries in flight and changed, which is closed and
			// replaced whenever their number changes.
			var mu sync.Mutex
			inFlight, changed := 0, make(chan struct{})
			moved := func(by int) {
				inFlight += by
				close(changed)
				changed = make(chan struct{})
			}
			stop, idle := make(chan struct{}), make(chan struct{})
			var contenders sync.WaitGroup
			for c := range raceContenders {
				contenders.Add(1)
				go func() {
					defer s.recoverGather(ctx)
					defer contenders.Done()
					n := 1 + c%2
					for k := range raceSteps {
						select {
						case <-stop:
							return
						default:
						}
						// Half the contenders start with a new event and
						// half with a recent one, so that even when every
						// delivery takes as long (a slow implementation
						// keeps them in step) new events are claimed
						// whenever a purge runs.
						if (c/2+k)%2 == 1 {
							e := recent[(c+k/2)%len(recent)]
							tries := play.DeliverUntilTerminal(ctx, n, e.ev)
							mu.Lock()
							e.during = append(e.during, tries)
							mu.Unlock()
							continue
						}
						e := &raceEvent{ev: newEvent(retentionExpiryID, fmt.Sprintf("new-%d-%d", c+1, k/2+1)), fresh: true, instance: n}
						mu.Lock()
						e.from = since()
						moved(1)
						mu.Unlock()
						e.first = play.DeliverUntilTerminal(ctx, n, e.ev)
						mu.Lock()
						e.to = since()
						moved(-1)
						fresh = append(fresh, e)
						mu.Unlock()
					}
				}()
			}
			go func() {
				contenders.Wait()
				close(idle)
			}()
			// Each purge starts while a new event's first delivery is in
			// flight (unless every contender has ended, which the
			// judgement then shows): its start is taken under mu, before
			// that delivery can record its end.
			raceFrom = tl.Now()
			for i := range racePurges {
				p := racePurge{instance: 1 + i%2}
				for {
					mu.Lock()
					busy, wake := inFlight > 0, changed
					if busy {
						p.from = since()
					}
					mu.Unlock()
					if busy {
						break
					}
					select {
					case <-wake:
						continue
					case <-idle:
					case <-ctx.Done():
					}
					p.from = since()
					break
				}
				p.purge = r.purge(ctx, play, tl, p.instance)
				p.to = since()
				purges = append(purges, p)
			}
			close(stop)
			<-idle
			raceBy = tl.Now()

			// Every event again, side by side: the new ones on the
			// instance that did not deliver them first.
			pn.at("the redeliveries after the purge race")
			all := append(slices.Clone(fresh), recent...)
			queue := make(chan *raceEvent, len(all))
			for i, e := range all {
				if !e.fresh {
					e.instance = 2 - i%2 // recent events alternate
				}
				queue <- e
			}
			close(queue)
			var redeliveries sync.WaitGroup
			for range 2 * raceContenders {
				redeliveries.Add(1)
				go func() {
					defer s.recoverGather(ctx)
					defer redeliveries.Done()
					for e := range queue {
						e.after = play.DeliverUntilTerminal(ctx, 3-e.instance, e.ev)
					}
				}()
			}
			redeliveries.Wait()
			for _, e := range all {
				fx, err := play.Effects(ctx, e.ev)
				must(err)
				e.effects, e.history = fx, play.History(e.ev)
			}
			var removed int64
			for _, p := range purges {
				removed += p.removed
			}
			s.cfg.logf("retention-expiry (purge race): %d purges %s reported %d removed, while %d contenders delivered %d new events and redelivered %d recent ones; %s",
				len(purges), tl.span(raceFrom, raceBy), removed, raceContenders, len(fresh), len(recent), raceCoverage(fresh, purges))
		})

		pn.judgedRule(retentionExpiryConcurrentPurgeSafe, func() judgement {
			if j := r.applies(); j.final() {
				return j
			}
			plain := make([]purge, len(purges))
			for i, p := range purges {
				plain[i] = p.purge
			}
			problems := append(purgeProblems(tl, plain), setup...)
			if last := purges[len(purges)-1]; !last.cutoff.Before(recentFrom) {
				// The purges may rightly have removed the recent markers:
				// the redeliveries prove nothing about the window.
				if len(problems) == 0 {
					return notSupported(fmt.Sprintf("inconclusive: the harness was late, the last purge at %s had a cutoff after the recent events' claims at %s, so the play proves nothing about the window (a loaded machine in real-time mode; run it again)",
						tl.at(last.at), tl.at(recentFrom)))
				}
				return judgement{problems: problems}
			}
			span := fmt.Sprintf("%d purges, on instances 1 and 2 in turn, with cutoffs up to %s, ran from %s to %s into the play (real time)",
				len(purges), tl.at(purges[len(purges)-1].cutoff), realOffset(purges[0].from), realOffset(purges[len(purges)-1].to))
			for _, e := range recent {
				if p := e.problem(); p != "" {
					problems = append(problems, fmt.Sprintf("%s, claimed at %s, inside the window of %s while the purges ran: %s; expected every redelivery Duplicate and one effect, by attempt %d\n%s",
						e.ev, tl.at(recentFrom), shortdur.Format(r.window), p, e.first[len(e.first)-1].Delivery.Attempt, harness.DescribeEvent(e.ev, e.effects, e.history)))
				}
			}
			lost := 0 // new events whose deliveries broke the rule
			for _, e := range fresh {
				p := e.problem()
				if p == "" {
					continue
				}
				if lost++; lost > raceDetails {
					continue
				}
				when := "while no purge ran"
				if k := e.firstOverlap(purges); k > 0 {
					pp := purges[k-1]
					when = fmt.Sprintf("while purge %d ran on instance %d, from %s to %s", k, pp.instance, realOffset(pp.from), realOffset(pp.to))
				}
				problems = append(problems, fmt.Sprintf("%s, new, delivered first from %s to %s into the play, %s: %s; expected its first delivery Applied, every redelivery Duplicate and one effect\n%s",
					e.ev, realOffset(e.from), realOffset(e.to), when, p, harness.DescribeEvent(e.ev, e.effects, e.history)))
			}
			if lost > 0 {
				summary := fmt.Sprintf("%s, while %d contenders on both instances delivered %d new events (%s) and redelivered the %d recent ones, claimed at %s; %d of the new events did not end with their first delivery Applied, every redelivery Duplicate and one effect",
					span, raceContenders, len(fresh), raceCoverage(fresh, purges), len(recent), tl.at(recentFrom), lost)
				if more := lost - raceDetails; more > 0 {
					summary += fmt.Sprintf(" (the first %d below, and %d more)", raceDetails, more)
				}
				// The summary leads the new events' details.
				at := len(problems) - min(lost, raceDetails)
				problems = slices.Insert(problems, at, summary)
			}
			if len(problems) > 0 {
				return judgement{problems: problems}
			}
			if overlapping(fresh, purges) == 0 {
				return notSupported(fmt.Sprintf("inconclusive: %s, but no first delivery of the %d new events ran while one did, so the play shows nothing about claims made during a purge (run it again)",
					span, len(fresh)))
			}
			return judgement{note: fmt.Sprintf("%s, while %d contenders on both instances delivered %d new events (%s) and redelivered the %d recent ones, claimed at %s; after the purges each was redelivered: every redelivery Duplicate, one effect each",
				span, raceContenders, len(fresh), raceCoverage(fresh, purges), len(recent), tl.at(recentFrom))}
		})
	})
}

// overlapping counts the events whose first delivery ran while a purge did.
func overlapping(events []*raceEvent, purges []racePurge) int {
	n := 0
	for _, e := range events {
		if e.firstOverlap(purges) > 0 {
			n++
		}
	}
	return n
}

// raceCoverage says how many of events were first delivered while a purge
// ran.
func raceCoverage(events []*raceEvent, purges []racePurge) string {
	return fmt.Sprintf("%d of them first delivered while a purge ran", overlapping(events, purges))
}

// realOffset names an offset from the play's start in real time, to the
// tenth of a millisecond: the purges and the deliveries that raced them
// take milliseconds.
func realOffset(d time.Duration) string { return shortdur.Format(d.Round(100 * time.Microsecond)) }

// purgeProblems reports the purges that failed.
func purgeProblems(tl *timeline, purges []purge) []string {
	failed := 0
	var first purge
	for _, p := range purges {
		if p.err != nil {
			if failed == 0 {
				first = p
			}
			failed++
		}
	}
	if failed == 0 {
		return nil
	}
	return []string{fmt.Sprintf("%d of %d purges failed; %s", failed, len(purges), first.describe(tl))}
}

// windowStep is one step of the many-windows play.
type windowStep struct {
	at     time.Time
	events []adapters.Event
	setup  []string // deliveries that were not Applied
	purge  purge
	kept   stored
}

// retentionManyWindows drives many events through many windows, a step of
// new events every quarter window, each step followed by a purge; then it
// redelivers the first step's events, more than a window old at the last
// purge: they must be forgotten, and the state the harness can count must
// stay bounded by the window.
func (s *state) retentionManyWindows(r retention) {
	s.group("many-windows", "many windows", func() {
		var (
			tl     *timeline
			schema string
			steps  []windowStep
			late   [][]harness.Attempt // the first step's events, after the last purge
		)
		series := func() string {
			rows := make([]string, len(steps))
			for i, st := range steps {
				rows[i] = fmt.Sprint(st.kept.rows)
				if st.kept.tables == 0 {
					rows[i] = "no table"
				}
			}
			return strings.Join(rows, ", ")
		}
		// One instance to build; every step delivers its events side by
		// side, each until terminal, and purges; then the first step's
		// events side by side; in real time, a quarter window between
		// steps.
		pn := s.play(retentionExpiryID+" / many windows", work{calls: 1 + r.steps, waits: r.realTime(time.Duration(r.steps) * r.window / stepsPerWindow)}.plus(untilTerminal(r.steps+1)))
		pn.gather(func(ctx context.Context) {
			if r.unsupported != "" {
				return
			}
			play := pn.begin(ctx)
			schema = play.Schema()
			tl = newTimeline(play, nil, 0)
			for i := range r.steps {
				pn.at("step %d of %d", i+1, r.steps)
				must(tl.AdvanceTo(ctx, tl.t0.Add(time.Duration(i)*r.window/stepsPerWindow)))
				st := windowStep{at: tl.Now()}
				for j := range stepEvents {
					st.events = append(st.events, newEvent(retentionExpiryID, fmt.Sprintf("step-%d-%d", i+1, j+1)))
				}
				for j, tries := range s.sideBySide(ctx, play, 1, st.events) {
					if p := notApplied(st.events[j], tries); p != "" {
						st.setup = append(st.setup, p)
					}
				}
				st.purge = r.purge(ctx, play, tl, 1)
				var err error
				st.kept, err = storedState(ctx, play)
				must(err)
				steps = append(steps, st)
			}
			pn.at("the first step's events again")
			late = s.sideBySide(ctx, play, 1, steps[0].events)
			s.cfg.logf("retention-expiry (many windows): rows after each of %d steps: %s", len(steps), series())
		})

		pn.judgedRule(retentionExpiryStateBounded, func() judgement {
			if j := r.applies(); j.final() {
				return j
			}
			var problems []string
			last := steps[len(steps)-1]
			// The answers first: what was claimed more than a window
			// before the last purge must be forgotten.
			var recognised []string
			answered := 0
			for i, tries := range late {
				a := tries[len(tries)-1]
				if !a.Acked() {
					continue
				}
				answered++
				if a.Outcome != adapters.Applied {
					recognised = append(recognised, fmt.Sprintf("%s ended %s (attempt %d)", steps[0].events[i], a.Result(), a.Delivery.Attempt))
				}
			}
			if len(recognised) > 0 {
				problems = append(problems, fmt.Sprintf("after %d steps, each a quarter window (%s) apart and ended by a purge, the last of them %s, the redeliveries of the first step's events, claimed at %s and %s old, past the window of %s, to the instance that purged were still recognised: %s; expected each Applied, its state removed",
					len(steps), shortdur.Format(r.window/stepsPerWindow), last.purge.describe(tl), tl.at(steps[0].at), tl.since(steps[0].at, last.purge.at), shortdur.Format(r.window), strings.Join(recognised, "; ")))
			}
			// Then what the harness can count, where it can.
			worst := 0
			for i, st := range steps {
				if st.kept.rows > steps[worst].kept.rows {
					worst = i
				}
			}
			if st := steps[worst]; st.kept.rows > stateBound {
				problems = append(problems, fmt.Sprintf("after step %d of %d (%s), the implementation's tables in the play's schema hold %s; expected at most %d: every quarter window (%s) a step delivers %d new events and purges, so a window of %s covers at most %d steps besides the current one, and one more is slack. Rows after each step's purge: %s",
					worst+1, len(steps), st.purge.describe(tl), countRows(st.kept.rows), stateBound, shortdur.Format(r.window/stepsPerWindow), stepEvents, shortdur.Format(r.window), stepsPerWindow, series()))
			}
			var purges []purge
			for _, st := range steps {
				purges = append(purges, st.purge)
			}
			problems = append(problems, purgeProblems(tl, purges)...)
			for _, st := range steps {
				problems = append(problems, st.setup...)
			}
			tables := slices.ContainsFunc(steps, func(st windowStep) bool { return st.kept.tables > 0 })
			switch {
			case len(problems) > 0:
				return judgement{problems: problems}
			case tables:
				return judgement{}
			case answered == 0:
				return notSupported(fmt.Sprintf("inconclusive: the implementation keeps no table in the play's schema (%s), and none of the redeliveries of the first step's events after the last purge was answered, so the play shows nothing about the state it keeps", schema))
			}
			return judgement{note: fmt.Sprintf("the implementation keeps no table in the play's schema (%s), so the play judged its answers alone: after %d purges, the last %s, each of the first step's %d events, claimed at %s, was Applied again when redelivered",
				schema, len(steps), last.purge.describe(tl), answered, tl.at(steps[0].at))}
		})
	})
}

// countRows says "1 row", "2 rows".
func countRows(n int64) string {
	if n == 1 {
		return "1 row"
	}
	return fmt.Sprintf("%d rows", n)
}
