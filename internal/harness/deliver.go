package harness

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/hooks"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/shortdur"
)

// Errors the driver records when an implementation misbehaves. They are
// recorded on the attempt, never raised: the harness survives them.
var (
	// ErrHung marks a call that did not return within its timeout, nor
	// within a grace period after its context was cancelled.
	ErrHung = errors.New("implementation hung")
	// ErrPanicked marks a call that panicked, or that ended its goroutine
	// with runtime.Goexit instead of returning.
	ErrPanicked = errors.New("implementation panicked")
	// ErrBadOutcome marks a delivery acknowledged with an outcome that is
	// not Applied, Duplicate or Rejected.
	ErrBadOutcome = errors.New("implementation returned an invalid outcome")
)

// Attempt is one delivery and what came of it.
type Attempt struct {
	// Delivery is what was delivered.
	Delivery adapters.Delivery
	// Instance is the implementation instance that handled it.
	Instance int
	// Outcome is the acknowledged outcome; meaningful only when Err is nil.
	Outcome adapters.Outcome
	// Err is non-nil when the delivery was not acknowledged.
	Err error
	// Started and Ended are offsets from the play's start.
	Started, Ended time.Duration
	// Delay is how long the broker paused, after the previous attempt of
	// this redelivery ended, before it made this one; 0 for a delivery
	// that is not a redelivery.
	Delay time.Duration
	// GaveUp, when set, says why the broker redelivered the event no more
	// after this attempt, which was not terminal.
	GaveUp string
	// AtAck is what the ledger held of the event right after the delivery
	// was acknowledged Applied or Duplicate.
	AtAck AckCheck
}

// AckCheck is what the ledger held of an event right after a delivery of
// it was acknowledged Applied or Duplicate. Either answer promises that
// the event's effect is committed: Applied, by this delivery; Duplicate,
// by any. The harness reads the ledger the moment the answer arrives, so
// an answer given before its effect was committed (an acknowledgement
// sent before COMMIT, a Duplicate for a claim whose transaction is still
// open, a claim stored without its effect) is seen as it was given,
// whatever happens later. An effect committed between the answer and the
// read hides such an answer; it never makes a true one look false.
type AckCheck struct {
	// Read is set when the harness read the ledger: the attempt was
	// acknowledged Applied or Duplicate, the play keeps a history, and
	// the read succeeded (it fails while the server is down).
	Read bool
	// Effects counts the event's effects committed at that moment.
	Effects int
}

// ackCheckTimeout bounds the ledger read after an acknowledgement: a
// server that is down (a crash, a failover) fails it rather than holding
// the delivery's bookkeeping.
const ackCheckTimeout = 2 * time.Second

// Unbacked reports whether the attempt was acknowledged Applied or
// Duplicate while the ledger held no effect of its event: the
// acknowledgement promised an effect that was not committed, and a broker
// that has it will not redeliver the event.
func (a Attempt) Unbacked() bool {
	return a.Acked() && (a.Outcome == adapters.Applied || a.Outcome == adapters.Duplicate) && a.AtAck.Read && a.AtAck.Effects == 0
}

// Acked reports whether the delivery was acknowledged.
func (a Attempt) Acked() bool { return a.Err == nil }

// Terminal reports whether a broker would stop redelivering after this
// attempt: it was acknowledged, or refused as invalid input or as a payload
// conflict.
func (a Attempt) Terminal() bool {
	return a.Err == nil || errors.Is(a.Err, adapters.ErrInvalidInput) || errors.Is(a.Err, adapters.ErrPayloadConflict)
}

// Result describes what came of the attempt: an outcome or the error.
func (a Attempt) Result() string {
	switch {
	case a.Unbacked():
		return a.Outcome.String() + ", while no effect of the event was committed"
	case a.Err == nil:
		return a.Outcome.String()
	}
	return "error: " + firstLine(a.Err.Error())
}

// TimeoutError is the cause of a guarded call's context when the call's
// timeout runs out. Its words fit an implementation in any language:
// "no answer within 15s", not Go's "context deadline exceeded". It is a
// [context.DeadlineExceeded] for errors.Is.
type TimeoutError struct {
	// Timeout is the time the call was allowed.
	Timeout time.Duration
}

