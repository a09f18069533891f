package suite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// oddEvent is one event of the bad-input fixture.
type oddEvent struct {
	what string
	ev   adapters.Event
}

func oddEvents() []oddEvent {
	const ns = "harmless.bad-input"
	payload := []byte(`{"fixture":"bad-input"}`)
	ev := func(namespace, id string, payload []byte) adapters.Event {
		return adapters.Event{Namespace: namespace, ID: id, Payload: payload}
	}
	return []oddEvent{
		{"an empty id", ev(ns, "", payload)},
		{"an empty namespace", ev("", "empty-namespace", payload)},
		{"a 4 KiB id", ev(ns, strings.Repeat("k", 4<<10), payload)},
		{"a 1 MiB id", ev(ns, strings.Repeat("m", 1<<20), payload)},
		{"an id that is not UTF-8", ev(ns, "not-utf8-\xff\xfe", payload)},
		{"a NUL byte in the id", ev(ns, "nul-\x00-id", payload)},
		{"a NUL byte in the namespace", ev(ns+"\x00", "nul-namespace", payload)},
		{"SQL metacharacters in the id", ev(ns, `'; DROP TABLE processed_events; -- $1 "q" \x`, payload)},
		{"SQL metacharacters in the namespace", ev(`"); DELETE FROM harmless_effects; --`, "sql-namespace", payload)},
		{"an empty payload", ev(ns, "empty-payload", []byte{})},
		{"a 16 MiB payload", ev(ns, "large-payload", make([]byte, 16<<20))},
	}
}

// oddResult is what delivering one odd event twice left behind.
type oddResult struct {
	odd            oddEvent
	delivered      delivered
	verdict, issue string // how it was handled, or what went wrong
}

// judge classifies the result: processed exactly once, or refused cleanly
// as invalid input (see [delivered.refusedCleanly]). Anything else is an
// issue.
func (r *oddResult) judge() {
	d := r.delivered
	switch {
	case d.processedOnce():
		r.verdict = "processed exactly once"
	case d.refusedCleanly():
		r.verdict = "rejected as invalid input"
	case len(d.effects) > 1:
		r.issue = fmt.Sprintf("applied %d times", len(d.effects))
	case d.refusedSometimes():
		r.issue = fmt.Sprintf("handled inconsistently: first delivery %s, redelivery %s, %s; a clean refusal is refused as invalid input on every delivery, with no effect",
			runResult(d.first), runResult(d.again), effectCount(len(d.effects)))
	default:
		r.issue = fmt.Sprintf("neither processed exactly once nor rejected as invalid input: first delivery %s, redelivery %s, %s",
			runResult(d.first), runResult(d.again), effectCount(len(d.effects)))
	}
}

// The ids of the fixture and its rules, written once, here: the
// catalogue and internal/catalogid are generated from the definition
// below. They are stable: labels, reports and other tools use them.
const (
	badInputID = "bad-input"

	badInputExactlyOnceOrRejected = "bad-input.exactly-once-or-rejected"
	badInputRunContinues          = "bad-input.run-continues"
)

// badInputDefinition is the fixture's catalogue entry, with
// its rules' reasons and usual suspects, and its page in docs/.
func badInputDefinition() Definition {
	return Definition{
		Page: DocPage{File: "identity.md", Title: "identities"},
		Fixture: fixtures.Fixture{
			ID:  badInputID,
			Doc: "Deliver odd events: an empty id, an empty namespace, ids of 4 KiB and 1 MiB, invalid UTF-8, NUL bytes, SQL metacharacters, an empty payload and a 16 MiB payload; each is delivered twice.",
			Rules: []fixtures.Rule{
				{
					ID: badInputExactlyOnceOrRejected, Level: fixtures.Must,
					Doc:     "Each odd event is either processed exactly once (Applied, then Duplicate, one effect) or refused cleanly with an error wrapping ErrInvalidInput (no effect); the certificate records which.",
					Reason:  "Brokers carry whatever producers send. " + seedBound + " An input that crashes the consumer, or is retried for ever, stops the queue.",
					Suspect: "identities spliced into SQL text, or limits of the database (index row size, NUL in text) surfacing as retryable errors",
				},
				{
					ID: badInputRunContinues, Level: fixtures.Must,
					Doc:     "After the odd events, the same instance still applies an ordinary event.",
					Reason:  "One poisonous message must not take the consumer down with it.",
					Suspect: "a connection or transaction left broken by an error on odd input",
				},
			},
		},
	}
}

