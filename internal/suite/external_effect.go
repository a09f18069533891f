package suite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/applicability"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/destination"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// slowAnswer is how long the destination delays its answer in the slow
// variant: long enough that a relay sending in the background is still
// waiting when the play redelivers, short of external.DefaultTimeout.
const slowAnswer = time.Second

// stopGrace is how long the stop variant waits for the stopped instance's
// Close or Abort to return before it releases the held request: an
// implementation whose Close waits for its request in flight is stopped
// all the same, its request dropped unprocessed.
const stopGrace = 2 * time.Second

// extVariant is one play of the external-effect fixture.
type extVariant struct {
	// id is the variant's short stable id in the tree, name its name in
	// messages.
	id, name string
	// inconclusive: a planned fault that did not fire makes the variant
	// not-supported rather than failed, because an implementation may
	// legitimately not reach it (a relay that did not send while the
	// destination was down, or not within x.sendWait() of the commit).
	// For the other variants the fault acts on the first request
	// the destination sees for the event, so it fires whenever the event's
	// effect reaches the destination at all: not firing is a loss.
	inconclusive bool
	play         func(ctx context.Context, x *extPlay)
}

// extPlay is what one play of the fixture did and saw.
type extPlay struct {
	s    *state
	pn   *playNode
	play *harness.Play
	dest *harness.Destination
	tag  string

	events    []adapters.Event // distinct identities, the payload that was applied
	conflicts []adapters.Event // conflicting copies of some of them
	planned   []extFault
	notes     []string // what the play did beyond delivering, e.g. the stop
	skip      string   // set when the variant proved nothing (see inconclusive)

	drained  string
	drainErr error
	records  []destination.Record
	effects  map[destination.Identity][]ledger.Entry
	history  map[destination.Identity][]harness.Attempt
	fired    []int64
}

// extFault is a fault the play planned, and on what.
type extFault struct {
	what  string
	fired func(context.Context) (int64, error)
}

func (x *extPlay) event(id string) adapters.Event {
	ev := newEvent(externalEffectID, x.tag+"-"+id)
	x.events = append(x.events, ev)
	return ev
}

// destFault records a destination fault planned as what, for the
// judges: x.destFault("what")(x.dest.Fail(...)).
func (x *extPlay) destFault(what string) func(*destination.Fault, error) *destination.Fault {
	return func(f *destination.Fault, err error) *destination.Fault {
		must(err, "plan "+what)
		x.planned = append(x.planned, extFault{what: what + " (" + f.Kind() + ")", fired: f.Fired})
		return f
	}
}

func (x *extPlay) untilTerminal(ctx context.Context, n int, ev adapters.Event) []harness.Attempt {
	return x.play.DeliverUntilTerminal(ctx, n, ev)
}