func (e *TimeoutError) Error() string {
	return "no answer within " + shortdur.Format(e.Timeout)
}

// Is makes a TimeoutError a context.DeadlineExceeded.
func (e *TimeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// timedOut says, in a guarded call's error, that its timeout ran out
// when the implementation's own error does not say so in the harness's
// words (Go's "context deadline exceeded", a driver's "canceling
// statement due to user request").
func timedOut(gctx context.Context, err error) error {
	var te *TimeoutError
	if err == nil || !errors.As(context.Cause(gctx), &te) || errors.As(err, &te) {
		return err
	}
	return fmt.Errorf("%w: %w", te, err)
}

// Deliver delivers ev once to instance n. It never panics and never hangs:
// a panic, a hang or a nonsensical answer is recorded as the attempt's error.
//
// Once the play's budget has run out (see [Play.StartBudget]) it delivers
// nothing: it returns an attempt numbered 0, not in the history, whose
// error wraps [ErrBudgetExpired].
func (s *Play) Deliver(ctx context.Context, n int, ev adapters.Event) Attempt {
	ctx, release, ok := s.bounded(ctx)
	defer release()
	if !ok {
		at := time.Since(s.started)
		return Attempt{Delivery: adapters.Delivery{Event: ev}, Instance: n, Started: at, Ended: at,
			Err: fmt.Errorf("%s not delivered to instance %d: %w", ev, n, ErrBudgetExpired)}
	}
	d := adapters.Delivery{Event: ev, Attempt: s.nextAttempt(ev)}
	// The implementation gets its own copy: it must not be able to change
	// what the harness believes it delivered.
	d.Payload = slices.Clone(ev.Payload)
	a := Attempt{Delivery: adapters.Delivery{Event: ev, Attempt: d.Attempt}, Instance: n, Started: time.Since(s.started)}

	k := eventKey{ev.Namespace, ev.ID}
	s.mu.Lock()
	s.pending++
	s.inFlight[k]++
	s.mu.Unlock()
	impl, err := s.Instance(ctx, n)
	if err != nil {
		a.Err = err
	} else {
		a.Outcome, a.Err = s.guardDeliver(ctx, impl, d)
	}
	if a.Acked() && a.Outcome != adapters.Rejected && !s.opts.NoHistory {
		a.AtAck = s.checkAck(ctx, ev)
	}
	if a.Err != nil && errors.Is(context.Cause(ctx), ErrBudgetExpired) && !errors.Is(a.Err, ErrBudgetExpired) {
		a.Err = fmt.Errorf("%w: %w", ErrBudgetExpired, a.Err)
	}
	a.Ended = time.Since(s.started)
	if a.Terminal() {
		s.broker.progress()
	}
	if a.Acked() {
		s.run.acknowledged()
	}
	s.mu.Lock()
	s.pending--
	if s.inFlight[k]--; s.inFlight[k] == 0 {
		delete(s.inFlight, k)
	}
	close(s.released)
	s.released = make(chan struct{})
	if !s.opts.NoHistory {
		s.history = append(s.history, a)
	}
	s.mu.Unlock()
	return a
}

// checkAck reads how many effects of ev the ledger holds, right after a
// delivery of it was acknowledged (see [AckCheck]). It runs even when ctx
// has ended since the answer came: the answer is given, and what backs it
// is part of the evidence.
func (s *Play) checkAck(ctx context.Context, ev adapters.Event) AckCheck {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackCheckTimeout)
	defer cancel()
	n, err := ledger.Count(ctx, s.run.admin, s.schema, ev.Namespace, ev.ID)
	if err != nil {
		return AckCheck{}
	}
	return AckCheck{Read: true, Effects: n}
}

