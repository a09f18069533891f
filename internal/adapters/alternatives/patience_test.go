package alternatives_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/external"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/failfast"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/lease"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/polling"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/slowrelay"
	"github.com/harmless-dev/harmless/internal/destination"
)

// The tests of the alternatives that lean on a patient broker: a busy event
// is an error to redeliver (alt-fail-fast, alt-lease), a failure leaves a
// lease or a claim to wait out (alt-lease, alt-polling), contenders poll
// (alt-polling), a relay sends only when it polls (alt-slow-relay).

// alternativeNamed returns the alternative called name.
func alternativeNamed(t *testing.T, name string) alternative {
	t.Helper()
	for _, alt := range alternatives {
		if alt.name == name {
			return alt
		}
	}
	t.Fatalf("no alternative %q", name)
	return alternative{}
}

// result is what one delivery returned.
type result struct {
	outcome adapters.Outcome
	err     error
}

// deliverAsync delivers ev as attempt to impl in a goroutine of its own.
func deliverAsync(ctx context.Context, impl adapters.Implementation, ev adapters.Event, attempt int) <-chan result {
	ch := make(chan result, 1)
	go func() {
		o, err := impl.Deliver(ctx, adapters.Delivery{Event: ev, Attempt: attempt})
		ch <- result{o, err}
	}()
	return ch
}

// await returns what ch delivers; it fails the test after a minute.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("gave up waiting for %s", what)
		panic("unreachable")
	}
}

// returned reports whether ch has delivered its result, without waiting.
func returned(ch <-chan result) (result, bool) {
	select {
	case r := <-ch:
		return r, true
	default:
		return result{}, false
	}
}

// holdAttempt makes attempt of ev wait at its effect, inside the
// delivery's transaction and after its claim, until release is called (or
// the test ends). held is closed once it waits there.
func (f *fixture) holdAttempt(ev adapters.Event, attempt int) (held <-chan struct{}, release func()) {
	arrived, gate := make(chan struct{}), make(chan struct{})
	var arrive, open sync.Once
	release = func() { open.Do(func() { close(gate) }) }
	f.t.Cleanup(release)
	f.setHook(func(ctx context.Context, d adapters.Delivery) error {
		if d.Event.Namespace != ev.Namespace || d.ID != ev.ID || d.Attempt != attempt {
			return nil
		}
		arrive.Do(func() { close(arrived) })
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	return arrived, release
}

// failAttempt makes the effect of attempt of ev fail with the error it
// returns.
func (f *fixture) failAttempt(ev adapters.Event, attempt int) error {
	boom := errors.New("the effect failed")
	f.setHook(func(_ context.Context, d adapters.Delivery) error {
		if d.Event.Namespace == ev.Namespace && d.ID == ev.ID && d.Attempt == attempt {
			return boom
		}
		return nil
	})
	return boom
}

// countingClock reads the fixture's clock and counts how often one
// instance read it: a poller reads it at every look at the claim.
type countingClock struct {
	clock adapters.Clock
	reads atomic.Int64
}

func (c *countingClock) Now() time.Time {
	c.reads.Add(1)
	return c.clock.Now()
}

// awaitReads waits until c has been read at least n times.
func (f *fixture) awaitReads(c *countingClock, n int64, what string) {
	f.t.Helper()
	f.waitFor(what, func(context.Context) (bool, error) { return c.reads.Load() >= n, nil })
}

func TestFailFastBusyClaimIsAnErrorUntilTheClaimantCommits(t *testing.T) {
	f := newFixture(t, alternativeNamed(t, failfast.Name))
	w1, w2 := f.instance(1), f.instance(2)
	ev := event("orders", "busy", "p")
	conflicting := event("orders", "busy", "another payload")
	held, release := f.holdAttempt(ev, 1)
	first := deliverAsync(t.Context(), w1, ev, 1)
	await(t, held, "attempt 1 to hold its claim")

	for i, e := range []adapters.Event{ev, conflicting} {
		outcome, err := w2.Deliver(t.Context(), adapters.Delivery{Event: e, Attempt: 2 + i})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55P03" || !errors.Is(err, failfast.ErrBusy) || errors.Is(err, adapters.ErrInvalidInput) {
			t.Fatalf("Deliver(%q) while attempt 1 holds the claim = %v, %v; want an error wrapping ErrBusy and a 55P03 PgError", e.Payload, outcome, err)
		}
	}
	if n := len(f.effects(ev)); n != 0 {
		t.Fatalf("%d effects while the claim is uncommitted; want 0", n)
	}
	release()
	if r := await(t, first, "attempt 1"); r.err != nil || r.outcome != adapters.Applied {
		t.Fatalf("attempt 1 = %v, %v; want Applied", r.outcome, r.err)
	}
	f.expect(w2, ev, 4, adapters.Duplicate)
	f.expect(w2, conflicting, 5, adapters.Rejected)
	f.expectOneEffect(ev, 1)
}

// TestFailFastRecoversFromDeadConnections: after every connection of the
// pool died, as in a server restart, deliveries fail until the pool has
// replaced them, and then apply; nothing reconnects by hand.
func TestFailFastRecoversFromDeadConnections(t *testing.T) {
	f := newFixture(t, alternativeNamed(t, failfast.Name))
	w1 := f.instance(1)
	// Several connections, so that several are dead.
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() { f.expect(w1, event("warm", string(rune('a'+i)), "p"), 1, adapters.Applied) })
	}
	wg.Wait()
	if _, err := f.pool.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, f.app); err != nil {
		t.Fatal(err)
	}
	f.waitFor("the instance's connections to die", func(ctx context.Context) (bool, error) {
		n, err := f.backends(ctx, false)
		return n == 0, err
	})

	ev := event("after", "restart", "p")
	const most = 33 // a failure per pooled connection, at worst, then one that works
	for attempt := 1; ; attempt++ {
		outcome, err := w1.Deliver(t.Context(), adapters.Delivery{Event: ev, Attempt: attempt})
		switch {
		case err == nil && outcome == adapters.Applied:
			f.expectOneEffect(ev, attempt)
			t.Logf("%d deliveries failed on dead connections before one applied", attempt-1)
			return
		case err == nil || errors.Is(err, adapters.ErrInvalidInput):
			t.Fatalf("attempt %d = %v, %v; want Applied or an error to redeliver", attempt, outcome, err)
		case attempt == most:
			t.Fatalf("still failing after %d attempts: %v", attempt, err)
		}
	}
}

