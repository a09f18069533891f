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

// Defaults of the fixture's tuning (see WithContenders and WithRounds).
const (
	DefaultContenders    = 16
	DefaultPlainRounds   = 20
	DefaultOverlapRounds = 10
)

// concurrentTuning is how hard the fixture plays: how many deliveries race
// for one event, and how many rounds run plainly and with a sleep past the
// claim. The failed-claimant variants play at most claimantRounds of the
// overlapping rounds.
type concurrentTuning struct {
	contenders, plainRounds, overlapRounds int
}

func defaultConcurrentTuning() concurrentTuning {
	return concurrentTuning{contenders: DefaultContenders, plainRounds: DefaultPlainRounds, overlapRounds: DefaultOverlapRounds}
}

func (t concurrentTuning) validate() error {
	switch {
	case t.contenders < 2:
		return fmt.Errorf("contenders must be at least 2, not %d", t.contenders)
	case t.plainRounds < 1 || t.overlapRounds < 1:
		return fmt.Errorf("rounds must be at least 1, not %d plain and %d overlapping", t.plainRounds, t.overlapRounds)
	}
	return nil
}

// WithContenders sets how many deliveries of one event race in each
// concurrent-delivery round.
func WithContenders(n int) Option { return func(c *config) { c.concurrent.contenders = n } }

// WithRounds sets how many concurrent-delivery rounds run plainly and how
// many with the database-side sleep that forces overlap.
func WithRounds(plain, overlapping int) Option {
	return func(c *config) { c.concurrent.plainRounds, c.concurrent.overlapRounds = plain, overlapping }
}

// overlapTries is how often an overlapping round is played again when its
// contenders provably did not overlap (a scheduling hiccup of a loaded
// machine), before the round is reported as proving nothing.
const overlapTries = 3

// roundResult is what one concurrent-delivery round left behind: the
// violations of each rule it found, or why it proved nothing.
type roundResult struct {
	oneEffect  []string
	oneApplied []string
	// inconclusive, when set, says why the round proved no overlap: its
	// contenders never provably overlapped, however often it was played
	// (the machine's doing), or its sleep never fired. It is never a
	// violation on its own: the round's answers and ledger are judged
	// all the same.
	inconclusive string
}

// The ids of the fixture and its rules, written once, here: the
// catalogue and internal/catalogid are generated from the definition
// below. They are stable: labels, reports and other tools use them.
const (
	concurrentDeliveryID = "concurrent-delivery"

	concurrentDeliveryOneEffect             = "concurrent-delivery.one-effect"
	concurrentDeliveryOneApplied            = "concurrent-delivery.one-applied"
	concurrentDeliveryFailedClaimantNotLost = "concurrent-delivery.failed-claimant-not-lost"
)