// variants of the external-effect fixture.
var extVariants = []extVariant{
	{id: "redelivery", name: "redelivery, two instances and a conflicting copy", play: func(ctx context.Context, x *extPlay) {
		a, b, c := x.event("redelivered"), x.event("concurrent"), x.event("conflicting")
		x.pn.at("the redelivered event")
		x.untilTerminal(ctx, 1, a)
		x.play.Deliver(ctx, 2, a)
		x.pn.at("two instances at once")
		var wg sync.WaitGroup
		got := make([]harness.Attempt, 2)
		for i := range got {
			wg.Go(func() { got[i] = x.play.Deliver(ctx, i+1, b) })
		}
		wg.Wait()
		if !got[0].Terminal() && !got[1].Terminal() {
			x.untilTerminal(ctx, 1, b)
		}
		x.play.Deliver(ctx, 2, b)
		x.pn.at("the conflicting copy")
		x.untilTerminal(ctx, 1, c)
		dup := c
		dup.Payload = append(slices.Clone(c.Payload), " (conflicting copy)"...)
		x.conflicts = append(x.conflicts, dup)
		x.untilTerminal(ctx, 2, dup)
		x.play.Deliver(ctx, 1, c)
	}},
	{id: "500-then-503", name: "the destination answers 500, then 503", play: func(ctx context.Context, x *extPlay) {
		ev := x.event("failing")
		x.destFault("500 on request 1")(x.dest.Fail(ev, 1, 500))
		x.destFault("503 on request 2")(x.dest.Fail(ev, 2, 503))
		x.untilTerminal(ctx, 1, ev)
		x.play.Deliver(ctx, 2, ev)
	}},
	{id: "dropped-answer", name: "the destination processes, then drops the connection", play: func(ctx context.Context, x *extPlay) {
		ev := x.event("dropped")
		x.destFault("process request 1, then drop its connection")(x.dest.DropAfterProcess(ev, 1))
		x.untilTerminal(ctx, 1, ev)
		x.play.Deliver(ctx, 2, ev)
	}},
	{id: "destination-down", name: "the destination is down for a while", inconclusive: true, play: func(ctx context.Context, x *extPlay) {
		evs := []adapters.Event{x.event("down-1"), x.event("down-2")}
		down := x.destFault("the destination down")(x.dest.Down())
		x.pn.at("deliveries while the destination is down")
		first := make([]harness.Attempt, len(evs))
		for i, ev := range evs {
			first[i] = x.play.Deliver(ctx, 1, ev)
		}
		// A relay sends after the commit, maybe after Deliver returned:
		// wait for its first refused connection, at most x.sendWait(),
		// before the destination comes back.
		if !x.wait(ctx, down.Arrived()) {
			x.skip = fmt.Sprintf("the implementation made no request in the %s the destination was down after the deliveries", x.sendWait())
		}
		x.dest.Up()
		x.notes = append(x.notes, "the destination came back up; the events not acknowledged were redelivered")
		for i, ev := range evs {
			if !first[i].Terminal() {
				x.untilTerminal(ctx, 1, ev)
			}
			x.play.Deliver(ctx, 2, ev)
		}
	}},
	{id: "slow-answer", name: "a slow answer", play: func(ctx context.Context, x *extPlay) {
		ev := x.event("slow")
		x.destFault(fmt.Sprintf("answer request 1 after %s", slowAnswer))(x.dest.Slow(ev, 1, slowAnswer))
		x.untilTerminal(ctx, 1, ev)
		x.play.Deliver(ctx, 2, ev)
	}},
	{id: "stopped-before-send", name: "the implementation stopped between its commit and its send", inconclusive: true, play: func(ctx context.Context, x *extPlay) {
		ev := x.event("stopped")
		_, err := x.play.Instance(ctx, 1)
		must(err, "build instance 1")
		hold := x.destFault("hold request 1, then drop it unprocessed")(x.dest.Hold(ev, 1))
		x.pn.at("the delivery whose send is held")
		delivered := make(chan harness.Attempt, 1)
		go func() { delivered <- x.play.Deliver(ctx, 1, ev) }()
		if !x.wait(ctx, hold.Arrived()) {
			hold.Release()
			<-delivered
			x.skip = fmt.Sprintf("the destination received no request for %s within %s of its delivery, so the implementation could not be stopped between its commit and its send", ev, x.sendWait())
			return
		}
		x.pn.at("stopping instance 1 while its request is held")
		stopped := make(chan struct{})
		var how string
		var stopErr error
		go func() {
			defer close(stopped)
			how, stopErr = x.play.Stop(ctx, 1)
		}()
		timer := time.NewTimer(stopGrace)
		select {
		case <-stopped:
		case <-timer.C:
		}
		timer.Stop()
		hold.Release()
		<-stopped
		first := <-delivered
		note := fmt.Sprintf("instance 1 was %s while the destination held request 1 (attempt 1 ended %s); the request was then dropped unprocessed and the event redelivered to a new instance 2 on the same schema", how, first.Result())
		if stopErr != nil {
			note += fmt.Sprintf(" (stopping it said: %v)", stopErr)
		}
		x.notes = append(x.notes, note)
		x.pn.at("redelivery to instance 2")
		x.untilTerminal(ctx, 2, ev)
		x.play.Deliver(ctx, 2, ev)
	}},
	{id: "commit-fails-after-send", name: "the transaction fails at COMMIT after the external call", play: func(ctx context.Context, x *extPlay) {
		ev := x.event("rolled-back")
		f, err := x.play.Arm(ctx, faults.Plan{Namespace: ev.Namespace, ID: ev.ID, Times: 1, Point: faults.AtCommit, Action: faults.Raise})
		must(err)
		x.planned = append(x.planned, extFault{what: f.String(), fired: func(ctx context.Context) (int64, error) { return x.play.Fired(ctx, f) }})
		x.untilTerminal(ctx, 1, ev)
		x.play.Deliver(ctx, 2, ev)
	}},
}

