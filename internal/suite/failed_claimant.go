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
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// The failed-claimant variants of concurrent-delivery. A claimant holds the
// event in a sleep fault, past its claim, while the other deliveries
// arrive; once the harness sees them waiting, answered, or in flight for a
// while, it cancels the sleep, so the claimant's transaction fails where it
// sleeps and rolls back. The harness chooses that moment, so that no fixed
// sleep has to be long enough on a loaded machine.
const (
	// claimantRounds bounds the rounds of each variant; --overlap-rounds,
	// when smaller, bounds them too.
	claimantRounds = 3
	// claimantQuiet is how long nothing may change, once every contender
	// waits on a lock or has answered, before the harness fails the
	// claimant: a contender that gives up waiting (a short lock_timeout)
	// must have the time to do so and answer.
	claimantQuiet = 500 * time.Millisecond
	// claimantSettle is the same when not every contender can be seen
	// waiting or answered: the others are in flight where the database
	// does not show them waiting on a lock, polling the claim, or waiting
	// for a connection of their pool or for a process to start.
	claimantSettle = 1500 * time.Millisecond
	// claimantPoll is how often the harness looks at the contenders.
	claimantPoll = 20 * time.Millisecond
)

// claimantVariant is where a failed-claimant variant makes the claimant
// fail.
type claimantVariant struct {
	id    string
	name  string
	point faults.Point
	where string // for messages: "at the effect", "in COMMIT"
}

var claimantVariants = []claimantVariant{
	{id: "claimant-fails-at-effect", name: "a claimant failing at the effect while the others wait", point: faults.AtEffect, where: "at the effect"},
	{id: "claimant-fails-in-commit", name: "a claimant failing in COMMIT while the others wait", point: faults.AtCommit, where: "in COMMIT"},
}

// failedClaimant registers one failed-claimant variant and its rule.
func (s *state) failedClaimant(v claimantVariant) {
	s.group(v.id, v.name, func() {
		var plays []claimantResult
		n := min(s.cfg.concurrent.overlapRounds, claimantRounds)
		// Two instances to build; every play of every round delivers the
		// claimant and, at once, the contenders, then redelivers until a
		// copy is acknowledged; a round is played up to overlapTries times.
		pn := s.play(concurrentDeliveryID+" / "+v.name, work{calls: 2 + n*overlapTries*3}.plus(untilTerminal(n*overlapTries))).takesLong()
		pn.gather(func(ctx context.Context) {
			play := pn.begin(ctx)
			for round := 1; round <= n && ctx.Err() == nil && !pn.expired(); round++ {
				pn.at("round %d of %d (%d played)", round, n, round-1)
				plays = append(plays, s.claimantRound(ctx, play, v, round)...)
			}
			s.cfg.logf("concurrent-delivery (%s): %d plays of %d rounds, %d deliveries each", v.name, len(plays), n, s.cfg.concurrent.contenders)
		})

		pn.judgedRule(concurrentDeliveryFailedClaimantNotLost, func() judgement {
			problems, note, unproven := judgeClaimant(plays)
			if unproven != "" {
				return notSupported(unproven)
			}
			return judgement{problems: problems, note: note, hint: claimantHint(plays)}
		})
	})
}

// contender is one delivery released while the claimant held the event.
type contender struct {
	attempt harness.Attempt
	// whileHeld is set when the delivery returned before the harness
	// failed the claimant.
	whileHeld bool
}

// claimantWatch is what the harness saw of the contenders when it failed
// the claimant, and why it did then: how many waited on a lock (seen), had
// answered, or were still in flight without either, which a delivery
// that polls the claim is.
type claimantWatch struct {
	seen     harness.Activity
	answered int
	inFlight int
	why      string
}

// claimantResult is what one try of a failed-claimant round left behind: one event, its
// claimant, its contenders and what the broker did next.
type claimantResult struct {
	label            string
	ev               adapters.Event
	where            string
	claimantInstance int
	claimant         harness.Attempt
	contenders       []contender
	// redelivered are the broker's redeliveries, made when no copy was
	// acknowledged.
	redelivered []harness.Attempt
	sleep       *faults.Fault // the claimant's sleep, then its failure
	slept       int64
	watch       claimantWatch
	cancelled   []int // the claimant's backend, cancelled by the harness
	// inconclusive, when set, says why the play proves nothing; retry is
	// set when playing again may prove something.
	inconclusive string
	retry        bool
	effects      []ledger.Entry
	history      []harness.Attempt
}

