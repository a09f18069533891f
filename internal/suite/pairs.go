package suite

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/harness"
)

// identityPair is two events that are different but that a careless key
// would merge into one.
type identityPair struct {
	// why says how the two differ, and how a careless key merges them.
	why  string
	a, b adapters.Event
}

// pairParallelism is how many pairs a fixture plays at once. The two
// events of one pair are delivered one after the other; different pairs are
// unrelated events, which brokers deliver concurrently all the time, and
// playing them together keeps the fixtures short for slow implementations.
const pairParallelism = 8

// pairResult is what delivering both events of a pair left behind.
type pairResult struct {
	pair identityPair
	a, b delivered
}

// pairWork is the work of playing n pairs one after another: the two
// instances built, then, for each batch of pairParallelism pairs played at
// once, the pair's two events one after the other (and, with redeliver,
// each once more), each until terminal.
func pairWork(n int, redeliver bool) work {
	perPair := 2
	if redeliver {
		perPair = 4
	}
	batches := (n + pairParallelism - 1) / pairParallelism
	return work{calls: 2}.plus(untilTerminal(batches * perPair))
}

// playPairs plays every pair (see playPair), pairParallelism at a time.
func (s *state) playPairs(ctx context.Context, play *harness.Play, pairs []identityPair, redeliver bool) []pairResult {
	// Build both instances first, so that construction is not part of any
	// pair. A factory failure shows up in the attempts.
	for instance := 1; instance <= 2; instance++ {
		_, _ = play.Instance(ctx, instance)
	}
	plays := make([]pairResult, len(pairs))
	slots := make(chan struct{}, pairParallelism)
	var wg sync.WaitGroup
	for i, p := range pairs {
		wg.Add(1)
		go func() {
			defer s.recoverGather(ctx)
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			plays[i] = s.playPair(ctx, play, p, redeliver)
		}()
	}
	wg.Wait()
	return plays
}

// playPair delivers the pair's first event to instance 1 and then its
// second to instance 2, each until terminal, so that a merge is seen across
// instances. With redeliver, it then delivers each again to the same
// instance, which must recognise it: Duplicate for an event that was
// applied, a refusal again for one that was refused (whether other
// instances see a claim is double-delivery's business). A delivery that
// never became terminal is not repeated: that event has failed already.
func (s *state) playPair(ctx context.Context, play *harness.Play, p identityPair, redeliver bool) pairResult {
	r := pairResult{pair: p, a: delivered{ev: p.a}, b: delivered{ev: p.b}}
	r.a.first = play.DeliverUntilTerminal(ctx, 1, p.a)
	r.b.first = play.DeliverUntilTerminal(ctx, 2, p.b)
	if redeliver {
		for _, m := range []struct {
			d        *delivered
			instance int
		}{{&r.a, 1}, {&r.b, 2}} {
			if last, _ := ended(m.d.first); last.Terminal() {
				m.d.again = play.DeliverUntilTerminal(ctx, m.instance, m.d.ev)
			}
		}
	}
	for _, d := range []*delivered{&r.a, &r.b} {
		var err error
		d.effects, err = play.Effects(ctx, d.ev)
		must(err)
	}
	return r
}

// keptApart reports whether both events were processed exactly once: the
// pair proves that the implementation kept them apart.
func (p pairResult) keptApart() bool { return p.a.processedOnce() && p.b.processedOnce() }

// refused returns the events of the pair that were refused cleanly.
func (p pairResult) refused() []adapters.Event {
	var out []adapters.Event
	for _, d := range []delivered{p.a, p.b} {
		if d.refusedCleanly() {
			out = append(out, d.ev)
		}
	}
	return out
}

// problem says how the pair failed to be two events, or "" when each event
// was processed exactly once or refused cleanly. A clean refusal is not
// evidence of a merge: the implementation may refuse what it cannot store.
func (p pairResult) problem() string {
	var issues []string
	for i, d := range []delivered{p.a, p.b} {
		if d.processedOnce() || d.refusedCleanly() {
			continue
		}
		issues = append(issues, p.issue(i))
	}
	if len(issues) == 0 {
		return ""
	}
	return fmt.Sprintf("%s: %s and %s are two events, each to be applied once or refused cleanly; observed: %s\n%s\n%s",
		p.pair.why, p.a.ev, p.b.ev, strings.Join(issues, "; "), p.a.describe(), p.b.describe())
}

// issue states what became of event i (0 for the first, 1 for the second),
// which was neither processed exactly once nor refused cleanly: how each of
// its deliveries ended, how many effects it has, and, when it was answered
// as if it were the other event, that its effect is lost. Events are named
// by their order too, since long ones print alike.
func (p pairResult) issue(i int) string {
	d, other := p.a, p.b
	name, otherName, instance := "the first event", "the second event", 1
	if i == 1 {
		d, other = p.b, p.a
		name, otherName, instance = otherName, name, 2
	}
	msg := fmt.Sprintf("%s, %s, delivered to instance %d: %s", name, d.ev, instance, d.summary())
	first, _ := ended(d.first)
	lost := len(d.effects) == 0 && other.processedOnce()
	switch {
	case lost && first.Acked() && first.Outcome == adapters.Duplicate:
		msg += fmt.Sprintf(": answered Duplicate of %s, %s: its effect is lost", otherName, other.ev)
	case lost && first.Acked() && first.Outcome == adapters.Rejected:
		msg += fmt.Sprintf(": answered Rejected, as a conflicting copy of %s, %s: its effect is lost", otherName, other.ev)
	case len(d.effects) > 1:
		msg += fmt.Sprintf(": applied %d times", len(d.effects))
	default:
		msg += "; expected Applied, Duplicate on redelivery and 1 effect, or a clean refusal (an error wrapping ErrInvalidInput on every delivery, no effect)"
	}
	return msg
}

// pairsNote states, for a rule's certificate, how many pairs were kept
// apart and which events were refused cleanly.
func pairsNote(plays []pairResult) string {
	kept := 0
	var refused []string
	for _, p := range plays {
		if p.keptApart() {
			kept++
		}
		for _, ev := range p.refused() {
			refused = append(refused, ev.String())
		}
	}
	note := fmt.Sprintf("%d of %d pairs kept apart, each event applied once", kept, len(plays))
	if len(refused) > 0 {
		note += fmt.Sprintf("; refused cleanly, which proves nothing about a merge: %s", listed(refused))
	}
	return note
}

// listAtMost is how many items a note lists before it says how many more
// there are.
const listAtMost = 8

// listed joins items for a message, listing at most listAtMost of them.
func listed(items []string) string {
	if len(items) <= listAtMost {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:listAtMost], ", "), len(items)-listAtMost)
}
