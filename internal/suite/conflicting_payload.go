package suite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// firedPoll is how often the in-flight variant asks whether the sleep that
// holds the first delivery's transaction open has fired.
const firedPoll = 5 * time.Millisecond

// conflictPayload is one of the two payloads delivered under one identity.
type conflictPayload struct {
	name string // "P1" or "P2", for messages
	ev   adapters.Event
}

// digest is the payload's digest, as the ledger records it.
func (p conflictPayload) digest() string { return adapters.PayloadDigest(p.ev.Payload) }

// conflictPair returns two events with the identity id: P1, the ordinary
// payload, and P2, which differs from it by bytes.
func conflictPair(id string) (p1, p2 conflictPayload) {
	ev := newEvent(conflictingPayloadID, id)
	other := ev
	other.Payload = fmt.Appendf(nil, `{"fixture":%q,"id":%q,"copy":"conflicting"}`, conflictingPayloadID, id)
	return conflictPayload{name: "P1", ev: ev}, conflictPayload{name: "P2", ev: other}
}

// conflictResult is what one variant of the fixture left behind.
type conflictResult struct {
	// applied is the payload applied first: the one delivered first, or in
	// the in-flight variant the one whose transaction won. conflict is the
	// other one.
	applied, conflict conflictPayload
	// appliedTries, conflictTries and againTries are the deliveries of the
	// applied payload, of the conflicting copy, and of the applied payload
	// again, each until terminal.
	appliedTries, conflictTries, againTries []harness.Attempt
	effects                                 []ledger.Entry
	history                                 []harness.Attempt
	sleep                                   *faults.Fault // the in-flight variant's sleep; nil in the others
	fired                                   int64         // how often sleep fired
	// note, when not empty, tells how the in-flight variant's race went.
	note string
	// problem, when not empty, says why a play of the in-flight variant
	// proved nothing, so that it is played again: its deliveries did not
	// overlap. inconclusive, when not empty, says why the variant proved
	// nothing: its fault did not fire, or its deliveries never provably
	// overlapped, however often it was played, which is the machine's
	// doing. Either way the answers and the ledger are still judged.
	problem, inconclusive string
}

// The names of two of the fixture's variants, which conflictPattern reads.
const (
	conflictSequentialVariant = "sequential"
	conflictInFlightVariant   = "while the first is in flight"
)

// The ids of the fixture and its rules, written once, here: the
// catalogue and internal/catalogid are generated from the definition
// below. They are stable: labels, reports and other tools use them.
const (
	conflictingPayloadID = "conflicting-payload"

	conflictingPayloadNoSecondEffect         = "conflicting-payload.no-second-effect"
	conflictingPayloadConflictDetected       = "conflicting-payload.conflict-detected"
	conflictingPayloadOriginalStillDuplicate = "conflicting-payload.original-still-duplicate"
)

// conflictingPayloadDefinition is the fixture's catalogue entry, with
// its rules' reasons and usual suspects, and its page in docs/.
func conflictingPayloadDefinition() Definition {
	return Definition{
		Page: DocPage{File: "conflicts.md", Title: "payload conflicts"},
		Fixture: fixtures.Fixture{
			ID:       conflictingPayloadID,
			Verifies: []string{"conflict_policy"},
			Doc:      "Deliver the same identity again with a different payload: after the first delivery committed, while the first is still in flight (a database-side sleep holds it open), and with the conflicting copy arriving first. Payload equality is byte equality of the payload as delivered.",
			Rules: []fixtures.Rule{
				{
					ID: conflictingPayloadNoSecondEffect, Level: fixtures.Must,
					Doc:     "Under any policy, a conflicting copy never applies a second effect and never changes the stored one.",
					Reason:  "The identity was claimed; whatever the payload, applying again is a duplicate effect and replacing the effect silently rewrites history. " + seedClaim,
					Suspect: "the payload is part of the key, so a changed payload is treated as a new event; or, when double-delivery fails too, the claim lives in one instance's memory and the copy was delivered to the other instance",
				},
				{
					ID: conflictingPayloadConflictDetected, Level: fixtures.Must,
					Doc:     "The implementation declares a conflict policy, and a conflicting copy is answered Rejected (or an error wrapping ErrPayloadConflict), not Duplicate, and is not redelivered forever.",
					Reason:  seedPolicy + " Stripe and the IETF Idempotency-Key draft answer a reused key with a different body with 422. Treating the conflict as a plain duplicate is the bug AWS Lambda Powertools shipped in three languages.",
					Suspect: "the payload is not compared on conflict (only the identity is checked), or no policy is declared",
				},
				{
					ID: conflictingPayloadOriginalStillDuplicate, Level: fixtures.Must,
					Doc:     "After a conflicting copy, a redelivery of the payload that was applied is still Duplicate.",
					Reason:  "Handling a conflict must not disturb the claim: the original event is still delivered at least once more by the broker.",
					Suspect: "the conflicting copy overwrote the stored marker or digest",
				},
			},
		},
	}
}