// wait waits for ch, at most x.sendWait(); it reports whether ch was
// closed.
func (x *extPlay) wait(ctx context.Context, ch <-chan struct{}) bool {
	wctx, cancel := context.WithTimeout(ctx, x.sendWait())
	defer cancel()
	select {
	case <-ch:
		return true
	case <-wctx.Done():
		return false
	}
}

// sendWait is how long the play waits for the first request an
// implementation makes after its commit: a delivery timeout, or the send
// pace when that is longer (a relay polling every 3 s sends up to 3 s
// after the commit).
func (x *extPlay) sendWait() time.Duration {
	return max(x.s.cfg.deliveryTimeout, harness.SendPace(x.s.adapter.Declares))
}

// The ids of the fixture and its rules, written once, here: the
// catalogue and internal/catalogid are generated from the definition
// below. They are stable: labels, reports and other tools use them.
const (
	externalEffectID = "external-effect"

	externalEffectStableKey                = "external-effect.stable-key"
	externalEffectExactlyOnceAtDestination = "external-effect.exactly-once-at-destination"
	externalEffectNoLoss                   = "external-effect.no-loss"
	externalEffectNoNewKeyForDuplicates    = "external-effect.no-new-key-for-duplicates"
)

// externalEffectDefinition is the fixture's catalogue entry, with
// its rules' reasons and usual suspects, and its page in docs/.
func externalEffectDefinition() Definition {
	return Definition{
		Page: DocPage{File: "external-effects.md", Title: "external effects"},
		Fixture: fixtures.Fixture{
			ID:       externalEffectID,
			Verifies: []string{"external_effects"},
			Requires: []fixtures.Requirement{catalogid.NeedsExternalEffects},
			Doc: "The harness runs an external destination for each play, an HTTP API on the loopback that honours idempotency keys as Stripe and the IETF Idempotency-Key draft do, and counts what it processed; the implementation sends each applied event's external effect there. " +
				"Plays, each with fresh events: redelivery, two instances at once and a conflicting copy; the destination answering 500 then 503; the destination processing a request and dropping the connection before its answer; the destination down while events are delivered (refusing connections), then up again, and the events not acknowledged redelivered; a slow answer; the implementation stopped between its commit and its send (the destination holds the first request, the instance is aborted or closed without draining, the request is dropped unprocessed, a new instance starts on the same schema and the event is redelivered to it); and the database transaction failing at COMMIT after the external call was made, then redelivered. " +
				"After each play the harness drains every instance that implements adapters.Drainer. When an instance cannot be drained or a delay is declared, it then waits on the destination, knowing from the ledger which effects committed: until each has been processed there and the last request for it answered for good (a dropped or 5xx answer keeps it owed, for the retry), then for a settle without any request, in which an effect sent again after it was acknowledged still arrives: the longest the implementation was seen to wait before a send (after a commit, or after an earlier request for the same effect), at least 1s and at most its send pace (its declared max send delay and a margin, else 5s); while an effect is still owed, it waits until the destination has had no request for the send pace. It then judges from the destination's records and the ledger. An implementation that declares no external effects gets not-applicable: \"external effects: none declared\".",
			Rules: []fixtures.Rule{
				{
					ID: externalEffectStableKey, Level: fixtures.Must,
					Doc:     "Every request for one event carries the same idempotency key, across retries, redeliveries, instances and restarts; two different events never share a key.",
					Reason:  seedExtern + " A destination deduplicates by the key alone: a key that changes between attempts makes each retry a new effect, and a key shared by two events makes the second a replay of the first.",
					Suspect: "the key is made per attempt (a random UUID drawn at each send, a timestamp, the broker's message id) instead of being drawn once per committed effect and stored with it, or derived from the identity; or it is derived from the id without the namespace",
				},
				{
					ID: externalEffectExactlyOnceAtDestination, Level: fixtures.Must,
					Doc:     "Once the implementation is drained, the destination has processed each event whose effect committed exactly once, and nothing for an event never applied: a Duplicate, a conflicting copy, a claim that rolled back and was not retried.",
					Reason:  seedExtern + " The charge made twice and the email sent three times are the commonest duplicate-delivery incidents: they happen at this boundary, not in the database.",
					Suspect: "the request is sent inside the transaction with a fresh key, so a rolled-back and retried claim sends twice; or a relay retries an ambiguous send with a new key; or a Duplicate or a conflicting copy sends again",
				},
				{
					ID: externalEffectNoLoss, Level: fixtures.Must,
					Doc:     "Every event whose effect committed (acknowledged Applied) reaches the destination once the implementation is drained: after 500 and 503 answers, a dropped answer, the destination down for a while, and the implementation stopped between its commit and its send.",
					Reason:  seedExtern + " A send after commit with nothing durable behind it is lost when the process stops between the two; an outbox row written in the claim's transaction is what survives.",
					Suspect: "the request is sent after commit with no outbox, or the relay deletes the outbox row (or marks it sent) before the destination acknowledged it, or gives up after a failure",
				},
				{
					ID: externalEffectNoNewKeyForDuplicates, Level: fixtures.Must,
					Doc:     "A redelivery or a conflicting copy never produces a request with a key not already used for that event's applied effect.",
					Reason:  seedExtern + " A redelivery is the same event: if it sends at all, it must send under the key of the effect already made, so that the destination replays instead of acting again.",
					Suspect: "the duplicate path makes the external call too, with a key made per delivery (the payload, the attempt, a random value in the key)",
				},
			},
		},
	}
}