// DeliverUntilTerminal delivers ev to instance n and, as an at-least-once
// broker does, redelivers it to n until an attempt is terminal (see
// [Attempt.Terminal]). It returns every attempt it made.
//
// Each redelivery comes after a pause that grows with each try (see
// [Backoff]), and only once no other delivery of ev is in flight: a broker
// hands a message it has handed out to nobody else until that consumer
// acknowledges it, gives it back, or times out. So an implementation that
// fails fast rather than wait for a lock another delivery of the event
// holds (a short lock_timeout, NOWAIT, a lease) is redelivered once that
// delivery has ended, not while it still holds the lock.
//
// The broker is patient per play (see [broker]): it gives up once a whole
// patience (Options.RedeliveryPatience) has passed in which events of the
// play awaited redelivery and none of the play's deliveries was terminal;
// the last attempt then says why in [Attempt.GaveUp]. It gives up at once,
// too, when no delivery of the run has been acknowledged and an earlier
// play's patience ran out, when ctx ends, or when the play's budget runs
// out.
//
// And it gives up on one event at once, without waiting out the play's
// patience, once the run has shown that the implementation leaves
// acknowledgements missing: a play's patience ran out, earlier in the
// run, on an event whose effect was committed (see [Run.missingAcks],
// which says why this changes no verdict). From then on a failed
// redelivery of an event whose effect was committed before it is the
// event's last. The broker waits out the play's patience as before when
// the failure is not the implementation's answer: a crash of its process
// (which its supervisor restarts, and the next redelivery may find back)
// or a failure the harness injected; and in a play that disrupts the
// server (PlayOptions.DisruptsServer), or while one is open, which
// neither gives the evidence nor is cut short by it.
func (s *Play) DeliverUntilTerminal(ctx context.Context, n int, ev adapters.Event) []Attempt {
	return s.RedeliverUntilTerminal(ctx, n, ev, []Attempt{s.Deliver(ctx, n, ev)})
}

// RedeliverUntilTerminal goes on where a delivery of ev left off: tries
// are the attempts made so far, the last of them the one that decides.
// Unless it is terminal, ev is redelivered to instance n as
// [Play.DeliverUntilTerminal] does, and tries are returned with the
// redeliveries appended (the last marked with [Attempt.GaveUp] if the
// broker gave up).
func (s *Play) RedeliverUntilTerminal(ctx context.Context, n int, ev adapters.Event, tries []Attempt) []Attempt {
	attempts := slices.Clone(tries)
	done := func(a Attempt) bool {
		return a.Terminal() || ctx.Err() != nil || errors.Is(a.Err, ErrBudgetExpired)
	}
	if len(attempts) == 0 || done(attempts[len(attempts)-1]) {
		return attempts
	}
	why := s.broker.open(s.run.hopeless)
	defer s.broker.close()
	var spentFrom time.Time
	for k := 1; why == ""; k++ {
		if why, spentFrom = s.broker.await(ctx, s.broker.backoff(k), s.run.gaveUp); why != "" {
			break
		}
		if !s.awaitAlone(ctx, ev) {
			return attempts
		}
		prev := attempts[len(attempts)-1]
		before := s.beforeRedelivery(ctx, n, ev)
		a := s.Deliver(ctx, n, ev)
		a.Delay = a.Started - prev.Ended
		s.setAttempt(a)
		attempts = append(attempts, a)
		if done(a) {
			return attempts
		}
		why = s.onlyMissing(before, n, a)
	}
	if !spentFrom.IsZero() {
		s.spentOn(ctx, ev, s.started.Add(attempts[0].Started), spentFrom)
	}
	last := &attempts[len(attempts)-1]
	last.GaveUp = why
	s.setAttempt(*last)
	return attempts
}

// spentOn notes, for the run, that the play's patience ran out, in a
// stall that began at stalled, while ev, first delivered in this episode
// at began, awaited redelivery: if ev was delivered before the stall began
// and its effect is committed, the implementation has left its
// acknowledgement missing for a whole patience (see [Run.missingAcks]).
// An event first delivered during the stall was not waited for that long.
// A play that disrupts the server, or a stall that overlapped one, is no
// such evidence: the implementation may have been reconnecting all along.
func (s *Play) spentOn(ctx context.Context, ev adapters.Event, began, stalled time.Time) {
	if s.opts.DisruptsServer || began.After(stalled) || !s.run.calm(stalled) {
		return
	}
	if c := s.checkAck(ctx, ev); c.Read && c.Effects > 0 && s.run.calm(stalled) {
		s.run.noteMissingAck(s.title(), ev)
	}
}