// concurrentDeliveryDefinition is the fixture's catalogue entry, with
// its rules' reasons and usual suspects, and its page in docs/.
func concurrentDeliveryDefinition() Definition {
	return Definition{
		Page: DocPage{File: "concurrency.md", Title: "duplicates, one after another and at once"},
		Fixture: fixtures.Fixture{
			ID: concurrentDeliveryID,
			Doc: "Release N deliveries of one event together through a barrier, spread over two instances with their own connections; repeat for many rounds, once plainly and once with a database-side hold after the claim, released once every contender is seen held, waiting on a lock or answered (250 ms at most), so every contender overlaps the winner's open transaction. " +
				"Then, in two more variants, a claimant holds the event in a database-side sleep (at the effect, or in COMMIT) while the other N-1 deliveries arrive; once they are seen waiting on a lock or have answered, the harness cancels the claimant's sleep, so its statement fails there (with the transaction around it, if it has one). " +
				"For these the harness plays a broker that treats the copies as one message: once any copy is acknowledged the message is done and nothing is redelivered; while none is, the unacknowledged copies are redelivered until one is acknowledged.",
			Rules: []fixtures.Rule{
				{
					ID: concurrentDeliveryOneEffect, Level: fixtures.Must,
					Doc:     "Each round's event has exactly one effect, however many deliveries raced for it.",
					Reason:  "Two instances handed the same event is ordinary at-least-once behaviour. " + seedTwice,
					Suspect: "check-then-insert without a unique constraint, or a dedup set held in process memory that other instances cannot see",
				},
				{
					ID: concurrentDeliveryOneApplied, Level: fixtures.Must,
					Doc:     "In each round exactly one delivery is acknowledged as Applied and every other as Duplicate, each with the event's effect committed when it answers.",
					Reason:  "The claim must be decided by the database's unique constraint, so exactly one contender wins and the others learn they lost. " + seedClaim,
					Suspect: "a race between checking for the marker and inserting it",
					Changed: "since 0.2.0 each answer is checked against the ledger the moment it is given: a Duplicate answered while the winner's effect is not yet committed fails the rule; before, only the count of Applied and Duplicate answers was judged.",
				},
				{
					ID: concurrentDeliveryFailedClaimantNotLost, Level: fixtures.Must,
					Doc:     "A copy is answered Duplicate only while the event's effect is committed: when the claimant fails while the others wait, none is answered too early, and the event ends with exactly one effect.",
					Reason:  "A claim that is not committed is not yet a fact: it may still roll back. A broker treats the copies of a message as one, so a copy acknowledged as Duplicate while the claimant's transaction is open ends the message, and if the claimant then fails, nothing applies the effect and nothing is redelivered. " + seedFailure + " " + seedTogeth,
					Suspect: "a delivery that finds the event busy answers Duplicate: a lock_timeout expiring (SQLSTATE 55P03) while it waits on another delivery's uncommitted claim, a failed pg_try_advisory_xact_lock, or a marker row skipped with SKIP LOCKED; it must wait for the claim's outcome, or return an error so that it is redelivered. Or the marker is committed in a transaction of its own before the effect, so the others find it although the claimant's effect rolls back",
					Changed: "since 0.2.0 a Duplicate answered while no effect of the event is committed fails the rule when it is given, whatever happens later: before, only a play whose event ended without exactly one effect failed it, so a claimant that retried inside its own delivery and applied the effect hid the false answers.",
				},
			},
		},
	}
}

func (s *state) concurrentDelivery() {
	s.describeFixture(concurrentDeliveryID, func() {
		variants := []struct {
			id, name string
			overlap  bool
		}{
			{id: "plain", name: "plain", overlap: false},
			{id: "overlap", name: "with a hold after the claim", overlap: true},
		}
		for _, v := range variants {
			s.group(v.id, v.name, func() {
				var rounds []roundResult
				n, plays := s.cfg.concurrent.plainRounds, 1
				if v.overlap {
					n, plays = s.cfg.concurrent.overlapRounds, overlapTries
				}
				// Two instances to build; in each play of a round the
				// contenders race in parallel, each delivered until
				// terminal.
				pn := s.play(concurrentDeliveryID+" / "+v.name, work{calls: 2}.plus(untilTerminal(n*plays))).takesLong()
				pn.gather(func(ctx context.Context) {
					play := pn.begin(ctx)
					rounds = make([]roundResult, 0, n)
					for round := 1; round <= n && ctx.Err() == nil && !pn.expired(); round++ {
						pn.at("round %d of %d (%d played)", round, n, round-1)
						rounds = append(rounds, s.concurrentRound(ctx, play, round, v.overlap))
					}
					s.cfg.logf("concurrent-delivery (%s): %d rounds of %d contenders", v.name, len(rounds), s.cfg.concurrent.contenders)
				})

				pn.judgedRule(concurrentDeliveryOneEffect, func() judgement {
					return collect(rounds, func(r roundResult) []string { return r.oneEffect })
				})
				pn.judgedRule(concurrentDeliveryOneApplied, func() judgement {
					return collect(rounds, func(r roundResult) []string { return r.oneApplied })
				})
			})
		}
		for _, v := range claimantVariants {
			s.failedClaimant(v)
		}
	})
}

// race is one release of contenders against one event.
type race struct {
	ev         adapters.Event
	sleep      *faults.Fault // the overlap gate; nil in plain rounds
	fired      int64         // how often the gate fired
	contenders [][]harness.Attempt
	effects    []ledger.Entry
	history    []harness.Attempt
}