func (s *state) externalEffect() {
	s.describeFixture(externalEffectID, func() {
		for i, v := range extVariants {
			s.group(v.id, v.name, func() {
				var (
					x   = &extPlay{s: s, tag: fmt.Sprint(i + 1)}
					app applicability.Decision
				)
				// Two instances at most built, and every event delivered
				// until terminal and once more, by two deliveries per
				// event of conflicts and instances at most; then one wait
				// for a first send, and the drain of two instances at
				// the implementation's pace.
				waits := x.sendWait() + harness.DrainLimit(s.adapter.Declares, s.cfg.deliveryTimeout, 2) + slowAnswer + stopGrace
				// Long: each waits for the destination, a slow answer or,
				// without a drain, the relay's quiet.
				x.pn = s.play(externalEffectID+" / "+v.name, work{calls: 2 + 4*2, waits: waits}.plus(untilTerminal(4))).takesLong()
				x.pn.gather(func(ctx context.Context) {
					if app = s.applies(externalEffectID, nil); !app.Runs {
						return
					}
					x.play = x.pn.begin(ctx)
					var err error
					x.dest, err = x.play.OpenDestination(ctx)
					must(err, "open the play's destination")
					v.play(ctx, x)
					x.pn.at("draining")
					x.drained, x.drainErr = x.play.Drain(ctx)
					x.gather(ctx)
				})

				// judge judges a rule of the variant with check, unless the
				// fixture or the variant does not run, or its planned
				// faults did not fire; note adds what the play showed to a
				// pass.
				judge := func(check func(x *extPlay) []string, note func() string) func() judgement {
					return func() judgement {
						if j := skipFor(app, v.id); j.unsupported != "" {
							return j
						}
						if j := x.unfired(v.inconclusive); j.unsupported != "" || len(j.problems) > 0 {
							return j
						}
						if p := check(x); len(p) > 0 {
							return judgement{problems: p}
						}
						if note != nil {
							return judgement{note: note()}
						}
						return judgement{}
					}
				}
				x.pn.judgedRule(externalEffectStableKey, judge((*extPlay).stableKey, nil))
				x.pn.judgedRule(externalEffectExactlyOnceAtDestination, judge((*extPlay).exactlyOnce, x.summary))
				x.pn.judgedRule(externalEffectNoLoss, judge((*extPlay).noLoss, nil))
				x.pn.judgedRule(externalEffectNoNewKeyForDuplicates, judge((*extPlay).noNewKey, nil))
			})
		}
	})
}