// leaseRow reads the lease of ev.
func (f *fixture) leaseRow(ev adapters.Event) (done bool, until time.Time) {
	f.t.Helper()
	err := f.pool.QueryRow(context.Background(), `SELECT done, lease_until FROM `+pgx.Identifier{f.schema, "alt_lease_claims"}.Sanitize()+`
WHERE namespace = $1 AND event_id = $2`, ev.Namespace, ev.ID).Scan(&done, &until)
	if err != nil {
		f.t.Fatalf("read the lease of %s: %v", ev, err)
	}
	return done, until
}

func TestLeaseFailedCompletionKeepsTheLeaseUntilItExpires(t *testing.T) {
	f := newFixture(t, alternativeNamed(t, lease.Name))
	w1, w2 := f.instance(1), f.instance(2)
	ev := event("orders", "leased", "p")
	boom := f.failAttempt(ev, 1)
	t0 := f.clock.Now()
	if outcome, err := w1.Deliver(t.Context(), adapters.Delivery{Event: ev, Attempt: 1}); !errors.Is(err, boom) {
		t.Fatalf("attempt 1 = %v, %v; want the effect's error", outcome, err)
	}
	if done, until := f.leaseRow(ev); done || !until.Equal(t0.Add(lease.Lease)) {
		t.Fatalf("after the failed attempt the lease is done=%t until %s; want not done, until %s", done, until, t0.Add(lease.Lease))
	}

	// Within the lease, on the clock, the event stays busy.
	for attempt, at := range map[int]time.Time{2: t0, 3: t0.Add(lease.Lease - time.Microsecond)} {
		f.clock.Set(at)
		if outcome, err := w2.Deliver(t.Context(), adapters.Delivery{Event: ev, Attempt: attempt}); !errors.Is(err, lease.ErrBusy) || errors.Is(err, adapters.ErrInvalidInput) {
			t.Fatalf("attempt %d at t0+%s = %v, %v; want an error wrapping ErrBusy", attempt, at.Sub(t0), outcome, err)
		}
	}
	if n := len(f.effects(ev)); n != 0 {
		t.Fatalf("%d effects within the failed delivery's lease; want 0", n)
	}

	f.clock.Set(t0.Add(lease.Lease))
	f.expect(w2, ev, 4, adapters.Applied)
	f.expect(w1, ev, 5, adapters.Duplicate)
	f.expect(w1, event("orders", "leased", "another payload"), 6, adapters.Rejected)
	f.expectOneEffect(ev, 4)
}