// claimantRound plays round of variant v, again with a new event while a
// play provably did not overlap, up to overlapTries times. It returns every
// play: each is judged, since a lost event is lost whether or not the
// harness proved the overlap.
func (s *state) claimantRound(ctx context.Context, play *harness.Play, v claimantVariant, round int) []claimantResult {
	var plays []claimantResult
	for try := 1; try <= overlapTries && ctx.Err() == nil; try++ {
		p := s.playClaimant(ctx, play, v, round, try)
		plays = append(plays, p)
		if !p.retry {
			break
		}
		s.cfg.logf("%s: %s; playing the round again", p.label, p.inconclusive)
	}
	return plays
}

// playClaimant plays one event: the claimant is delivered first and held
// in a sleep fault at v's point; once the sleep has fired (the claimant has
// claimed the event), the other deliveries are released together; once
// they are seen waiting or have answered, the harness cancels the sleep and
// the claimant fails. Should the sleep run out first, a raise planned after
// it fails the claimant all the same. Then the broker redelivers, if no
// copy was acknowledged.
func (s *state) playClaimant(ctx context.Context, play *harness.Play, v claimantVariant, round, try int) claimantResult {
	ev := newEvent(concurrentDeliveryID, fmt.Sprintf("claimant-%s-%d-%d", v.point, round, try))
	label := fmt.Sprintf("round %d", round)
	if try > 1 {
		label += fmt.Sprintf(", try %d", try)
	}
	p := claimantResult{
		label: fmt.Sprintf("%s (claimant failing %s, %d deliveries)", label, v.where, s.cfg.concurrent.contenders),
		ev:    ev,
		where: v.where,
	}
	// The claimant holds the event for at most half a delivery's time, and
	// then fails; the harness fails it well before, by cutting the sleep
	// short. The first delivery to reach the point is the claimant's: it
	// is delivered alone, before the others.
	hold := s.cfg.deliveryTimeout / 2
	var err error
	p.sleep, err = play.Arm(ctx, faults.Plan{Namespace: ev.Namespace, ID: ev.ID, Times: 1, Point: v.point, Action: faults.SleepThenRaise, Sleep: hold})
	must(err)
	// Build both instances first, so that construction is not part of the
	// play. A factory failure shows up in the attempts.
	for instance := 1; instance <= 2; instance++ {
		_, _ = play.Instance(ctx, instance)
	}

	// The first in the line-up is the claimant: attempt 1.
	order, instances := s.lineUp(ev, s.cfg.concurrent.contenders)
	p.claimantInstance = instances[order[0]]
	claimantDone := make(chan harness.Attempt)
	go func() {
		defer s.recoverGather(ctx)
		defer close(claimantDone)
		p.claimant = play.Deliver(ctx, p.claimantInstance, ev)
	}()
	p.slept, err = s.awaitFired(ctx, play, p.sleep, claimantDone)
	must(err)

	race := s.releaseContenders(ctx, play, ev, order[1:], instances, p.slept == 0)
	if p.slept > 0 {
		p.watch, err = watchContenders(ctx, play, len(order)-1, race.answeredSoFar, claimantDone, hold*3/4)
		must(err)
		race.failing.Store(true)
		p.cancelled, err = play.CancelSleeping(ctx)
		must(err)
	}
	select {
	case <-claimantDone:
	case <-ctx.Done():
		must(fmt.Errorf("%s: the claimant's delivery of %s did not return before the fixture's timeout", p.label, ev))
	}
	race.done.Wait()
	p.contenders = race.results
	p.inconclusive, p.retry = p.overlapProblem()

	if !p.acknowledged() && ctx.Err() == nil {
		p.redelivered = play.RedeliverUntilTerminal(ctx, p.claimantInstance, ev, []harness.Attempt{p.claimant})[1:]
	}
	p.effects, err = play.Effects(ctx, ev)
	must(err)
	p.history = play.History(ev)
	p.slept, err = play.Fired(ctx, p.sleep)
	must(err)
	return p
}

// contenderRace is the contenders of a play, released together while the
// claimant holds the event.
type contenderRace struct {
	results  []contender // by contender; complete once done is
	answered atomic.Int64
	// failing is set once the harness fails the claimant: a contender
	// that answers later did not answer while the claimant held the event.
	failing atomic.Bool
	done    sync.WaitGroup
}

// releaseContenders delivers ev once to each of contenders, contender c to
// instance instances[c], all released together. failing says whether the
// claimant has failed already.
func (s *state) releaseContenders(ctx context.Context, play *harness.Play, ev adapters.Event, contenders, instances []int, failing bool) *contenderRace {
	r := &contenderRace{results: make([]contender, len(contenders))}
	r.failing.Store(failing)
	var ready sync.WaitGroup
	release := make(chan struct{})
	for i, c := range contenders {
		ready.Add(1)
		r.done.Add(1)
		go func() {
			defer s.recoverGather(ctx)
			defer r.done.Done()
			ready.Done()
			<-release
			a := play.Deliver(ctx, instances[c], ev)
			r.results[i] = contender{attempt: a, whileHeld: !r.failing.Load()}
			r.answered.Add(1)
		}()
	}
	ready.Wait()
	close(release)
	return r
}