// gather reads what the play left: the destination's records, the
// ledger, the history and the faults' firings.
func (x *extPlay) gather(ctx context.Context) {
	x.records = x.dest.Records()
	x.effects = map[destination.Identity][]ledger.Entry{}
	x.history = map[destination.Identity][]harness.Attempt{}
	for _, ev := range x.events {
		id := destination.IdentityOf(ev)
		effects, err := x.play.Effects(ctx, ev)
		must(err)
		x.effects[id] = effects
		x.history[id] = x.play.History(ev)
	}
	for _, f := range x.planned {
		n, err := f.fired(ctx)
		must(err)
		x.fired = append(x.fired, n)
	}
}

// unfired judges the planned faults that did not fire: the variant is
// not-supported when inconclusive, else every rule fails saying so.
func (x *extPlay) unfired(inconclusive bool) judgement {
	if x.skip != "" {
		return notSupported(x.skip)
	}
	var problems []string
	for i, f := range x.planned {
		if x.fired[i] > 0 {
			continue
		}
		if inconclusive {
			return notSupported(fmt.Sprintf("the planned fault (%s) did not fire", f.what))
		}
		problems = append(problems, fmt.Sprintf("the planned fault (%s) did not fire: the destination never received the request it was planned for\n%s", f.what, x.describeAll()))
	}
	return judgement{problems: problems}
}

// forIdentity returns the valid records of id, in arrival order.
func (x *extPlay) forIdentity(id destination.Identity) []destination.Record {
	var out []destination.Record
	for _, r := range x.records {
		if r.Valid && r.Identity == id {
			out = append(out, r)
		}
	}
	return out
}

// committed reports whether ev's effect committed in the database, or a
// delivery of it was acknowledged as Applied: the destination owes it one
// effect.
func (x *extPlay) committed(ev adapters.Event) bool {
	id := destination.IdentityOf(ev)
	return len(x.effects[id]) > 0 || slices.ContainsFunc(x.history[id], func(a harness.Attempt) bool {
		return a.Acked() && a.Outcome == adapters.Applied
	})
}

func processedCount(recs []destination.Record) int {
	n := 0
	for _, r := range recs {
		if r.Processed {
			n++
		}
	}
	return n
}

// stableKey: one key per identity, no key shared by two identities.
func (x *extPlay) stableKey() []string {
	var problems []string
	owners := map[string][]destination.Identity{}
	for _, ev := range x.events {
		id := destination.IdentityOf(ev)
		var keys []string
		for _, r := range x.forIdentity(id) {
			if !slices.Contains(keys, r.Key) {
				keys = append(keys, r.Key)
				owners[r.Key] = append(owners[r.Key], id)
			}
		}
		if len(keys) > 1 {
			problems = append(problems, fmt.Sprintf("the requests for %s carry %d different keys (%s)\n%s", ev, len(keys), quoteKeys(keys), x.describe(ev)))
		}
	}
	for key, ids := range owners {
		if len(ids) > 1 {
			problems = append(problems, fmt.Sprintf("key %q was sent for %d different events: %v", key, len(ids), ids))
		}
	}
	slices.Sort(problems)
	return problems
}

// exactlyOnce: processed once for every committed event, never for one
// that was not, and never with a conflicting copy's payload.
func (x *extPlay) exactlyOnce() []string {
	var problems []string
	for _, ev := range x.events {
		n := processedCount(x.forIdentity(destination.IdentityOf(ev)))
		want := 0
		if x.committed(ev) {
			want = 1
		}
		if n != want {
			problems = append(problems, fmt.Sprintf("the destination processed %s %s; expected %s\n%s", ev, harness.Times(n), harness.Times(want), x.describe(ev)))
		}
	}
	for _, c := range x.conflicts {
		digest := adapters.PayloadDigest(c.Payload)
		for _, r := range x.forIdentity(destination.IdentityOf(c)) {
			if r.Processed && r.PayloadDigest == digest {
				problems = append(problems, fmt.Sprintf("the destination processed the conflicting copy of %s (request #%d, payload digest %s), which must never make an effect\n%s", c, r.Seq, digest, x.describe(c)))
			}
		}
	}
	return problems
}