// concurrentRound plays one round and judges it. An overlapping round whose
// contenders provably did not overlap is played again with a new event, up
// to overlapTries times, so that a loaded machine cannot make the harness
// fail a correct implementation.
func (s *state) concurrentRound(ctx context.Context, play *harness.Play, round int, overlap bool) roundResult {
	variant := "plain"
	if overlap {
		variant = "overlap"
	}
	prefix := fmt.Sprintf("round %d (%s, %d contenders): ", round, variant, s.cfg.concurrent.contenders)
	var r race
	var problem string
	var retry bool
	for try := 1; try <= overlapTries; try++ {
		r = s.race(ctx, play, newEvent(concurrentDeliveryID, fmt.Sprintf("%s-%d-%d", variant, round, try)), overlap)
		if problem, retry = r.overlapProblem(); !retry {
			break
		}
		s.cfg.logf("%s%s; playing the round again", prefix, problem)
	}

	var res roundResult
	switch {
	case retry:
		res.inconclusive = fmt.Sprintf("%s%s (played %d times)", prefix, problem, overlapTries)
	case problem != "":
		// The planned sleep did not fire: the round proved no overlap,
		// and its answers and ledger are judged all the same.
		res.inconclusive = prefix + problem
	}
	if len(r.effects) != 1 {
		res.oneEffect = append(res.oneEffect, prefix+r.describe())
	}
	var applied, duplicate int
	var odd []string
	for i, tries := range r.contenders {
		last := tries[len(tries)-1]
		switch {
		case last.Acked() && last.Outcome == adapters.Applied:
			applied++
		case last.Acked() && last.Outcome == adapters.Duplicate:
			duplicate++
		default:
			odd = append(odd, fmt.Sprintf("contender %d ended %s after %d attempts", i+1, last.Result(), len(tries)))
		}
	}
	if applied != 1 || len(odd) > 0 {
		msg := fmt.Sprintf("%d Applied and %d Duplicate; expected 1 Applied and %d Duplicate", applied, duplicate, len(r.contenders)-1)
		if len(odd) > 0 {
			msg += "; " + strings.Join(odd, "; ")
		}
		res.oneApplied = append(res.oneApplied, prefix+msg+"\n"+r.describe())
	} else if p := unbackedProblem(r.history); p != "" {
		res.oneApplied = append(res.oneApplied, prefix+p+"\n"+r.describe())
	}
	return res
}

// race releases s.cfg.concurrent.contenders deliveries of ev together, spread over two
// instances, each redelivered until acknowledged, and collects the evidence.
// The run's seed decides the order in which the contenders start and which
// instance each one gets (see lineUp). In an overlapping round a gate at
// the effect holds every delivery that reaches it, past its claim, until
// every contender is seen held there, waiting on a lock, or answered
// (see openWhenOverlapped), or for DefaultOverlapSleep at most: the hold
// ends on that evidence, not on a clock, and the clock bounds it only for
// contenders the database does not show waiting (polling a claim, waiting
// for a connection of their pool).
func (s *state) race(ctx context.Context, play *harness.Play, ev adapters.Event, overlap bool) race {
	r := race{ev: ev, contenders: make([][]harness.Attempt, s.cfg.concurrent.contenders)}
	var err error
	if overlap {
		r.sleep, err = play.Arm(ctx, faults.Plan{
			Namespace: ev.Namespace, ID: ev.ID, Point: faults.AtEffect,
			Action: faults.Gate, Sleep: DefaultOverlapSleep,
		})
		must(err)
	}
	// Build both instances before the race, so that construction is not part
	// of it. A factory failure shows up in the attempts.
	for instance := 1; instance <= 2; instance++ {
		_, _ = play.Instance(ctx, instance)
	}

	order, instances := s.lineUp(ev, len(r.contenders))
	var ready, done sync.WaitGroup
	var answered atomic.Int64
	release := make(chan struct{})
	for _, i := range order {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer s.recoverGather(ctx)
			defer done.Done()
			ready.Done()
			<-release
			first := play.Deliver(ctx, instances[i], ev)
			answered.Add(1)
			r.contenders[i] = play.RedeliverUntilTerminal(ctx, instances[i], ev, []harness.Attempt{first})
		}()
	}
	ready.Wait()
	close(release)
	if r.sleep != nil {
		must(openWhenOverlapped(ctx, play, r.sleep, len(r.contenders), func() int { return int(answered.Load()) }))
	}
	done.Wait()

	r.effects, err = play.Effects(ctx, ev)
	must(err)
	r.history = play.History(ev)
	if r.sleep != nil {
		r.fired, err = play.Fired(ctx, r.sleep)
		must(err)
	}
	return r
}

// overlapPoll is how often openWhenOverlapped looks at the contenders.
const overlapPoll = 10 * time.Millisecond