func (s *state) badInput() {
	s.describeFixture(badInputID, func() {
		var (
			results []oddResult
			after   = newEvent(badInputID, "ordinary-after-odd")
			next    []harness.Attempt
			nextFx  []ledger.Entry
		)
		events := oddEvents()
		// One instance to build; the odd events side by side, as a broker
		// delivers unrelated events, pairParallelism at a time, each
		// delivered twice, each time until terminal; then an ordinary
		// event.
		batches := (len(events) + pairParallelism - 1) / pairParallelism
		pn := s.play(badInputID, work{calls: 1}.plus(untilTerminal(2*batches+1)))
		pn.gather(func(ctx context.Context) {
			play := pn.begin(ctx)
			_, _ = play.Instance(ctx, 1) // a factory failure shows up in the attempts
			pn.at("the %d odd events", len(events))
			results = make([]oddResult, len(events))
			slots := make(chan struct{}, pairParallelism)
			var wg sync.WaitGroup
			for i, odd := range events {
				wg.Add(1)
				go func() {
					defer s.recoverGather(ctx)
					defer wg.Done()
					slots <- struct{}{}
					defer func() { <-slots }()
					r := oddResult{odd: odd, delivered: delivered{ev: odd.ev}}
					r.delivered.first = play.DeliverUntilTerminal(ctx, 1, odd.ev)
					r.delivered.again = play.DeliverUntilTerminal(ctx, 1, odd.ev)
					var err error
					r.delivered.effects, err = play.Effects(ctx, odd.ev)
					must(err)
					r.judge()
					results[i] = r
				}()
			}
			wg.Wait()
			pn.at("the ordinary event after the odd ones")
			next = play.DeliverUntilTerminal(ctx, 1, after)
			var err error
			nextFx, err = play.Effects(ctx, after)
			must(err)
		})

		pn.judgedRule(badInputExactlyOnceOrRejected, func() judgement {
			var problems, handled []string
			var failed []oddResult
			for _, r := range results {
				if r.issue != "" {
					problems = append(problems, fmt.Sprintf("%s (%s): %s\n%s", r.odd.what, r.odd.ev, r.issue, r.delivered.describe()))
					failed = append(failed, r)
					continue
				}
				handled = append(handled, r.odd.what+": "+r.verdict)
			}
			if len(problems) == 0 {
				return judgement{note: strings.Join(handled, "; ")}
			}
			return judgement{problems: problems, hint: oddHint(failed)}
		})
		pn.judgedRule(badInputRunContinues, func() judgement {
			last := next[len(next)-1]
			if last.Acked() && last.Outcome == adapters.Applied && len(nextFx) == 1 {
				return judgement{}
			}
			j := judgement{problems: []string{"after the odd events, an ordinary event was not applied once\n" + harness.DescribeEvent(after, nextFx, next)}}
			for _, r := range results {
				if r.hung() {
					// Nothing failed with an error: the usual suspect,
					// a connection broken by one, does not fit.
					j.hint = "deliveries of odd events that got no answer may still hold the instance's connections or block its work, so that it cannot take an ordinary event"
					break
				}
			}
			return j
		})
	})
}

// oddHint guesses at why odd events were mishandled from how their
// deliveries ended, each guess only where some delivery shows it: an
// event applied twice, deliveries that got no answer, deliveries that
// failed with an error a broker retries, an event refused only sometimes.
func oddHint(failed []oddResult) string {
	var twice, hung, erred, sometimes bool
	for _, r := range failed {
		d := r.delivered
		twice = twice || len(d.effects) > 1
		sometimes = sometimes || d.refusedSometimes()
		hung = hung || r.hung()
		for _, a := range d.attempts() {
			erred = erred || a.Err != nil && !errors.Is(a.Err, adapters.ErrInvalidInput) && !errors.Is(a.Err, adapters.ErrPayloadConflict) && !unanswered(a)
		}
	}
	var hints []string
	if twice {
		hints = append(hints, "the identity is changed on its way into the key (spliced into SQL text, encoded, or cut), so a redelivery of an odd event is not recognised")
	}
	if erred {
		hints = append(hints, "limits of the database (index row size, NUL or invalid UTF-8 in a text column) surfacing as errors a broker retries, instead of a refusal wrapping ErrInvalidInput")
	}
	if hung {
		hints = append(hints, "an odd event gets no answer within the delivery timeout: a statement or a wait that does not end on that input")
	}
	if sometimes {
		hints = append(hints, "the identity is checked on some paths and not on others, so the same event is refused once and not the next time")
	}
	return strings.Join(hints, "; or ")
}

// hung reports whether a delivery of the odd event got no answer.
func (r oddResult) hung() bool {
	for _, a := range r.delivered.attempts() {
		if unanswered(a) {
			return true
		}
	}
	return false
}

// unanswered reports whether a delivery got no answer within its
// timeout: it hung, or it gave up at its deadline.
func unanswered(a harness.Attempt) bool {
	return errors.Is(a.Err, context.DeadlineExceeded) || errors.Is(a.Err, harness.ErrHung)
}