// noLoss: every committed event was processed at least once.
func (x *extPlay) noLoss() []string {
	var problems []string
	for _, ev := range x.events {
		if x.committed(ev) && processedCount(x.forIdentity(destination.IdentityOf(ev))) == 0 {
			problems = append(problems, fmt.Sprintf("%s committed its effect in the database, but the destination never processed it\n%s", ev, x.describe(ev)))
		}
	}
	return problems
}

// noNewKey: after an identity's first processed request, every request for
// it carries that request's key: a redelivery or a conflicting copy that
// sends at all sends under the key of the effect already made.
func (x *extPlay) noNewKey() []string {
	var problems []string
	for _, ev := range x.events {
		applied := ""
		for _, r := range x.forIdentity(destination.IdentityOf(ev)) {
			switch {
			case applied == "" && r.Processed:
				applied = r.Key
			case applied != "" && r.Key != applied:
				problems = append(problems, fmt.Sprintf("request #%d for %s (attempt %d at the destination) carries key %q, after its effect was made under key %q\n%s", r.Seq, ev, r.Attempt, r.Key, applied, x.describe(ev)))
			}
		}
	}
	return problems
}

func quoteKeys(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = fmt.Sprintf("%q", k)
	}
	return strings.Join(q, ", ")
}

// recordsShown bounds the requests listed per event in a message.
const recordsShown = 12

// describe is the evidence on ev: the ledger and the deliveries, the
// destination's requests, what the play did and how it was drained.
func (x *extPlay) describe(ev adapters.Event) string {
	id := destination.IdentityOf(ev)
	var b strings.Builder
	b.WriteString(harness.DescribeEvent(ev, x.effects[id], x.history[id]))
	recs := x.forIdentity(id)
	fmt.Fprintf(&b, "\ndestination: %d requests, processed %s", len(recs), harness.Times(processedCount(recs)))
	for i, r := range recs {
		if i == recordsShown {
			fmt.Fprintf(&b, "\n  and %d more", len(recs)-recordsShown)
			break
		}
		fmt.Fprintf(&b, "\n  #%d request %d key %q digest %.12s: %s", r.Seq, r.Attempt, r.Key, r.PayloadDigest, answerOf(r))
	}
	if refused := x.refused(); refused > 0 {
		fmt.Fprintf(&b, "\n  and %d connections refused while down", refused)
	}
	for _, n := range x.notes {
		b.WriteString("\n" + n)
	}
	if x.drained != "" {
		b.WriteString("\nafter the play: " + x.drained)
	}
	if x.drainErr != nil {
		fmt.Fprintf(&b, "\nthe drain failed: %v", x.drainErr)
	}
	return b.String()
}

// summary says what the destination saw in the play, as a pass's note.
func (x *extPlay) summary() string {
	processed := 0
	for _, r := range x.records {
		if r.Processed {
			processed++
		}
	}
	s := fmt.Sprintf("the destination saw %d requests for %d events and processed %d", len(x.records)-x.refused(), len(x.events), processed)
	if n := x.refused(); n > 0 {
		s += fmt.Sprintf("; it refused %d connections while down", n)
	}
	if x.drained != "" {
		s += "; after the play: " + x.drained
	}
	return s
}

// describeAll is describe for every event of the play.
func (x *extPlay) describeAll() string {
	parts := make([]string, len(x.events))
	for i, ev := range x.events {
		parts[i] = x.describe(ev)
	}
	return strings.Join(parts, "\n")
}

func (x *extPlay) refused() int {
	n := 0
	for _, r := range x.records {
		if r.Outcome == destination.Refused {
			n++
		}
	}
	return n
}

// answerOf says how the destination ended a request.
func answerOf(r destination.Record) string {
	s := string(r.Outcome)
	if r.Outcome == destination.Answered {
		s = fmt.Sprint(r.Status)
	}
	if r.Replayed {
		s += " (replayed)"
	}
	if r.Processed {
		s += ", processed"
	}
	if r.Fault != "" {
		s += ", fault " + r.Fault
	}
	return s
}