func (s *state) conflictingPayload() {
	s.describeFixture(conflictingPayloadID, func() {
		variants := []struct {
			id, name string
			plays    int // how often the variant may be played
			play     func(ctx context.Context, play *harness.Play) conflictResult
		}{
			{id: "sequential", name: conflictSequentialVariant, plays: 1, play: func(ctx context.Context, play *harness.Play) conflictResult {
				p1, p2 := conflictPair("sequential")
				return s.conflictInTurn(ctx, play, p1, p2)
			}},
			{id: "in-flight", name: conflictInFlightVariant, plays: overlapTries, play: s.conflictInFlight},
			{id: "conflicting-first", name: "conflicting copy first", plays: 1, play: func(ctx context.Context, play *harness.Play) conflictResult {
				p1, p2 := conflictPair("conflicting-copy-first")
				return s.conflictInTurn(ctx, play, p2, p1)
			}},
		}
		for _, v := range variants {
			s.group(v.id, v.name, func() {
				var c conflictResult
				// Two instances to build; each play delivers the applied
				// payload, the conflicting copy and the applied payload
				// again, each until terminal; the in-flight variant may
				// play up to overlapTries times.
				pn := s.play(conflictingPayloadID+" / "+v.name, work{calls: 2}.plus(untilTerminal(3*v.plays)))
				pn.gather(func(ctx context.Context) {
					c = v.play(ctx, pn.begin(ctx))
				})

				pn.judgedRule(conflictingPayloadNoSecondEffect, func() judgement { return c.noSecondEffect() })
				pn.judgedRule(conflictingPayloadConflictDetected, func() judgement { return c.detected(s.adapter.Declares.ConflictPolicy) })
				pn.judgedRule(conflictingPayloadOriginalStillDuplicate, func() judgement { return c.originalStands() })
			})
		}
	})
}

// conflictInTurn delivers first until terminal, then other on the other
// instance, then first again.
func (s *state) conflictInTurn(ctx context.Context, play *harness.Play, first, other conflictPayload) conflictResult {
	c := conflictResult{applied: first, conflict: other}
	c.appliedTries = play.DeliverUntilTerminal(ctx, 1, first.ev)
	c.conflictTries = play.DeliverUntilTerminal(ctx, 2, other.ev)
	c.againTries = play.DeliverUntilTerminal(ctx, 1, first.ev)
	c.collect(ctx, play)
	return c
}

// conflictInFlight delivers P2 while P1's first attempt sits in its open
// transaction, past its claim and held at the effect by a sleep, then the
// winner again. A play
// whose deliveries provably did not overlap is played again with a new
// identity, up to overlapTries times, so that a loaded machine cannot make
// the harness fail a correct implementation.
func (s *state) conflictInFlight(ctx context.Context, play *harness.Play) conflictResult {
	var c conflictResult
	for try := 1; try <= overlapTries; try++ {
		var retry bool
		c, retry = s.conflictOverlapping(ctx, play, fmt.Sprintf("in-flight-%d", try))
		if !retry {
			break
		}
		if try == overlapTries {
			c.inconclusive = fmt.Sprintf("inconclusive: in each of %d plays the deliveries did not overlap (a heavily loaded machine; run again); the last: %s", overlapTries, c.problem)
			c.problem = ""
			break
		}
		s.cfg.logf("conflicting-payload (in flight), try %d: %s; playing the variant again", try, c.problem)
	}
	return c
}

