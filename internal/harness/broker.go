package harness

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/harmless-dev/harmless/internal/shortdur"
)

// The broker's model. The harness plays an at-least-once broker: what is
// not acknowledged is handed out again, after a pause that grows with each
// try, for as long as the consumer makes progress. Real brokers are that
// patient: SQS hands a message out again after its visibility timeout, for
// days; RabbitMQ requeues a nacked message and services add a delay or a
// retry queue; Kafka consumers retry from the same offset with backoff;
// dead-letter limits are set in the tens. A correct consumer may lean on
// that: answer a busy claim with an error at once, hold a lease for
// seconds, crash and be restarted. docs/broker.md says it for users.
const (
	// DefaultRedeliveryPatience is how long the broker goes on
	// redelivering, by default, while none of a play's deliveries is
	// acknowledged. It was chosen from what correct implementations were
	// measured to need (docs/broker.md): the longest stall of one that
	// leans on the broker, a lease of 1 s running out after a crash, is
	// under 2 s on a busy 2-core machine; five times that leaves room for
	// a slower machine, and an implementation that acknowledges nothing
	// still costs only one patience in all (see [Play.DeliverUntilTerminal]).
	DefaultRedeliveryPatience = 10 * time.Second
	// firstBackoff and maxBackoff bound the pause before a redelivery: it
	// doubles from the first to the most.
	firstBackoff = 10 * time.Millisecond
	maxBackoff   = time.Second
)

// Backoff is the broker's pause before the k-th redelivery of an event
// (k from 1): 10 ms doubling up to 1 s, jittered to a uniformly random
// duration between half of that and all of it, so that copies that failed
// together do not all come back at the same instant.
func Backoff(k int, rng *rand.Rand) time.Duration {
	d := maxBackoff
	if k < 8 { // 10 ms << 7 is past 1 s
		d = min(firstBackoff<<max(k-1, 0), maxBackoff)
	}
	half := d / 2
	return half + time.Duration(rng.Int64N(int64(d-half)+1))
}

// broker is a play's redelivery state: how long the play has gone without
// progress while some of its events waited to be redelivered.
//
// Patience is counted per play, not per event, so that an implementation
// that acknowledges nothing is judged in one patience per play however
// many events the play redelivers, side by side or one after another: the
// broker gives up once a whole patience passes in which events of the
// play await redelivery and none of the play's deliveries is acknowledged
// or refused (a terminal attempt, see [Attempt.Terminal]); until the next
// such progress it redelivers nothing more. A correct implementation makes
// progress far inside the patience, and never sees the difference.
//
// Two shortcuts span the run, since some evidence is the run's, not the
// play's: an implementation that has acknowledged nothing in the whole
// run is not waited for in later plays (see [Run.hopeless]), nor one that
// has left a redelivery of an applied event unacknowledged for a whole
// patience, for its failed redeliveries of applied events (see
// [Run.missingAcks] and [Play.RedeliverUntilTerminal]).
type broker struct {
	patience time.Duration

	mu  sync.Mutex
	rng *rand.Rand
	// episodes counts the events being redelivered now (calls of
	// DeliverUntilTerminal past their first attempt).
	episodes int
	// stallFrom is when the play's current stall began: the later of the
	// last progress and the moment an episode opened with none open.
	stallFrom time.Time
	// gaveUp is set when the patience ran out, and cleared by progress.
	gaveUp string
	// spentFrom is when the stall that ran the patience out began, while
	// gaveUp says so; zero when gaveUp is for another reason, or unset.
	spentFrom time.Time
	// wake is closed and replaced on progress and on giving up, for the
	// episodes waiting out a backoff.
	wake chan struct{}
	// longest is the longest stall the play ended with progress: how long
	// the implementation made the broker wait. gaveUps counts the stalls
	// the broker gave up on.
	longest time.Duration
	gaveUps int
}

func newBroker(patience time.Duration, seed uint64, play string) *broker {
	h := fnv.New64a()
	h.Write([]byte(play))
	return &broker{patience: patience, rng: rand.New(rand.NewPCG(seed, h.Sum64())), wake: make(chan struct{})}
}

// progress records a terminal attempt of the play: the consumer answers,
// so the broker's patience starts over.
func (b *broker) progress() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.episodes > 0 && b.gaveUp == "" {
		b.longest = max(b.longest, time.Since(b.stallFrom))
	}
	b.stallFrom = time.Now()
	b.gaveUp, b.spentFrom = "", time.Time{}
	b.wakeLocked()
}

func (b *broker) wakeLocked() {
	close(b.wake)
	b.wake = make(chan struct{})
}

// open starts an episode. It returns why the broker will not redeliver,
// "" when it will.
func (b *broker) open(hopeless func() string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.episodes == 0 && b.gaveUp == "" {
		b.stallFrom = time.Now()
	}
	b.episodes++
	if b.gaveUp == "" {
		b.gaveUp = hopeless()
	}
	return b.gaveUp
}

// close ends an episode.
func (b *broker) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.episodes--
}

// Redelivery is how patient the broker had to be in a run or a play.
type Redelivery struct {
	// Patience is the broker's patience.
	Patience time.Duration
	// LongestWait is the longest the implementation made the broker wait,
	// redelivering, before one of its deliveries was acknowledged or
	// refused again.
	LongestWait time.Duration
	// GaveUp counts the times the broker ran out of patience.
	GaveUp int
}

// Redelivery is how patient the broker had to be in the play so far.
func (s *Play) Redelivery() Redelivery {
	s.broker.mu.Lock()
	defer s.broker.mu.Unlock()
	return Redelivery{Patience: s.broker.patience, LongestWait: s.broker.longest, GaveUp: s.broker.gaveUps}
}

// backoff returns the pause before redelivery k.
func (b *broker) backoff(k int) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Backoff(k, b.rng)
}

// await waits out a pause of d before a redelivery. It returns why the
// broker gives up instead, "" when it redelivers: the patience ran out
// (now or before), ctx ended, or the run is known to acknowledge nothing.
// When it is the patience, spentFrom is when the stall that ran it out
// began; it is zero otherwise. onGiveUp is called, once, by the episode
// that finds the patience spent.
func (b *broker) await(ctx context.Context, d time.Duration, onGiveUp func()) (why string, spentFrom time.Time) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		b.mu.Lock()
		if b.gaveUp != "" {
			why, spentFrom := b.gaveUp, b.spentFrom
			b.mu.Unlock()
			return why, spentFrom
		}
		left := b.patience - time.Since(b.stallFrom)
		if left <= 0 {
			b.gaveUp = fmt.Sprintf("none of the play's deliveries was acknowledged or refused for %s, the broker's patience (--redelivery-patience)", shortdur.Format(b.patience))
			b.spentFrom = b.stallFrom
			b.gaveUps++
			b.wakeLocked()
			why, spentFrom := b.gaveUp, b.spentFrom
			b.mu.Unlock()
			onGiveUp()
			return why, spentFrom
		}
		wake := b.wake
		b.mu.Unlock()
		patience := time.NewTimer(left)
		select {
		case <-timer.C:
			patience.Stop()
			// The pause is over; whether the patience lasted is decided
			// above, once more, before the redelivery.
			b.mu.Lock()
			spent := b.gaveUp == "" && time.Since(b.stallFrom) >= b.patience
			b.mu.Unlock()
			if !spent {
				return "", time.Time{}
			}
		case <-patience.C:
		case <-wake:
			patience.Stop()
		case <-ctx.Done():
			patience.Stop()
			return fmt.Sprintf("the play ended (%v)", context.Cause(ctx)), time.Time{}
		}
	}
}