// redelivery is what the broker saw right before a redelivery, to judge
// after it whether the implementation only left an acknowledgement
// missing (see [Play.onlyMissing]).
type redelivery struct {
	// evidence is the run's evidence that the implementation leaves
	// acknowledgements missing ([Run.missingAcks]), set only when the
	// redelivery's event had its effect committed and no play disrupted
	// the server: "" when the redelivery cannot end the event's episode
	// early.
	evidence string
	// at is when the broker looked, crashes how often instance n's
	// processes had failed by then.
	at      time.Time
	crashes int
}

// beforeRedelivery looks at what the broker needs, before redelivering ev
// to instance n, to judge the redelivery with [Play.onlyMissing]. It reads
// the ledger only once the run has shown that the implementation leaves
// acknowledgements missing: a correct implementation costs nothing.
func (s *Play) beforeRedelivery(ctx context.Context, n int, ev adapters.Event) redelivery {
	if s.opts.DisruptsServer {
		return redelivery{}
	}
	evidence := s.run.missingAcks()
	if evidence == "" {
		return redelivery{}
	}
	at := time.Now()
	if !s.run.calm(at) {
		return redelivery{}
	}
	if c := s.checkAck(ctx, ev); !c.Read || c.Effects == 0 {
		return redelivery{}
	}
	return redelivery{evidence: evidence, at: at, crashes: s.processCrashes(n)}
}

// onlyMissing says why the broker redelivers ev no more after a, a
// redelivery to instance n that was not terminal, when before shows that
// its event's effect was committed before it and the run holds the
// evidence that the implementation leaves such acknowledgements missing;
// "" when the broker goes on. A failure that is not the implementation's
// answer goes on: a crash of its process (a panic of its own, or a process
// its supervisor restarts), a failure the harness injected, the play's
// budget, or a play that disrupted the server in the meantime.
func (s *Play) onlyMissing(before redelivery, n int, a Attempt) string {
	if before.evidence == "" || a.Terminal() || errors.Is(a.Err, hooks.ErrInjected) || errors.Is(a.Err, ErrBudgetExpired) {
		return ""
	}
	if _, crashed := PanicCrash(a); crashed || s.processCrashes(n) > before.crashes || !s.run.calm(before.at) {
		return ""
	}
	return "the event's effect was committed before this redelivery, which failed; " + before.evidence
}

// setAttempt replaces a's entry in the history with a.
func (s *Play) setAttempt(a Attempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.history) - 1; i >= 0; i-- {
		h := &s.history[i]
		if h.Delivery.Attempt == a.Delivery.Attempt && h.Delivery.Namespace == a.Delivery.Namespace && h.Delivery.ID == a.Delivery.ID {
			*h = a
			return
		}
	}
}

// awaitAlone waits until no delivery of ev is in flight. It reports false
// at once if ctx ends or the play's budget runs out first.
func (s *Play) awaitAlone(ctx context.Context, ev adapters.Event) bool {
	ctx, release, ok := s.bounded(ctx)
	defer release()
	if !ok {
		return false
	}
	k := eventKey{ev.Namespace, ev.ID}
	for {
		s.mu.Lock()
		busy, released := s.inFlight[k] > 0, s.released
		s.mu.Unlock()
		if !busy {
			return true
		}
		select {
		case <-released:
		case <-ctx.Done():
			return false
		}
	}
}

// History returns every attempt made for ev, in the order they ended.
func (s *Play) History(ev adapters.Event) []Attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Attempt
	for _, a := range s.history {
		if a.Delivery.Namespace == ev.Namespace && a.Delivery.ID == ev.ID {
			out = append(out, a)
		}
	}
	return out
}

func (s *Play) nextAttempt(ev adapters.Event) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := eventKey{ev.Namespace, ev.ID}
	s.attempts[k]++
	return s.attempts[k]
}