// conflictOverlapping plays the in-flight variant once, for identity id.
// retry is true when the deliveries did not overlap.
//
// P1 wins by construction where the claim takes a lock (a unique key, an
// advisory lock): P2 waits for P1's transaction and then finds its marker.
// Under SERIALIZABLE the claim takes no lock and the first transaction to
// commit wins, so P2, which does not sleep, may win and P1's transaction be
// retried into a conflict. Both are serial histories; the winner is read
// from the ledger, and the rules hold the loser to being the conflicting
// copy.
func (s *state) conflictOverlapping(ctx context.Context, play *harness.Play, id string) (c conflictResult, retry bool) {
	p1, p2 := conflictPair(id)
	c = conflictResult{applied: p1, conflict: p2}
	var err error
	// A gate holds P1's first transaction at its effect, past its claim,
	// until P2 has answered, or for DefaultOverlapSleep at most: see
	// openWhenAnswered.
	c.sleep, err = play.Arm(ctx, faults.Plan{
		Namespace: p1.ev.Namespace, ID: p1.ev.ID, Times: 1, Point: faults.AtEffect,
		Action: faults.Gate, Sleep: DefaultOverlapSleep,
	})
	must(err)
	// Build both instances first, so that construction is not part of the
	// overlap. A factory failure shows up in the attempts.
	for instance := 1; instance <= 2; instance++ {
		_, _ = play.Instance(ctx, instance)
	}

	// P1's attempt 1 is reported on its own, so the wait below knows when
	// the sleep can no longer fire; its retries, if any, follow.
	attempt1 := make(chan harness.Attempt, 1)
	p1Done := make(chan []harness.Attempt, 1)
	go func() {
		defer s.recoverGather(ctx)
		a := play.Deliver(ctx, 1, p1.ev)
		attempt1 <- a
		p1Done <- play.RedeliverUntilTerminal(ctx, 1, p1.ev, []harness.Attempt{a})
	}()

	c.fired, err = s.awaitFired(ctx, play, c.sleep, attempt1)
	must(err)
	var p2Answered atomic.Int64
	p2Done := make(chan []harness.Attempt, 1)
	go func() {
		defer s.recoverGather(ctx)
		a := play.Deliver(ctx, 2, p2.ev)
		p2Answered.Store(1)
		p2Done <- play.RedeliverUntilTerminal(ctx, 2, p2.ev, []harness.Attempt{a})
	}()
	if c.fired > 0 {
		must(openWhenAnswered(ctx, c.sleep, func() bool { return p2Answered.Load() == 1 }))
	}
	var p2Tries []harness.Attempt
	select {
	case p2Tries = <-p2Done:
	case <-ctx.Done():
		must(fmt.Errorf("P2's delivery of %s did not return before the fixture's timeout", p2.ev))
	}
	var p1Tries []harness.Attempt
	select {
	case p1Tries = <-p1Done:
	case <-ctx.Done():
		must(fmt.Errorf("P1's delivery of %s did not return before the fixture's timeout", p1.ev))
	}
	c.appliedTries, c.conflictTries = p1Tries, p2Tries

	switch {
	case c.fired == 0:
		// A fault that did not fire proves nothing; what the answers
		// and the ledger show is still judged.
		c.inconclusive = fmt.Sprintf("inconclusive: the planned fault (%s) did not fire: P1's attempt 1 never reached the effect, and ended %s; P2 was delivered after it, not while it was in flight",
			c.sleep, p1Tries[0].Result())
	case p2Tries[0].Started > p1Tries[0].Ended:
		c.problem = fmt.Sprintf("P2 (attempt %d) was delivered %s after P1's attempt %d had returned; the deliveries did not overlap, so the variant proves nothing",
			p2Tries[0].Delivery.Attempt, p2Tries[0].Started-p1Tries[0].Ended, p1Tries[0].Delivery.Attempt)
		retry = true
	}

	effects, err := play.Effects(ctx, p1.ev)
	must(err)
	if len(effects) == 1 && effects[0].PayloadDigest == p2.digest() {
		c.applied, c.conflict = p2, p1
		c.appliedTries, c.conflictTries = p2Tries, p1Tries
		c.note = "P2 won although P1 had claimed first: P1's transaction, held open by the sleep, lost to P2's (as under SERIALIZABLE, where the first transaction to commit wins)"
		s.cfg.logf("conflicting-payload (in flight): %s", c.note)
	}
	c.againTries = play.DeliverUntilTerminal(ctx, 1, c.applied.ev)
	c.collect(ctx, play)
	return c, retry
}

