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
	// retentionRedeliveries is how often each recent event is redelivered
	// during the purge race.
	retentionRedeliveries = 4
	// retentionPurges is how many purges run during the purge race.
	retentionPurges = 20
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

// purge asks worker to purge with cutoff = now - W.
func (r retention) purge(ctx context.Context, play *harness.Play, tl *timeline, worker int) purge {
	p := purge{at: tl.Now()}
	p.cutoff = p.at.Add(-r.window)
	p.removed, p.err = play.Purge(ctx, worker, p.cutoff)
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
			Requires: []fixtures.Requirement{catalogid.NeedsRedeliveryWindow},
			Doc:      "With the harness's clock (or, for implementations that cannot take it, real time and a short declared window W): deliver at t0; purge and redeliver at t0+W-ε; purge at t0+W+ε; purge while redeliveries of events inside the window run; and drive many events through many windows with periodic purges.",
			Rules: []fixtures.Rule{
				{
					ID: retentionExpiryKeptInsideWindow, Level: fixtures.Must,
					Doc:     "Inside the declared redelivery window a purge keeps the marker: a redelivery at t0+W-ε is Duplicate and the marker is still stored.",
					Reason:  seedWindow,
					Suspect: "dedup state purged inside the redelivery window (a retention shorter than the broker's redelivery window)",
				},
				{
					ID: retentionExpiryPurgedAfterWindow, Level: fixtures.Must,
					Doc:     "A purge after the window removes the marker, so state is bounded. (A redelivery after expiry then applies again; the harness reports it, outside the window, as information.)",
					Reason:  "Dedup state kept for ever grows without bound; the window is the contract that makes removing it safe.",
					Suspect: "no purge at all, or a purge that ignores its cutoff",
				},
				{
					ID: retentionExpiryConcurrentPurgeSafe, Level: fixtures.Must,
					Doc:     "Purges running concurrently with redeliveries of events inside the window never break deduplication.",
					Reason:  "Purges run from a cron or a background loop while deliveries continue; they must only ever remove expired state.",
					Suspect: "a purge that deletes by the wrong cutoff, or deletes and re-inserts markers",
				},
				{
					ID: retentionExpiryStateBounded, Level: fixtures.Must,
					Doc:     "Over many events and many windows with periodic purges, the stored state stays bounded by the window, not by the history.",
					Reason:  seedWindow + " No longer: state proportional to history is a slow outage.",
					Suspect: "a purge that never runs, or removes nothing",
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

// retentionOneEvent takes one event through its window: it must be kept
// (and recognised) at t0+W-ε and purged at t0+W+ε.
func (s *state) retentionOneEvent(r retention) {
	s.group("one-event", "one event through its window", func() {
		var (
			ev          = newEvent(retentionExpiryID, "window")
			tl          *timeline
			claimedBy   time.Time // the first delivery ran from tl.t0 to claimedBy
			reclaimed   bool      // the redelivery inside the window claimed the event again
			first       []harness.Attempt
			inside      purge
			rowsInside  int64
			redelivery  []harness.Attempt
			redelivered time.Time
			effects     []ledger.Entry
			history     []harness.Attempt
			after       purge
			rowsAfter   int64
			late        []harness.Attempt // after expiry: information only
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
			tl = newTimeline(play, s.rand("retention one event t0"), r.window-r.eps)
			first = play.DeliverUntilTerminal(ctx, 1, ev)
			claimedBy = tl.Now()

			must(tl.AdvanceTo(ctx, tl.t0.Add(r.window-r.eps)))
			inside = r.purge(ctx, play, tl, 1)
			var err error
			rowsInside, err = play.StateRows(ctx)
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
			rowsAfter, err = play.StateRows(ctx)
			must(err)
			lateAt = tl.Now()
			late = play.DeliverUntilTerminal(ctx, 2, ev)
			s.cfg.logf("retention-expiry (one event): %d rows after the purge at %s, %d after the purge at %s; %s",
				rowsInside, tl.at(inside.at), rowsAfter, tl.at(after.at), lateNote(tl, ev, lateAt, late))
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
			case rowsInside == 0:
				problems = append(problems, fmt.Sprintf("after %s, the implementation's tables hold no row; expected the marker of %s, claimed at t0 and %s old, inside the window of %s, to be kept",
					inside.describe(tl), ev, tl.since(tl.t0, inside.at), shortdur.Format(r.window)))
			}
			if last := redelivery[len(redelivery)-1]; !last.Acked() || last.Outcome != adapters.Duplicate {
				msg := fmt.Sprintf("the redelivery at %s (attempt %d), %s after the claim and inside the window of %s, ended %s; expected Duplicate",
					tl.at(redelivered), last.Delivery.Attempt, tl.since(tl.t0, redelivered), shortdur.Format(r.window), last.Result())
				if cal := tl.calendar(tl.t0, redelivered); cal != "" {
					msg += "; " + cal
					if rowsInside > 0 && last.Acked() && last.Outcome == adapters.Applied {
						hint = "the key depends on the calendar (the claim's UTC day or hour): the marker was still stored, yet the redelivery on another day claimed the event again"
					}
				}
				problems = append(problems, msg)
			}
			if len(effects) != 1 && len(problems) == 0 {
				problems = append(problems, fmt.Sprintf("expected exactly one effect after the redelivery inside the window; observed %d", len(effects)))
			}
			if len(problems) > 0 {
				problems = append(problems, harness.DescribeEvent(ev, effects, history))
			}
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
			switch {
			case after.err != nil:
				problems = append(problems, after.describe(tl))
			case rowsAfter != 0:
				claim := "claimed"
				if reclaimed {
					claim = "claimed again by the redelivery inside the window,"
				}
				problems = append(problems, fmt.Sprintf("after %s, the implementation's tables still hold %s; expected none: the only event, %s, was %s by %s and is %s old, past the window of %s",
					after.describe(tl), countRows(rowsAfter), ev, claim, tl.at(claimedBy), tl.since(claimedBy, after.at), shortdur.Format(r.window)))
			}
			if len(problems) > 0 {
				return judgement{problems: problems}
			}
			return judgement{note: lateNote(tl, ev, lateAt, late)}
		})
	})
}

// lateNote reports, as information, what a redelivery after expiry did.
func lateNote(tl *timeline, ev adapters.Event, at time.Time, late []harness.Attempt) string {
	last := late[len(late)-1]
	what := "the implementation forgot the event, as its window allows"
	if !last.Acked() || last.Outcome != adapters.Applied {
		what = "the implementation still recognised it or refused it; after the window either is allowed"
	}
	return fmt.Sprintf("information, outside the window: a redelivery of %s at %s, after the purge, ended %s (%s)",
		ev, tl.at(at), last.Result(), what)
}

// retentionPurgeRace purges, again and again, while events claimed half a
// window ago are redelivered: the purges must remove only expired markers.
func (s *state) retentionPurgeRace(r retention) {
	s.group("purge-race", "purge while redeliveries run", func() {
		var (
			tl                *timeline
			setup             []string // initial deliveries that were not Applied
			oldBy, recentFrom time.Time
			raceFrom, raceBy  time.Time
			recent            []adapters.Event
			recentFirst       [][]harness.Attempt
			purges            []purge
			redeliveries      [][][]harness.Attempt // by recent event, by redelivery
			effects           [][]ledger.Entry
			histories         [][]harness.Attempt
		)
		// Two instances to build; the old and the recent events, each until
		// terminal; then, at once, the purges one after another and the
		// redeliveries of each recent event; in real time, a window of
		// waiting.
		pn := s.play(retentionExpiryID+" / purge while redeliveries run",
			work{calls: 2 + retentionPurges, waits: r.realTime(r.window + r.eps)}.plus(untilTerminal(2*retentionBatch+retentionRedeliveries)))
		pn.gather(func(ctx context.Context) {
			if r.unsupported != "" {
				return
			}
			play := pn.begin(ctx)
			tl = newTimeline(play, nil, 0)
			for i := range retentionBatch {
				ev := newEvent(retentionExpiryID, fmt.Sprintf("old-%d", i+1))
				if p := notApplied(ev, play.DeliverUntilTerminal(ctx, 1, ev)); p != "" {
					setup = append(setup, p)
				}
			}
			oldBy = tl.Now()
			must(tl.AdvanceTo(ctx, oldBy.Add(r.window/2)))
			recentFrom = tl.Now()
			for i := range retentionBatch {
				ev := newEvent(retentionExpiryID, fmt.Sprintf("recent-%d", i+1))
				tries := play.DeliverUntilTerminal(ctx, 1, ev)
				if p := notApplied(ev, tries); p != "" {
					setup = append(setup, p)
				}
				recent = append(recent, ev)
				recentFirst = append(recentFirst, tries)
			}
			// The old events are now past the window, the recent ones
			// half a window and ε inside it.
			must(tl.AdvanceTo(ctx, oldBy.Add(r.window+r.eps)))

			// Build worker 2 before the race, so that construction is not
			// part of it. A factory failure shows up in the attempts.
			_, _ = play.Instance(ctx, 2)
			redeliveries = make([][][]harness.Attempt, len(recent))
			var ready, done sync.WaitGroup
			release := make(chan struct{})
			ready.Add(1 + len(recent))
			done.Add(1 + len(recent))
			go func() {
				defer s.recoverGather()
				defer done.Done()
				ready.Done()
				<-release
				for range retentionPurges {
					purges = append(purges, r.purge(ctx, play, tl, 1))
				}
			}()
			for i, ev := range recent {
				go func() {
					defer s.recoverGather()
					defer done.Done()
					ready.Done()
					<-release
					for range retentionRedeliveries {
						redeliveries[i] = append(redeliveries[i], play.DeliverUntilTerminal(ctx, 2, ev))
					}
				}()
			}
			ready.Wait()
			raceFrom = tl.Now()
			close(release)
			done.Wait()
			raceBy = tl.Now()

			for _, ev := range recent {
				fx, err := play.Effects(ctx, ev)
				must(err)
				effects = append(effects, fx)
				histories = append(histories, play.History(ev))
			}
			var removed int64
			for _, p := range purges {
				removed += p.removed
			}
			s.cfg.logf("retention-expiry (purge race): %d purges %s reported %d removed while %d redeliveries of %d recent events ran",
				len(purges), tl.span(raceFrom, raceBy), removed, len(recent)*retentionRedeliveries, len(recent))
		})

		pn.judgedRule(retentionExpiryConcurrentPurgeSafe, func() judgement {
			if j := r.applies(); j.final() {
				return j
			}
			problems := append(purgeProblems(tl, purges), setup...)
			if last := purges[len(purges)-1]; !last.cutoff.Before(recentFrom) {
				// The purges may rightly have removed the recent markers:
				// the redeliveries prove nothing about the window.
				if len(problems) == 0 {
					return notSupported(fmt.Sprintf("inconclusive: the harness was late, the last purge at %s had a cutoff after the recent events' claims at %s, so the play proves nothing about the window (a loaded machine in real-time mode; run it again)",
						tl.at(last.at), tl.at(recentFrom)))
				}
				return judgement{problems: problems}
			}
			for i, ev := range recent {
				var bad []string
				for j, tries := range redeliveries[i] {
					if last := tries[len(tries)-1]; !last.Acked() || last.Outcome != adapters.Duplicate {
						bad = append(bad, fmt.Sprintf("redelivery %d (attempt %d) ended %s", j+1, last.Delivery.Attempt, last.Result()))
					}
				}
				claim := recentFirst[i][len(recentFirst[i])-1].Delivery.Attempt
				if len(bad) == 0 && len(effects[i]) == 1 && effects[i][0].Attempt == claim {
					continue
				}
				what := fmt.Sprintf("%d effects", len(effects[i]))
				if len(bad) > 0 {
					what = strings.Join(bad, "; ")
				}
				problems = append(problems, fmt.Sprintf("%s was claimed at %s and redelivered %s, while purges with cutoffs up to %s ran: it was at most %s old, inside the window of %s, yet %s; expected every redelivery Duplicate and one effect, by attempt %d\n%s",
					ev, tl.at(recentFrom), tl.span(raceFrom, raceBy), tl.at(purges[len(purges)-1].cutoff), tl.since(recentFrom, raceBy), shortdur.Format(r.window),
					what, claim, harness.DescribeEvent(ev, effects[i], histories[i])))
			}
			return judgement{problems: problems}
		})
	})
}

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
	at    time.Time
	setup []string // deliveries that were not Applied
	purge purge
	rows  int64
}