func (s *Play) guardDeliver(ctx context.Context, impl adapters.Implementation, d adapters.Delivery) (adapters.Outcome, error) {
	timeout := s.run.opts.DeliveryTimeout
	dctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	outcome, err := guard(hooks.WithCancel(dctx, cancel), timeout, func(ctx context.Context) (adapters.Outcome, error) {
		return impl.Deliver(ctx, d)
	})
	switch {
	case errors.Is(err, ErrHung):
		return 0, fmt.Errorf("Deliver(%s attempt %d): %w", d.Event, d.Attempt, err)
	case err == nil && !ValidOutcome(outcome):
		return 0, fmt.Errorf("%w: %s with a nil error", ErrBadOutcome, outcome)
	}
	return outcome, err
}

// ValidOutcome reports whether o is one of the outcomes adapters defines
// (Applied, Duplicate, Rejected): an implementation may return any int.
func ValidOutcome(o adapters.Outcome) bool { return o >= adapters.Applied && o <= adapters.Rejected }

func guardFactory(ctx context.Context, adapter adapters.Adapter, env adapters.Env, timeout time.Duration) (adapters.Implementation, error) {
	impl, err := guard(ctx, timeout, func(ctx context.Context) (adapters.Implementation, error) {
		return adapter.New(ctx, env)
	})
	if err == nil && impl == nil {
		return nil, errors.New("the factory returned a nil implementation and a nil error")
	}
	return impl, err
}

func guardClose(ctx context.Context, impl adapters.Implementation, timeout time.Duration) error {
	_, err := guard(ctx, timeout, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, impl.Close(ctx)
	})
	return err
}

// errGoexit is wrapped in ErrPanicked by guard.
var errGoexit = errors.New("called runtime.Goexit instead of returning")

// guard calls fn on its own goroutine with a context that ends after
// timeout. A panic in fn, or fn calling runtime.Goexit, becomes an error
// wrapping ErrPanicked. If fn does not return within a grace period after
// its context ended, guard gives up on it (the goroutine is abandoned) and
// returns an error wrapping ErrHung.
func guard[T any](ctx context.Context, timeout time.Duration, fn func(context.Context) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	gctx, stop := context.WithTimeoutCause(ctx, timeout, &TimeoutError{Timeout: timeout})
	defer stop()
	done := make(chan result, 1)
	go func() {
		var r result
		returned := false
		defer func() {
			if p := recover(); p != nil {
				r = result{err: panicError(p)}
			} else if !returned {
				// runtime.Goexit (t.FailNow, for one) unwinds without a
				// panic value; fn's results were never set.
				r = result{err: fmt.Errorf("%w: %w", ErrPanicked, errGoexit)}
			}
			done <- r
		}()
		r.v, r.err = fn(gctx)
		returned = true
	}()
	r, ok := await(gctx, done, grace(timeout))
	if !ok {
		var zero T
		return zero, fmt.Errorf("%w: %w, nor in the %s after that", ErrHung, &TimeoutError{Timeout: timeout}, shortdur.Format(grace(timeout)))
	}
	return r.v, timedOut(gctx, r.err)
}

// await waits for a result; once ctx is done it allows the call a grace
// period to notice and return.
func await[T any](ctx context.Context, done <-chan T, grace time.Duration) (T, bool) {
	select {
	case r := <-done:
		return r, true
	case <-ctx.Done():
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case r := <-done:
		return r, true
	case <-t.C:
		var zero T
		return zero, false
	}
}

func grace(timeout time.Duration) time.Duration { return min(timeout, 5*time.Second) }

func panicError(p any) error { return panicked{value: p, stack: string(debug.Stack())} }

// panicked is the error of a call that panicked: it quotes the panic's
// value and the stack, and unwraps to ErrPanicked and, for a panic the
// harness injected, to hooks.ErrInjected, so that it is told apart from
// the implementation's own; never to anything else the value wraps, which
// could make a panic look like a refusal.
type panicked struct {
	value any
	stack string
}

func (p panicked) Error() string { return fmt.Sprintf("%v: %v\n%s", ErrPanicked, p.value, p.stack) }

func (p panicked) Unwrap() []error {
	if err, ok := p.value.(error); ok && errors.Is(err, hooks.ErrInjected) {
		return []error{ErrPanicked, hooks.ErrInjected}
	}
	return []error{ErrPanicked}
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