// openWhenAnswered opens gate, which holds P1's transaction at its effect,
// once P2 has answered, and otherwise lets it open by itself after
// DefaultOverlapSleep. Unlike the rounds of concurrent-delivery (see
// openWhenOverlapped), the hold does not end when P2 is merely seen
// waiting on a lock: one delivery waits here, so the whole bound costs
// little, and a copy that gives up on an event it finds busy (a short
// lock_timeout, say 10 ms, answered Duplicate) must meet the open
// transaction for as long as it waits, or the variant would show its
// answer only when the poll happened to come late.
func openWhenAnswered(ctx context.Context, gate *faults.Fault, answered func() bool) error {
	limit := time.NewTimer(DefaultOverlapSleep)
	defer limit.Stop()
	tick := time.NewTicker(overlapPoll)
	defer tick.Stop()
	for !answered() {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-limit.C:
			return nil // the gate has opened by itself
		case <-tick.C:
		}
	}
	return gate.Open(ctx)
}

// awaitFired waits until sleep has fired, which proves that P1's attempt 1
// claimed the event and sits in its open transaction, or until that attempt
// ended without it firing. It returns how often the sleep fired.
func (s *state) awaitFired(ctx context.Context, play *harness.Play, sleep *faults.Fault, attempt1 <-chan harness.Attempt) (int64, error) {
	// The attempt ends within the delivery timeout and a grace period; the
	// deadline only guards the harness against itself.
	deadline := time.NewTimer(2*s.cfg.deliveryTimeout + 10*time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(firedPoll)
	defer tick.Stop()
	for {
		n, err := play.Fired(ctx, sleep)
		if err != nil || n > 0 {
			return n, err
		}
		select {
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		case <-deadline.C:
			return play.Fired(ctx, sleep)
		case <-attempt1:
			// Ended: the sleep fired during it or never will.
			return play.Fired(ctx, sleep)
		case <-tick.C:
		}
	}
}

// collect reads the ledger and the deliveries of the variant's identity.
func (c *conflictResult) collect(ctx context.Context, play *harness.Play) {
	var err error
	c.effects, err = play.Effects(ctx, c.applied.ev)
	must(err)
	c.history = play.History(c.applied.ev)
}

// describe is the variant's evidence for a failure message: the deliveries,
// which payload each carried, the effects, and the fault.
func (c conflictResult) describe() string {
	var b strings.Builder
	b.WriteString(harness.DescribeEvent(c.applied.ev, c.effects, c.history))
	for _, p := range []conflictPayload{c.applied, c.conflict} {
		var nums []string
		for _, a := range c.history {
			if string(a.Delivery.Payload) == string(p.ev.Payload) {
				nums = append(nums, fmt.Sprint(a.Delivery.Attempt))
			}
		}
		role := "applied first"
		if p.name == c.conflict.name {
			role = "the conflicting copy"
		}
		switch len(nums) {
		case 0:
			fmt.Fprintf(&b, "\n%s (%s, digest %s) was never delivered", p.name, role, shortDigest(p.digest()))
		case 1:
			fmt.Fprintf(&b, "\n%s (%s, digest %s) was delivered in attempt %s", p.name, role, shortDigest(p.digest()), nums[0])
		default:
			fmt.Fprintf(&b, "\n%s (%s, digest %s) was delivered in attempts %s", p.name, role, shortDigest(p.digest()), strings.Join(nums, ", "))
		}
	}
	if c.note != "" {
		b.WriteString("\n" + c.note)
	}
	if c.sleep != nil {
		fmt.Fprintf(&b, "\nfault %s fired %s", c.sleep, harness.Times(c.fired))
	} else {
		b.WriteString("\nno fault was planned")
	}
	return b.String()
}

// digestName names a ledger digest by the payload it is the digest of.
func (c conflictResult) digestName(d string) string {
	switch d {
	case c.applied.digest():
		return fmt.Sprintf("%s (%s, applied first)", shortDigest(d), c.applied.name)
	case c.conflict.digest():
		return fmt.Sprintf("%s (%s, the conflicting copy)", shortDigest(d), c.conflict.name)
	default:
		return shortDigest(d) + " (neither payload)"
	}
}

// shortDigest abbreviates a hex digest for messages.
func shortDigest(d string) string {
	if len(d) > 12 {
		return d[:12] + "…"
	}
	return d
}

// firstApplied checks that the delivery of the payload applied first was
// Applied: a variant in which nothing was applied proves nothing.
func (c conflictResult) firstApplied() string {
	last := c.appliedTries[len(c.appliedTries)-1]
	if last.Acked() && last.Outcome == adapters.Applied {
		return ""
	}
	return fmt.Sprintf("the delivery of %s, the payload meant to be applied first, ended %s (attempt %d); expected Applied, so that there is a claim to conflict with",
		c.applied.name, last.Result(), last.Delivery.Attempt)
}

// withProblem completes a rule's problems with the variant's: the fault
// that did not fire first, the evidence last. A variant that proved nothing
// and found no problem either makes the rule not-supported here.
func (c conflictResult) withProblem(problems []string) judgement {
	if c.problem != "" {
		problems = append([]string{c.problem}, problems...)
	}
	if len(problems) > 0 {
		problems[len(problems)-1] += "\n" + c.describe()
	}
	if len(problems) == 0 {
		return notSupported(c.inconclusive)
	}
	return judgement{problems: problems}
}

func (c conflictResult) noSecondEffect() judgement {
	var problems []string
	want := c.applied.digest()
	switch {
	case len(c.effects) == 1 && c.effects[0].PayloadDigest == want:
	case len(c.effects) == 0:
		problems = append(problems, fmt.Sprintf("the ledger holds no effect of the event; expected exactly one, with digest %s", c.digestName(want)))
	case len(c.effects) == 1:
		problems = append(problems, fmt.Sprintf("the ledger's one effect (attempt %d) has digest %s; expected %s: the stored effect was changed",
			c.effects[0].Attempt, c.digestName(c.effects[0].PayloadDigest), c.digestName(want)))
	default:
		var ds []string
		for _, e := range c.effects {
			ds = append(ds, fmt.Sprintf("%s by attempt %d", c.digestName(e.PayloadDigest), e.Attempt))
		}
		problems = append(problems, fmt.Sprintf("the ledger holds %d effects: digests %s; expected exactly one, with digest %s",
			len(c.effects), strings.Join(ds, "; "), c.digestName(want)))
	}
	return c.withProblem(problems)
}

func (c conflictResult) detected(policy adapters.ConflictPolicy) judgement {
	var problems []string
	if p := c.firstApplied(); p != "" {
		problems = append(problems, p)
	}
	last := c.conflictTries[len(c.conflictTries)-1]
	what := fmt.Sprintf("the conflicting copy (%s, attempt %d) ended %s", c.conflict.name, last.Delivery.Attempt, last.Result())
	if len(c.conflictTries) > 1 {
		what = fmt.Sprintf("the conflicting copy (%s) was delivered %d times; its last attempt (%d) ended %s",
			c.conflict.name, len(c.conflictTries), last.Delivery.Attempt, last.Result())
	}
	rejected := (last.Acked() && last.Outcome == adapters.Rejected) || errors.Is(last.Err, adapters.ErrPayloadConflict)
	// The hint follows the answer, and never contradicts the
	// declaration stated above it.
	var hint string
	switch {
	case policy == adapters.NoConflictPolicy:
		problems = append(problems, fmt.Sprintf("the implementation declares no conflict policy (Declares.ConflictPolicy is empty; declare %q), so a conflicting payload is handled by no documented policy; %s",
			adapters.RejectConflicts, what))
		hint = "no conflict policy is declared"
	case rejected:
	case last.Acked() && last.Outcome == adapters.Duplicate:
		problems = append(problems, fmt.Sprintf("%s: the implementation treated the conflict as a plain duplicate, though it declares the conflict policy %q; expected Rejected or an error wrapping adapters.ErrPayloadConflict",
			what, policy))
		hint = "the payload is not compared on conflict: only the identity is checked, so a conflicting copy looks like a plain duplicate"
	case last.Acked() && last.Outcome == adapters.Applied:
		problems = append(problems, fmt.Sprintf("%s: a second effect was applied under a claimed identity; expected Rejected or an error wrapping adapters.ErrPayloadConflict", what))
		hint = "the payload is part of the key, or the claim is not checked, so a conflicting copy is taken for a new event"
	case !last.Terminal() && last.GaveUp != "":
		problems = append(problems, fmt.Sprintf("%s, and every attempt was refused with a retryable error until the broker gave up (%s): the conflicting copy would be redelivered for ever; expected Rejected or an error wrapping adapters.ErrPayloadConflict, which a broker stops redelivering",
			what, last.GaveUp))
		hint = "the conflict is detected but reported as an ordinary error, which a broker retries, instead of as Rejected or an error wrapping adapters.ErrPayloadConflict"
	default:
		problems = append(problems, fmt.Sprintf("%s; expected Rejected or an error wrapping adapters.ErrPayloadConflict", what))
		hint = "the conflict is detected but reported as an ordinary error, which a broker retries, instead of as Rejected or an error wrapping adapters.ErrPayloadConflict"
		if errors.Is(last.Err, context.DeadlineExceeded) || errors.Is(last.Err, harness.ErrHung) {
			hint = "the conflicting copy gets no answer: it waits on something that does not end within the delivery timeout, such as the first delivery's claim or a lock"
		}
	}
	if hint == "" && len(problems) > 0 {
		// Only the first payload failed: what follows from it is
		// stated above, and the usual suspect does not apply.
		hint = "the payload meant to be applied first was not (see above), so there was no claim for the copy to conflict with"
	}
	j := c.withProblem(problems)
	if len(j.problems) > 0 {
		j.hint = hint
	}
	return j
}

func (c conflictResult) originalStands() judgement {
	var problems []string
	if p := c.firstApplied(); p != "" {
		problems = append(problems, p)
	}
	last := c.againTries[len(c.againTries)-1]
	if !last.Acked() || last.Outcome != adapters.Duplicate {
		problems = append(problems, fmt.Sprintf("after the conflicting copy, the redelivery of %s (attempt %d) ended %s; expected Duplicate",
			c.applied.name, last.Delivery.Attempt, last.Result()))
	}
	return c.withProblem(problems)
}

// conflictPattern is the fixture's guess at the cause of a rule's
// violations read from which of its plays passed and which failed, "" when they show no
// pattern: a conflicting copy handled right when it comes after the
// first delivery but not while the first is in flight points to a race,
// not to a missing comparison.
func conflictPattern(rule string, passedIn, failedIn []string) string {
	if len(failedIn) == 0 {
		return ""
	}
	for _, w := range failedIn {
		if !strings.HasSuffix(w, conflictInFlightVariant) {
			return ""
		}
	}
	for _, w := range passedIn {
		if strings.HasSuffix(w, conflictSequentialVariant) {
			return "a race between looking for the claim and making it: the conflicting copy was told apart when it came after the first delivery (the sequential play passed), but not while the first was in flight, as with a check-then-insert without a unique constraint or a lock"
		}
	}
	return ""
}