func TestLeaseExpiredWhileTheEffectRuns(t *testing.T) {
	// Taken over: the first owner's transaction rolls back.
	t.Run("taken over", func(t *testing.T) {
		f := newFixture(t, alternativeNamed(t, lease.Name))
		w1, w2 := f.instance(1), f.instance(2)
		ev := event("orders", "taken-over", "p")
		held, release := f.holdAttempt(ev, 1)
		first := deliverAsync(t.Context(), w1, ev, 1)
		await(t, held, "attempt 1 to reach its effect")
		f.clock.Set(f.clock.Now().Add(lease.Lease))
		f.expect(w2, ev, 2, adapters.Applied)
		release()
		if r := await(t, first, "attempt 1"); !errors.Is(r.err, lease.ErrLeaseLost) {
			t.Fatalf("attempt 1, whose lease was taken over = %v, %v; want an error wrapping ErrLeaseLost", r.outcome, r.err)
		}
		f.expectOneEffect(ev, 2)
		f.expect(w1, ev, 3, adapters.Duplicate)
	})
	// Not taken over: the lease only decides who may try, so its owner
	// still commits.
	t.Run("not taken over", func(t *testing.T) {
		f := newFixture(t, alternativeNamed(t, lease.Name))
		w1, w2 := f.instance(1), f.instance(2)
		ev := event("orders", "late", "p")
		held, release := f.holdAttempt(ev, 1)
		first := deliverAsync(t.Context(), w1, ev, 1)
		await(t, held, "attempt 1 to reach its effect")
		f.clock.Set(f.clock.Now().Add(10 * lease.Lease))
		release()
		if r := await(t, first, "attempt 1"); r.err != nil || r.outcome != adapters.Applied {
			t.Fatalf("attempt 1, past its lease = %v, %v; want Applied", r.outcome, r.err)
		}
		f.expect(w2, ev, 2, adapters.Duplicate)
		f.expectOneEffect(ev, 1)
	})
}

// TestPollersWaitForTheClaimant: deliveries of an event whose claimant is
// still in its transaction poll the claim, holding no lock and answering
// nothing, and answer once the claimant committed.
func TestPollersWaitForTheClaimant(t *testing.T) {
	f := newFixture(t, alternativeNamed(t, polling.Name))
	w1 := f.instance(1)
	ev := event("orders", "polled", "p")
	conflicting := event("orders", "polled", "another payload")
	held, release := f.holdAttempt(ev, 1)
	first := deliverAsync(t.Context(), w1, ev, 1)
	await(t, held, "attempt 1 to hold its claim")

	// An instance per poller, so that each one's clock tells that it polls.
	copies := []adapters.Event{ev, ev, ev, conflicting}
	clocks := make([]*countingClock, len(copies))
	results := make([]<-chan result, len(copies))
	for i, e := range copies {
		clocks[i] = &countingClock{clock: f.clock}
		results[i] = deliverAsync(t.Context(), f.instanceWith(2+i, clocks[i], ""), e, 2+i)
	}
	for i, c := range clocks {
		f.awaitReads(c, 3, "each delivery to look at the claim three times")
		if r, ok := returned(results[i]); ok {
			t.Fatalf("attempt %d returned %v, %v while the claim was held; want it to keep polling", 2+i, r.outcome, r.err)
		}
	}
	if waiting, err := f.backends(t.Context(), true); err != nil || waiting != 0 {
		t.Fatalf("%d connections wait on a lock while the deliveries poll (%v); want none", waiting, err)
	}

	release()
	if r := await(t, first, "attempt 1"); r.err != nil || r.outcome != adapters.Applied {
		t.Fatalf("attempt 1 = %v, %v; want Applied", r.outcome, r.err)
	}
	for i, e := range copies {
		want := adapters.Duplicate
		if string(e.Payload) == string(conflicting.Payload) {
			want = adapters.Rejected
		}
		if r := await(t, results[i], "a poller"); r.err != nil || r.outcome != want {
			t.Fatalf("attempt %d (%q) = %v, %v; want %v", 2+i, e.Payload, r.outcome, r.err, want)
		}
	}
	f.expectOneEffect(ev, 1)
}