// answeredSoFar counts the contenders that have answered.
func (r *contenderRace) answeredSoFar() int { return int(r.answered.Load()) }

// overlapProblem says why the play proves nothing, if it does not, and
// whether playing again may prove something.
func (p claimantResult) overlapProblem() (problem string, retry bool) {
	switch {
	case p.slept == 0:
		return fmt.Sprintf("the claimant (attempt %d on instance %d) never reached the point where it was to fail (%s): it ended %s, and the others were delivered after it",
			p.claimant.Delivery.Attempt, p.claimantInstance, p.sleep, p.claimant.Result()), false
	case len(p.cancelled) == 0:
		return fmt.Sprintf("the claimant was no longer sleeping when the harness came to fail it (%s): it failed at a moment the harness did not choose", p.watch.why), true
	case p.watch.seen.LockWaits+p.watch.answered+p.watch.inFlight == 0:
		return fmt.Sprintf("no contender was in flight, waiting on a lock or answered when the harness failed the claimant (%s): the contenders did not overlap its claim", p.watch.why), true
	}
	return "", false
}

// acknowledged reports whether the broker would stop redelivering the
// message: one of its copies, the claimant or a contender, was
// acknowledged (or refused for good).
func (p claimantResult) acknowledged() bool {
	if p.claimant.Terminal() {
		return true
	}
	for _, c := range p.contenders {
		if c.attempt.Terminal() {
			return true
		}
	}
	return false
}

// watchContenders watches the n contenders of a play until the harness
// should fail the claimant: when every contender waits on a lock or has
// answered and nothing changed for claimantQuiet; when nothing changed for
// claimantSettle, the contenders that neither wait on a lock nor answered
// being in flight all the same (polling the claim, say: deliveries in
// flight together overlap, whether or not the database shows them
// waiting); when limit has passed; or when the claimant ended by itself.
// It returns what it saw last.
func watchContenders(ctx context.Context, play *harness.Play, n int, answered func() int, claimantDone <-chan harness.Attempt, limit time.Duration) (claimantWatch, error) {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(claimantPoll)
	defer tick.Stop()
	var w claimantWatch
	since := time.Now()
	for first := true; ; first = false {
		a, err := play.Activity(ctx)
		if err != nil {
			return w, err
		}
		k := answered()
		if first || a != w.seen || k != w.answered {
			since = time.Now()
		}
		w.seen, w.answered, w.inFlight = a, k, max(n-k-a.LockWaits, 0)
		accounted := a.LockWaits + k
		switch still := time.Since(since); {
		case accounted >= n && still >= claimantQuiet:
			w.why = fmt.Sprintf("all %d contenders waited on a lock or had answered, unchanged for %s", n, claimantQuiet)
			return w, nil
		case still >= claimantSettle:
			w.why = fmt.Sprintf("%d of %d contenders waited on a lock or had answered and the other %d were in flight (polling, or waiting where the database does not show them), unchanged for %s", accounted, n, w.inFlight, claimantSettle)
			return w, nil
		}
		select {
		case <-ctx.Done():
			return w, context.Cause(ctx)
		case <-claimantDone:
			w.why = "the claimant's delivery had returned by itself"
			return w, nil
		case <-deadline.C:
			w.why = fmt.Sprintf("%s after the contenders were released, the longest the harness waits", limit)
			return w, nil
		case <-tick.C:
		}
	}
}

// judgeClaimant judges the plays of one variant: every play's event must
// end with exactly one effect. unproven is set when no violation was found
// and no play proved anything.
func judgeClaimant(plays []claimantResult) (problems []string, note, unproven string) {
	var proven, notes, why []string
	for _, p := range plays {
		if v := p.violation(); v != "" {
			problems = append(problems, v)
		}
		if p.inconclusive != "" {
			why = append(why, p.label+": "+p.inconclusive)
			continue
		}
		proven = append(proven, p.label)
		notes = append(notes, p.summary())
	}
	switch {
	case len(plays) == 0:
		return []string{"no round ran"}, "", ""
	case len(problems) > 0:
		return problems, "", ""
	case len(proven) == 0:
		return nil, "", "no round proved that the contenders overlapped the claimant's claim, on this machine now: " + strings.Join(why, "; ")
	}
	note = strings.Join(notes, "; ")
	if len(why) > 0 {
		note += fmt.Sprintf("; %d more plays proved nothing: %s", len(why), strings.Join(why, "; "))
	}
	return nil, note, ""
}