// openWhenOverlapped opens gate, which holds the deliveries of one event at
// its effect, once one of the n contenders is held there and every one is
// held, waits on a lock, or has answered its first delivery: all of them
// then overlap the held transaction. It returns at once when that cannot
// happen sooner than the gate opens itself (after DefaultOverlapSleep).
func openWhenOverlapped(ctx context.Context, play *harness.Play, gate *faults.Fault, n int, answered func() int) error {
	limit := time.NewTimer(DefaultOverlapSleep)
	defer limit.Stop()
	tick := time.NewTicker(overlapPoll)
	defer tick.Stop()
	for {
		held, err := gate.Held(ctx)
		if err != nil {
			return err
		}
		a, err := play.Activity(ctx)
		if err != nil {
			return err
		}
		if k := answered(); held >= 1 && int(held)+a.LockWaits+k >= n || k >= n {
			return gate.Open(ctx)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-limit.C:
			return nil // the gate has opened by itself
		case <-tick.C:
		}
	}
}

// lineUp returns the order in which a race of n contenders for ev starts
// them, and the instance (1 or 2) each contender delivers to: each
// instance gets half of them (one more for instance 1 when n is odd),
// shuffled. The run's seed and the event decide, so a run with the same
// seed lines every round up the same way, whichever fixtures it runs.
func (s *state) lineUp(ev adapters.Event, n int) (order, instances []int) {
	rng := s.rand("concurrent-delivery " + ev.String())
	instances = make([]int, n)
	for i := range instances {
		instances[i] = 1 + i%2
	}
	rng.Shuffle(n, func(i, j int) { instances[i], instances[j] = instances[j], instances[i] })
	return rng.Perm(n), instances
}

// describe is the round's evidence for a failure message.
func (r race) describe() string {
	fault := "no fault was planned"
	if r.sleep != nil {
		fault = fmt.Sprintf("fault %s fired %s", r.sleep, harness.Times(r.fired))
	}
	return harness.DescribeEvent(r.ev, r.effects, r.history) + "\n" + fault
}

// overlapProblem checks that an overlapping round proved what it claims: the
// planned sleep fired, and every contender was delivered before the winning
// delivery returned, so all of them overlapped its open, sleeping
// transaction. retry is true when the round should be played again.
func (r race) overlapProblem() (problem string, retry bool) {
	if r.sleep == nil {
		return "", false
	}
	if r.fired == 0 {
		return fmt.Sprintf("inconclusive: the planned fault (%s) did not fire: no delivery reached the effect", r.sleep), false
	}
	var winner *harness.Attempt
	for _, tries := range r.contenders {
		for i, a := range tries {
			if a.Acked() && a.Outcome == adapters.Applied && (winner == nil || a.Ended < winner.Ended) {
				winner = &tries[i]
			}
		}
	}
	if winner == nil {
		return "", false // no winner: the outcome rules report it
	}
	for i, tries := range r.contenders {
		if first := tries[0]; first.Started > winner.Ended {
			return fmt.Sprintf("contender %d was delivered %s after the winning delivery (attempt %d) had returned; the contenders did not overlap, so the round proves nothing",
				i+1, first.Started-winner.Ended, winner.Delivery.Attempt), true
		}
	}
	return "", false
}

// collect gathers the problems pick finds in each round. A round that
// proved nothing (see roundResult.inconclusive) is no problem: it is noted;
// when no round proved anything and nothing failed, the rule is
// not-supported here, since the machine never let the contenders overlap.
func collect(rounds []roundResult, pick func(roundResult) []string) judgement {
	var problems []string
	var note string
	var inconclusive []string
	for _, r := range rounds {
		problems = append(problems, pick(r)...)
		if r.inconclusive != "" {
			inconclusive = append(inconclusive, r.inconclusive)
		}
	}
	switch {
	case len(rounds) == 0:
		problems = append(problems, "no round ran")
	case len(problems) > 0:
	case len(inconclusive) == len(rounds):
		return notSupported(fmt.Sprintf("inconclusive: none of the %d rounds provably overlapped, so none proved anything (a heavily loaded machine; run again): %s",
			len(rounds), inconclusive[0]))
	case len(inconclusive) > 0:
		note = fmt.Sprintf("%d of %d rounds proved nothing and were not judged: %s", len(inconclusive), len(rounds), strings.Join(inconclusive, "; "))
	}
	return judgement{problems: problems, note: note}
}