// TestPollerTakesOverAStaleClaim: a claimant that failed leaves its claim;
// a poller takes it over once it has been unfinished for StaleAfter on the
// clock, not before.
func TestPollerTakesOverAStaleClaim(t *testing.T) {
	f := newFixture(t, alternativeNamed(t, polling.Name))
	w1 := f.instance(1)
	ev := event("orders", "stale", "p")
	boom := f.failAttempt(ev, 1)
	t0 := f.clock.Now()
	if outcome, err := w1.Deliver(t.Context(), adapters.Delivery{Event: ev, Attempt: 1}); !errors.Is(err, boom) {
		t.Fatalf("attempt 1 = %v, %v; want the effect's error", outcome, err)
	}
	clock := &countingClock{clock: f.clock}
	f.clock.Set(t0.Add(polling.StaleAfter - time.Microsecond))
	second := deliverAsync(t.Context(), f.instanceWith(2, clock, ""), ev, 2)
	f.awaitReads(clock, 3, "attempt 2 to poll the claim")
	if r, ok := returned(second); ok {
		t.Fatalf("attempt 2 returned %v, %v before the claim was stale; want it to keep polling", r.outcome, r.err)
	}
	f.clock.Set(t0.Add(polling.StaleAfter))
	if r := await(t, second, "attempt 2"); r.err != nil || r.outcome != adapters.Applied {
		t.Fatalf("attempt 2, once the claim was stale = %v, %v; want Applied", r.outcome, r.err)
	}
	f.expectOneEffect(ev, 2)
	f.expect(w1, ev, 3, adapters.Duplicate)
}

func TestPollerGivesUpWhenItsContextEnds(t *testing.T) {
	f := newFixture(t, alternativeNamed(t, polling.Name))
	ev := event("orders", "abandoned", "p")
	boom := f.failAttempt(ev, 1)
	if outcome, err := f.instance(1).Deliver(t.Context(), adapters.Delivery{Event: ev, Attempt: 1}); !errors.Is(err, boom) {
		t.Fatalf("attempt 1 = %v, %v; want the effect's error", outcome, err)
	}
	clock := &countingClock{clock: f.clock}
	ctx, cancel := context.WithCancel(t.Context())
	second := deliverAsync(ctx, f.instanceWith(2, clock, ""), ev, 2)
	f.awaitReads(clock, 2, "attempt 2 to poll the claim")
	cancel()
	if r := await(t, second, "attempt 2"); !errors.Is(r.err, context.Canceled) || errors.Is(r.err, adapters.ErrInvalidInput) {
		t.Fatalf("attempt 2, cancelled while polling = %v, %v; want an error wrapping context.Canceled", r.outcome, r.err)
	}
	if n := len(f.effects(ev)); n != 0 {
		t.Fatalf("%d effects; want 0", n)
	}
}

// startDestination runs a destination on the loopback for the test.
func startDestination(t *testing.T) *destination.Server {
	t.Helper()
	dest, err := destination.Start(t.Context(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dest.Close() })
	return dest
}