// claimantHint guesses at the cause of the plays' violations from what
// they show, "" when the rule's usual suspect fits: events applied more
// than once point to claims that do not exclude each other; events lost
// without any copy acknowledged Duplicate point to a claim the
// redeliveries never get past. Events lost to copies acknowledged
// Duplicate while the claimant held them are the usual suspect's.
func claimantHint(plays []claimantResult) string {
	var extra, stuck, suspect bool
	for _, p := range plays {
		switch n := len(p.effects); {
		case n == 1:
		case n > 1:
			extra = true
		case len(p.heldDuplicates()) > 0 && !p.claimant.Acked():
			suspect = true
		default:
			stuck = true
		}
	}
	var hints []string
	if extra {
		hints = append(hints, "deliveries that overlapped each applied the event, so the claim does not keep the others out: a check-then-insert without a unique constraint or a lock")
	}
	if stuck {
		hints = append(hints, "no copy was acknowledged Duplicate, yet none applied the effect once the claimant's statement failed: its claim outlives the failure of its effect (a marker committed before the effect, or a lease that never runs out), and the redeliveries never get past it")
	}
	if len(hints) == 0 {
		return "" // the usual suspect fits
	}
	if suspect {
		r, _ := fixtures.Lookup(concurrentDeliveryFailedClaimantNotLost)
		hints = append(hints, r.Suspect)
	}
	return strings.Join(hints, "; or ")
}

// heldDuplicates returns the contenders acknowledged as Duplicate while the
// claimant still held the event.
func (p claimantResult) heldDuplicates() []harness.Attempt {
	var out []harness.Attempt
	for _, c := range p.contenders {
		if c.whileHeld && c.attempt.Acked() && c.attempt.Outcome == adapters.Duplicate {
			out = append(out, c.attempt)
		}
	}
	return out
}

// violation returns what the play shows wrong, with its evidence, or "":
// a copy acknowledged while no effect of the event was committed, and an
// event that did not end with exactly one effect. It states what the
// harness did to the claimant and how the claimant's delivery ended,
// never what became of its claim, which the implementation decides (a
// claim committed on its own stays when the effect fails).
func (p claimantResult) violation() string {
	var parts []string
	if u := unbackedProblem(p.history); u != "" {
		parts = append(parts, u)
	}
	switch n := len(p.effects); {
	case n == 1:
	case n > 1:
		parts = append(parts, fmt.Sprintf("the event has %d effects; expected exactly one", n))
	default:
		parts = append(parts, "no delivery applied the effect; expected exactly one effect; "+p.brokerStory())
	}
	if len(parts) == 0 {
		return ""
	}
	msg := p.label + ": " + strings.Join(parts, "; ")
	if len(p.cancelled) > 0 {
		msg += fmt.Sprintf("; the harness failed the claimant's statement %s (attempt %d on instance %d) while the others were in flight, and that delivery ended %s",
			p.where, p.claimant.Delivery.Attempt, p.claimantInstance, p.claimant.Result())
	}
	return msg + "\n" + p.describe()
}

// brokerStory says why the broker stopped redelivering the message.
func (p claimantResult) brokerStory() string {
	for _, a := range p.history {
		if a.Terminal() {
			return fmt.Sprintf("the broker stopped redelivering when attempt %d on instance %d ended %s", a.Delivery.Attempt, a.Instance, a.Result())
		}
	}
	return fmt.Sprintf("no copy was acknowledged, even after %d redeliveries", len(p.redelivered))
}

// summary says, for a rule that held, what a play proved.
func (p claimantResult) summary() string {
	by := "no attempt"
	if len(p.effects) == 1 {
		by = fmt.Sprintf("attempt %d", p.effects[0].Attempt)
	}
	return fmt.Sprintf("%s: %d contenders waiting on a lock, %d answered (%d Duplicate) and %d otherwise in flight when the harness failed the claimant; %s applied the effect",
		p.label, p.watch.seen.LockWaits, p.watch.answered, len(p.heldDuplicates()), p.watch.inFlight, by)
}

// describe is the play's evidence for a failure message.
func (p claimantResult) describe() string {
	var b strings.Builder
	b.WriteString(harness.DescribeEvent(p.ev, p.effects, p.history))
	switch {
	case p.slept == 0:
		fmt.Fprintf(&b, "\nfault %s never fired", p.sleep)
	case len(p.cancelled) > 0:
		fmt.Fprintf(&b, "\nfault %s fired %s; the harness cancelled it when %s: it saw %s, and %d contenders had answered",
			p.sleep, harness.Times(p.slept), p.watch.why, p.watch.seen, p.watch.answered)
	default:
		fmt.Fprintf(&b, "\nfault %s fired %s and was no longer sleeping when the harness came to cancel it (%s)", p.sleep, harness.Times(p.slept), p.watch.why)
	}
	if p.inconclusive != "" {
		b.WriteString("\nthis play proves no overlap: " + p.inconclusive)
	}
	return b.String()
}