// retentionManyWindows drives many events through many windows, a step of
// new events every quarter window, each step followed by a purge: the
// stored state must stay bounded by the window.
func (s *state) retentionManyWindows(r retention) {
	s.group("many-windows", "many windows", func() {
		var (
			tl    *timeline
			steps []windowStep
		)
		series := func() string {
			rows := make([]string, len(steps))
			for i, st := range steps {
				rows[i] = fmt.Sprint(st.rows)
			}
			return strings.Join(rows, ", ")
		}
		// One instance to build; every step delivers its events, each until
		// terminal, and purges; in real time, a quarter window between
		// steps.
		pn := s.play(retentionExpiryID+" / many windows", work{calls: 1 + r.steps, waits: r.realTime(time.Duration(r.steps) * r.window / stepsPerWindow)}.plus(untilTerminal(r.steps*stepEvents)))
		pn.gather(func(ctx context.Context) {
			if r.unsupported != "" {
				return
			}
			play := pn.begin(ctx)
			tl = newTimeline(play, nil, 0)
			for i := range r.steps {
				pn.at("step %d of %d", i+1, r.steps)
				must(tl.AdvanceTo(ctx, tl.t0.Add(time.Duration(i)*r.window/stepsPerWindow)))
				st := windowStep{at: tl.Now()}
				for j := range stepEvents {
					ev := newEvent(retentionExpiryID, fmt.Sprintf("step-%d-%d", i+1, j+1))
					if p := notApplied(ev, play.DeliverUntilTerminal(ctx, 1, ev)); p != "" {
						st.setup = append(st.setup, p)
					}
				}
				st.purge = r.purge(ctx, play, tl, 1)
				var err error
				st.rows, err = play.StateRows(ctx)
				must(err)
				steps = append(steps, st)
			}
			s.cfg.logf("retention-expiry (many windows): rows after each of %d steps: %s", len(steps), series())
		})

		pn.judgedRule(retentionExpiryStateBounded, func() judgement {
			if j := r.applies(); j.final() {
				return j
			}
			var problems []string
			worst := 0
			for i, st := range steps {
				if st.rows > steps[worst].rows {
					worst = i
				}
			}
			if st := steps[worst]; st.rows > stateBound {
				problems = append(problems, fmt.Sprintf("after step %d of %d (%s), the implementation's tables hold %s; expected at most %d: every quarter window (%s) a step delivers %d new events and purges, so a window of %s covers at most %d steps besides the current one, and one more is slack. Rows after each step's purge: %s",
					worst+1, len(steps), st.purge.describe(tl), countRows(st.rows), stateBound, shortdur.Format(r.window/stepsPerWindow), stepEvents, shortdur.Format(r.window), stepsPerWindow, series()))
			}
			var purges []purge
			for _, st := range steps {
				purges = append(purges, st.purge)
			}
			problems = append(problems, purgeProblems(tl, purges)...)
			for _, st := range steps {
				problems = append(problems, st.setup...)
			}
			return judgement{problems: problems}
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