// outboxKeys returns the idempotency keys of the outbox rows of ev.
func (f *fixture) outboxKeys(ctx context.Context, ev adapters.Event) ([]string, error) {
	rows, err := f.pool.Query(ctx, `SELECT idempotency_key FROM `+pgx.Identifier{f.schema, "slow_relay_outbox"}.Sanitize()+`
WHERE namespace = $1 AND event_id = $2`, ev.Namespace, ev.ID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func (f *fixture) mustOutboxKeys(ev adapters.Event) []string {
	f.t.Helper()
	keys, err := f.outboxKeys(context.Background(), ev)
	if err != nil {
		f.t.Fatal(err)
	}
	return keys
}

// TestSlowRelaySendsAtItsNextPoll: the outbox row commits with the claim,
// and only then; the relay sends it with the identity's key when it polls,
// and retries a failed send at its next poll, not before.
func TestSlowRelaySendsAtItsNextPoll(t *testing.T) {
	f := newFixture(t, alternativeNamed(t, slowrelay.Name))
	dest := startDestination(t)
	w1 := f.instanceWith(1, f.clock, dest.URL())
	if _, ok := w1.(adapters.Drainer); ok {
		t.Fatalf("%T implements adapters.Drainer; alt-slow-relay must not", w1)
	}
	ev := event("orders", "relayed", "p")
	conflicting := event("orders", "relayed", "another payload")
	if _, err := dest.Fail(ev, 1, 500); err != nil {
		t.Fatal(err)
	}

	boom := f.failAttempt(ev, 1)
	if outcome, err := w1.Deliver(t.Context(), adapters.Delivery{Event: ev, Attempt: 1}); !errors.Is(err, boom) {
		t.Fatalf("attempt 1 = %v, %v; want the effect's error", outcome, err)
	}
	if keys := f.mustOutboxKeys(ev); len(keys) != 0 {
		t.Fatalf("outbox rows %v after a rolled-back claim; want none", keys)
	}
	f.expect(w1, ev, 2, adapters.Applied)
	f.expect(w1, ev, 3, adapters.Duplicate)
	f.expect(w1, conflicting, 4, adapters.Rejected)
	// The destination fails the first request, so the row stays at least
	// until a second poll.
	if keys := f.mustOutboxKeys(ev); len(keys) != 1 || keys[0] != external.Key(ev) {
		t.Fatalf("outbox rows of %s after its claim, a Duplicate and a conflicting copy: keys %v; want one, %s", ev, keys, external.Key(ev))
	}

	f.waitFor("the relay to send the effect", func(context.Context) (bool, error) { return dest.Processed(ev) == 1, nil })
	f.waitFor("the relay to delete the row", func(ctx context.Context) (bool, error) {
		keys, err := f.outboxKeys(ctx, ev)
		return len(keys) == 0, err
	})
	requests := dest.RequestsFor(ev)
	if len(requests) != 2 || requests[0].Status != 500 || !requests[1].Processed {
		t.Fatalf("requests for %s: %+v; want a 500, then one processed", ev, requests)
	}
	for _, r := range requests {
		if r.Key != external.Key(ev) || r.PayloadDigest != adapters.PayloadDigest(ev.Payload) {
			t.Fatalf("request %d for %s has key %q and digest %s; want %q and %s", r.Attempt, ev, r.Key, r.PayloadDigest, external.Key(ev), adapters.PayloadDigest(ev.Payload))
		}
	}
	if gap := requests[1].At.Sub(requests[0].At); gap < slowrelay.PollEvery/2 {
		t.Fatalf("the failed send was retried %s later; want it retried at the next poll, %s later", gap, slowrelay.PollEvery)
	}
	if total := dest.ProcessedTotal(); total != 1 {
		t.Fatalf("the destination processed %d effects; want 1", total)
	}
}

// TestSlowRelayCloseLeavesTheRowForTheNextInstance: Close does not drain;
// the next instance on the schema sends what is left, with the same key.
func TestSlowRelayCloseLeavesTheRowForTheNextInstance(t *testing.T) {
	f := newFixture(t, alternativeNamed(t, slowrelay.Name))
	dest := startDestination(t)
	// Down, so that a poll of the first instance before it is closed
	// cannot send the row.
	if _, err := dest.Down(); err != nil {
		t.Fatal(err)
	}
	w1 := f.instanceWith(1, f.clock, dest.URL())
	ev := event("orders", "left", "p")
	f.expect(w1, ev, 1, adapters.Applied)
	if err := w1.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if keys := f.mustOutboxKeys(ev); len(keys) != 1 {
		t.Fatalf("outbox rows of %s after Close: %v; want the one left unsent", ev, keys)
	}
	dest.Up()
	f.instanceWith(2, f.clock, dest.URL())
	f.waitFor("the next instance to send the effect", func(context.Context) (bool, error) { return dest.Processed(ev) == 1, nil })
	for _, r := range dest.RequestsFor(ev) {
		if r.Key != external.Key(ev) {
			t.Fatalf("request %d for %s has key %q; want %q", r.Attempt, ev, r.Key, external.Key(ev))
		}
	}
}
