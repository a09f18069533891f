package broken_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/faults/pgproxy"
	"github.com/harmless-dev/harmless/internal/adapters/broken/asynccommit"
	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/effect"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The broken adapters' names, spelled out: other tooling depends on them.
const (
	asyncCommit     = "broken-async-commit"
	busyIsDuplicate = "broken-busy-is-duplicate"
	cachedClaims    = "broken-cached-claims"
	caseFolded      = "broken-case-folded"
	checkThenInsert = "broken-check-then-insert"
	earlyPurge      = "broken-early-purge"
	effectFirst     = "broken-effect-first"
	ignorePayload   = "broken-ignore-payload"
	inMemory        = "broken-in-memory"
	lossyKey        = "broken-lossy-key"
	markerFirst     = "broken-marker-first"
	noNamespace     = "broken-no-namespace"
	noPurge         = "broken-no-purge"
	rebuildPurge    = "broken-rebuild-purge"
	singleHost      = "broken-single-host"
	sqlSplice       = "broken-sql-splice"
	truncatedKey    = "broken-truncated-key"
	// It errs on every redelivery of an applied event.
	redeliveryErrors = "broken-redelivery-errors"
	// Their bug lies at the external boundary; without a destination they
	// are the reference.
	outboxDeleteFirst = "broken-outbox-delete-first"
	randomKey         = "broken-random-key"
	sendAfterCommit   = "broken-send-after-commit"
	sendInTx          = "broken-send-in-tx"
)

var names = []string{asyncCommit, busyIsDuplicate, cachedClaims, caseFolded, checkThenInsert, earlyPurge, effectFirst, ignorePayload, inMemory, lossyKey, markerFirst, noNamespace, noPurge, rebuildPurge, redeliveryErrors, singleHost, sqlSplice, truncatedKey,
	outboxDeleteFirst, randomKey, sendAfterCommit, sendInTx}

// external is what the adapters whose bug lies at the external boundary
// declare.
var external = map[string]adapters.ExternalEffects{
	outboxDeleteFirst: adapters.Outbox, randomKey: adapters.Outbox,
	sendAfterCommit: adapters.DestinationIdempotency, sendInTx: adapters.DestinationIdempotency,
}

// world is one adapter in a fresh schema with its ledger, as the harness
// sets up a play of a fixture, with instances built on demand.
type world struct {
	t         *testing.T
	adapter   adapters.Adapter
	schema    string
	instances map[int]adapters.Implementation
	// hook, when set, runs inside every effect.
	hook effect.Hook
	// inTx, when set, runs inside every effect too, before the hook, with
	// the delivery's transaction.
	inTx func(ctx context.Context, tx pgx.Tx, d adapters.Delivery) error
	// dsn, when set, is the DSN instances are built with, instead of the
	// shared server's.
	dsn string
	// clock, when set, is the clock instances are built with, instead of
	// the system's.
	clock adapters.Clock
}

// spied is the ledger's effect that first runs its world's inTx.
type spied struct {
	adapters.Effect
	w *world
}

func (s spied) Apply(ctx context.Context, tx pgx.Tx, d adapters.Delivery) error {
	if s.w.inTx != nil {
		if err := s.w.inTx(ctx, tx, d); err != nil {
			return err
		}
	}
	return s.Effect.Apply(ctx, tx, d)
}

var schemas atomic.Int64

// newWorld sets up the built-in adapter called name.
func newWorld(t *testing.T, name string) *world {
	t.Helper()
	adapter, err := builtin.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	pool := pgtest.Pool(t)
	schema := fmt.Sprintf("harmless_test_broken_%d_%d", time.Now().UnixNano(), schemas.Add(1))
	if _, err := pool.Exec(t.Context(), `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the instances are closed.
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	if err := ledger.Install(t.Context(), pool, schema); err != nil {
		t.Fatal(err)
	}
	return &world{t: t, adapter: adapter, schema: schema, instances: map[int]adapters.Implementation{}}
}

// instance returns instance n, building it on first use.
func (w *world) instance(n int) adapters.Implementation {
	w.t.Helper()
	if impl, ok := w.instances[n]; ok {
		return impl
	}
	impl, err := w.open(n)
	if err != nil {
		w.t.Fatalf("%s: New: %v", w.adapter.Name, err)
	}
	w.instances[n] = impl
	return impl
}

// open builds instance n, to be closed when the test ends.
func (w *world) open(n int) (adapters.Implementation, error) {
	w.t.Helper()
	hook := func(ctx context.Context, d adapters.Delivery) error {
		if w.hook == nil {
			return nil
		}
		return w.hook(ctx, d)
	}
	dsn := w.dsn
	if dsn == "" {
		dsn = pgtest.DSN(w.t)
	}
	var clock adapters.Clock = harness.SystemClock{}
	if w.clock != nil {
		clock = w.clock
	}
	impl, err := w.adapter.New(w.t.Context(), adapters.Env{
		DSN:      dsn,
		Schema:   w.schema,
		Effect:   spied{Effect: ledger.Effect(w.schema, hook), w: w},
		Clock:    clock,
		Instance: n,
		Logf:     w.t.Logf,
	})
	if err != nil {
		return nil, err
	}
	w.t.Cleanup(func() {
		if err := impl.Close(context.Background()); err != nil {
			w.t.Errorf("%s: Close: %v", w.adapter.Name, err)
		}
	})
	return impl, nil
}

// deliver delivers ev to instance n as attempt.
func (w *world) deliver(n int, ev adapters.Event, attempt int) (adapters.Outcome, error) {
	w.t.Helper()
	return w.instance(n).Deliver(w.t.Context(), adapters.Delivery{Event: ev, Attempt: attempt})
}

// expect delivers ev to instance n as attempt and fails unless it is
// acknowledged with want.
func (w *world) expect(n int, ev adapters.Event, attempt int, want adapters.Outcome) {
	w.t.Helper()
	if got, err := w.deliver(n, ev, attempt); err != nil || got != want {
		w.t.Fatalf("%s: attempt %d of %s %q on instance %d = %v, %v; want %v", w.adapter.Name, attempt, ev, ev.Payload, n, got, err, want)
	}
}

// effects fails unless ev has want effects in the ledger.
func (w *world) effects(ev adapters.Event, want int) {
	w.t.Helper()
	entries, err := ledger.Entries(w.t.Context(), pgtest.Pool(w.t), w.schema, ev.Namespace, ev.ID)
	if err != nil {
		w.t.Fatal(err)
	}
	if len(entries) != want {
		w.t.Fatalf("%s: %s has %d effects; want %d", w.adapter.Name, ev, len(entries), want)
	}
}

// purge purges instance n with cutoff and fails unless it removed want.
func (w *world) purge(n int, cutoff time.Time, want int64) {
	w.t.Helper()
	purger, ok := w.instance(n).(adapters.Purger)
	if !ok {
		w.t.Fatalf("%s does not implement adapters.Purger", w.adapter.Name)
	}
	if got, err := purger.Purge(w.t.Context(), cutoff); err != nil || got != want {
		w.t.Fatalf("%s: Purge(now%+v) = %d, %v; want %d removed", w.adapter.Name, time.Until(cutoff).Round(time.Minute), got, err, want)
	}
}

func event(namespace, id, payload string) adapters.Event {
	return adapters.Event{Namespace: namespace, ID: id, Payload: []byte(payload)}
}

// failAttempt returns a hook that fails the given attempt with err, or
// panics when err is nil.
func failAttempt(attempt int, err error) effect.Hook {
	return func(_ context.Context, d adapters.Delivery) error {
		switch {
		case d.Attempt != attempt:
			return nil
		case err == nil:
			panic("effect panicked")
		}
		return err
	}
}

// result is what came of one delivery.
type result struct {
	outcome adapters.Outcome
	err     error
}

// interleave runs attempt 1 of ev on instance 1, pausing it inside its effect
// until attempt 2 on instance 1 has returned: the interleaving a race between
// two deliveries produces. It fails unless they are acknowledged with first
// and second.
func (w *world) interleave(ev adapters.Event, first, second adapters.Outcome) {
	w.t.Helper()
	r1, r2 := w.race(ev, nil)
	if r1.err != nil || r2.err != nil || r1.outcome != first || r2.outcome != second {
		w.t.Fatalf("%s: interleaved attempts = %v, %v and %v, %v; want %v and %v", w.adapter.Name, r1.outcome, r1.err, r2.outcome, r2.err, first, second)
	}
}

// race runs attempt 1 of ev on instance 1, pausing it inside its effect,
// after its claim, until attempt 2 on instance 1 has returned; attempt 1's
// effect then fails with fail, or succeeds when fail is nil. It returns
// what came of each attempt.
func (w *world) race(ev adapters.Event, fail error) (first, second result) {
	w.t.Helper()
	w.instance(1)
	paused, resume := make(chan struct{}), make(chan struct{})
	w.hook = func(ctx context.Context, d adapters.Delivery) error {
		if d.Attempt != 1 {
			return nil
		}
		close(paused)
		select {
		case <-resume:
			return fail
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	done := make(chan result, 1)
	go func() {
		outcome, err := w.instance(1).Deliver(w.t.Context(), adapters.Delivery{Event: ev, Attempt: 1})
		done <- result{outcome, err}
	}()
	<-paused
	ctx, cancel := context.WithTimeout(w.t.Context(), 10*time.Second)
	second.outcome, second.err = w.instance(1).Deliver(ctx, adapters.Delivery{Event: ev, Attempt: 2})
	cancel()
	close(resume)
	return <-done, second
}

func TestEveryBrokenAdapterIsBuiltInAndDeclaresWhatTheReferenceDoes(t *testing.T) {
	for _, name := range names {
		a, err := builtin.Lookup(name)
		if err != nil {
			t.Error(err)
			continue
		}
		if err := a.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		want := reference.Adapter().Declares
		want.ExternalEffects = external[name]
		if a.Declares != want {
			t.Errorf("%s declares %+v; want the reference's claims on the database %+v", name, a.Declares, want)
		}
	}
}

// TestOneInstanceInSequenceIsHandledLikeTheReference checks what every broken
// adapter gets right: one instance, one delivery at a time, no failures.
func TestOneInstanceInSequenceIsHandledLikeTheReference(t *testing.T) {
	for _, name := range names {
		if name == redeliveryErrors {
			continue // its bug: attempt 2 errs where the reference is Duplicate
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, name)
			ev := event("orders", "42", `{"total":1}`)
			w.expect(1, ev, 1, adapters.Applied)
			w.expect(1, ev, 2, adapters.Duplicate)
			w.expect(1, event("refunds", "43", `{}`), 1, adapters.Applied)
			conflict := adapters.Rejected
			if name == ignorePayload {
				conflict = adapters.Duplicate // its bug
			}
			w.expect(1, event("orders", "42", `{"total":2}`), 3, conflict)
			w.effects(ev, 1)
			bad := []adapters.Event{event("n", "", "x"), event("n", "a\x00b", "x"), event("\xff", "1", "x")}
			if name == lossyKey {
				bad = bad[:1] // its bug: it keeps what its key can encode, however lossily
			}
			for _, bad := range bad {
				if _, err := w.deliver(1, bad, 1); !errors.Is(err, adapters.ErrInvalidInput) {
					t.Errorf("Deliver(%s) err = %v; want ErrInvalidInput", bad, err)
				}
			}
			if _, ok := w.instance(1).(adapters.Purger); !ok {
				t.Errorf("%s does not implement adapters.Purger", name)
			}
		})
	}
}

// TestFailedEffectLeavesTheEventToTheRetry checks that the adapters whose
// bug is elsewhere roll a failed delivery back and apply its retry.
func TestFailedEffectLeavesTheEventToTheRetry(t *testing.T) {
	for _, name := range names {
		if name == markerFirst {
			continue // its bug
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, name)
			boom := errors.New("boom")
			w.hook = failAttempt(1, boom)
			ev := event("orders", "1", "x")
			if _, err := w.deliver(1, ev, 1); !errors.Is(err, boom) {
				t.Fatalf("attempt 1 err = %v; want %v", err, boom)
			}
			w.expect(1, ev, 2, adapters.Applied)
			w.effects(ev, 1)
		})
	}
}

// TestBugs shows each adapter's bug, deterministically, in plain Go.
func TestBugs(t *testing.T) {
	ev := event("orders", "1", "x")
	for _, bug := range []struct {
		adapter, bug string
		show         func(w *world)
	}{
		{busyIsDuplicate, "a delivery that finds the event busy is a Duplicate, and the event is lost when the claimant fails", func(w *world) {
			boom := errors.New("boom")
			claimant, busy := w.race(ev, boom)
			if !errors.Is(claimant.err, boom) || busy.err != nil || busy.outcome != adapters.Duplicate {
				w.t.Fatalf("the claimant ended %v, %v and the delivery that found it busy %v, %v; want %v, and Duplicate", claimant.outcome, claimant.err, busy.outcome, busy.err, boom)
			}
			w.effects(ev, 0)
		}},
		{checkThenInsert, "interleaved deliveries both apply", func(w *world) {
			w.interleave(ev, adapters.Applied, adapters.Applied)
			w.effects(ev, 2)
		}},
		{effectFirst, "interleaved deliveries both apply", func(w *world) {
			w.interleave(ev, adapters.Applied, adapters.Applied)
			w.effects(ev, 2)
		}},
		{markerFirst, "the retry of a failed effect is a Duplicate and the event is lost", func(w *world) {
			boom := errors.New("boom")
			w.hook = failAttempt(1, boom)
			if _, err := w.deliver(1, ev, 1); !errors.Is(err, boom) {
				w.t.Fatalf("attempt 1 err = %v; want %v", err, boom)
			}
			w.expect(1, ev, 2, adapters.Duplicate)
			w.effects(ev, 0)
		}},
		{ignorePayload, "a conflicting payload is a Duplicate", func(w *world) {
			w.expect(1, ev, 1, adapters.Applied)
			w.expect(1, event(ev.Namespace, ev.ID, "another payload"), 2, adapters.Duplicate)
			w.effects(ev, 1)
		}},
		{noNamespace, "the same id in another namespace is a Duplicate", func(w *world) {
			refunds := event("refunds", ev.ID, string(ev.Payload))
			w.expect(1, ev, 1, adapters.Applied)
			w.expect(1, refunds, 1, adapters.Duplicate)
			w.effects(refunds, 0)
		}},
		{earlyPurge, "Purge removes a marker newer than the cutoff", func(w *world) {
			w.expect(1, ev, 1, adapters.Applied)
			w.purge(1, time.Now().Add(-time.Hour), 1)
			w.expect(1, ev, 2, adapters.Applied)
			w.effects(ev, 2)
		}},
		{noPurge, "Purge removes nothing", func(w *world) {
			w.expect(1, ev, 1, adapters.Applied)
			w.purge(1, time.Now().Add(time.Hour), 0)
			w.expect(1, ev, 2, adapters.Duplicate)
			w.effects(ev, 1)
		}},
		{sqlSplice, "a quote in the id breaks the claim with an error that is not invalid input", func(w *world) {
			quoted := event("orders", "o'brien", "x")
			_, err := w.deliver(1, quoted, 1)
			if err == nil || errors.Is(err, adapters.ErrInvalidInput) {
				w.t.Fatalf("delivering %s: err = %v; want a syntax error that is not ErrInvalidInput", quoted, err)
			}
			w.effects(quoted, 0)
		}},
		{lossyKey, "ids that differ only in an invalid UTF-8 byte are one event", func(w *world) {
			ff, fe := event("orders", "x\xff", "x"), event("orders", "x\xfe", "x")
			w.expect(1, ff, 1, adapters.Applied)
			w.expect(2, fe, 1, adapters.Duplicate)
			w.effects(fe, 0)
		}},
		{caseFolded, "ids that differ only in letter case are one event", func(w *world) {
			upper, lower := event("orders", "Order-7", "x"), event("orders", "order-7", "x")
			w.expect(1, upper, 1, adapters.Applied)
			w.expect(2, lower, 1, adapters.Duplicate)
			w.effects(lower, 0)
		}},
		{truncatedKey, "ids that share their first 64 characters are one event", func(w *world) {
			for _, shared := range []int{63, 64} {
				prefix := strings.Repeat("é", shared) // 2 bytes each: the cut counts characters
				a, b := event("orders", prefix+"a", "x"), event("orders", prefix+"b", "x")
				w.expect(1, a, 1, adapters.Applied)
				if shared < 64 {
					w.expect(2, b, 1, adapters.Applied)
					w.effects(b, 1)
					continue
				}
				w.expect(2, b, 1, adapters.Duplicate)
				w.effects(b, 0)
			}
		}},
		{asyncCommit, "its deliveries commit with synchronous_commit = local", func(w *world) {
			var server, setting string
			if err := pgtest.Pool(w.t).QueryRow(w.t.Context(), `SHOW synchronous_commit`).Scan(&server); err != nil {
				w.t.Fatal(err)
			}
			if server == asynccommit.Setting {
				w.t.Skipf("the server's own default is synchronous_commit = %s: the adapter's setting changes nothing here", server)
			}
			w.inTx = func(ctx context.Context, tx pgx.Tx, _ adapters.Delivery) error {
				return tx.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&setting)
			}
			w.expect(1, ev, 1, adapters.Applied)
			if setting != asynccommit.Setting {
				w.t.Fatalf("the delivery's transaction ran with synchronous_commit = %q (the server's default is %q); want %q", setting, server, asynccommit.Setting)
			}
			w.effects(ev, 1)
		}},
		{cachedClaims, "a claim the database lost is still Duplicate, from the cache, and the event is lost", func(w *world) {
			w.expect(1, ev, 1, adapters.Applied)
			w.lose(ev) // as a failover to a standby that lacked the commit would
			w.expect(1, ev, 2, adapters.Duplicate)
			w.expect(1, event(ev.Namespace, ev.ID, "another payload"), 3, adapters.Rejected)
			w.effects(ev, 0)
			// An instance that never saw the event asks the database, which
			// no longer has it: the reference's answer.
			w.expect(2, ev, 4, adapters.Applied)
			w.effects(ev, 1)
		}},
		{singleHost, "once its first host is gone, every delivery fails, while the reference follows the DSN to the second", func(w *world) {
			server := address(w.t, pgtest.DSN(w.t))
			proxy := pgproxy.New()
			w.t.Cleanup(func() { _ = proxy.Close() })
			viaProxy, err := proxy.DSN("primary", pgtest.DSN(w.t))
			if err != nil {
				w.t.Fatal(err)
			}
			// The proxy is the primary, the server itself the other host.
			w.dsn = withHosts(w.t, viaProxy, proxy.Listeners("primary")[0].Addr(), server)
			ref := w.sibling(reference.Name)
			w.expect(1, ev, 1, adapters.Applied)
			ref.expect(1, ev, 1, adapters.Applied)
			if err := proxy.Close(); err != nil {
				w.t.Fatal(err)
			}
			later := event("orders", "2", "x")
			var errs []error
			for attempt := 1; attempt <= 5; attempt++ {
				if _, err := w.deliver(1, later, attempt); err == nil {
					w.t.Fatalf("attempt %d of %s succeeded with its first host gone", attempt, later)
				} else {
					errs = append(errs, err)
				}
			}
			w.t.Logf("its last error: %v", errs[len(errs)-1])
			w.effects(later, 0)
			ref.untilAcknowledged(1, later, adapters.Applied)
			ref.effects(later, 1)
		}},
		{inMemory, "a second instance applies the event again", func(w *world) {
			w.expect(1, ev, 1, adapters.Applied)
			w.expect(1, ev, 2, adapters.Duplicate)
			w.expect(2, ev, 3, adapters.Applied)
			w.effects(ev, 2)
		}},
		{redeliveryErrors, "every redelivery of an applied event fails on the marker's unique key, with nothing doubled, and is never Duplicate nor Rejected", func(w *world) {
			w.expect(1, ev, 1, adapters.Applied)
			for i, again := range []adapters.Event{ev, ev, event(ev.Namespace, ev.ID, "another payload")} {
				_, err := w.deliver(1+i%2, again, i+2)
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || pgErr.Code != "23505" || errors.Is(err, adapters.ErrPayloadConflict) {
					w.t.Fatalf("attempt %d of %s %q: err = %v; want the unique violation (SQLSTATE 23505), not a payload conflict", i+2, again, again.Payload, err)
				}
			}
			w.effects(ev, 1)
			w.expect(1, event("refunds", ev.ID, "x"), 1, adapters.Applied)
		}},
		{rebuildPurge, "a claim committed while Purge copies the table is lost when it swaps", func(w *world) {
			w.showLostClaim()
		}},
	} {
		t.Run(bug.adapter, func(t *testing.T) {
			t.Parallel()
			t.Log(bug.bug)
			bug.show(newWorld(t, bug.adapter))
		})
	}
}

// TestInMemoryIsOtherwiseCorrect checks the in-memory adapter's claims
// within one instance: in progress, released after a panic, purged.
func TestInMemoryIsOtherwiseCorrect(t *testing.T) {
	ev := event("orders", "1", "x")
	t.Run("an in-progress claim is a Duplicate", func(t *testing.T) {
		w := newWorld(t, inMemory)
		w.interleave(ev, adapters.Applied, adapters.Duplicate)
		w.effects(ev, 1)
	})
	t.Run("a panicking effect releases its claim", func(t *testing.T) {
		w := newWorld(t, inMemory)
		w.hook = failAttempt(1, nil)
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("attempt 1 did not panic")
				}
			}()
			_, _ = w.deliver(1, ev, 1)
		}()
		w.expect(1, ev, 2, adapters.Applied)
		w.effects(ev, 1)
	})
	t.Run("Purge removes the entries claimed before the cutoff", func(t *testing.T) {
		w := newWorld(t, inMemory)
		w.expect(1, ev, 1, adapters.Applied)
		w.purge(1, time.Now().Add(-time.Hour), 0)
		w.purge(1, time.Now().Add(time.Hour), 1)
		w.expect(1, ev, 2, adapters.Applied)
		w.effects(ev, 2)
	})
}

// showLostClaim shows broken-rebuild-purge's bug without any timing: a
// delivery claims an event and stays open inside its effect while a purge
// starts; the purge's copy cannot see the uncommitted marker, and its DROP
// TABLE waits for the delivery's lock, which pg_stat_activity shows. The
// delivery then commits, the purge drops the table its marker is in, and
// a redelivery of the event is applied again.
func (w *world) showLostClaim() {
	w.t.Helper()
	app := "rebuild-" + w.schema // within the 63 bytes PostgreSQL keeps of a name
	w.dsn = pgtest.NamedDSN(w.t, app)
	kept, lost := event("orders", "kept", "x"), event("orders", "lost", "x")
	w.expect(1, kept, 1, adapters.Applied)
	w.instance(2)
	claimed, commit := make(chan struct{}), make(chan struct{})
	w.inTx = func(ctx context.Context, _ pgx.Tx, d adapters.Delivery) error {
		if d.ID != lost.ID || d.Attempt != 1 {
			return nil
		}
		close(claimed)
		select {
		case <-commit:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	delivered := make(chan result, 1)
	go func() {
		outcome, err := w.instances[1].Deliver(w.t.Context(), adapters.Delivery{Event: lost, Attempt: 1})
		delivered <- result{outcome, err}
	}()
	<-claimed
	purged := make(chan error, 1)
	go func() {
		_, err := w.instances[2].(adapters.Purger).Purge(w.t.Context(), time.Now().Add(-time.Hour))
		purged <- err
	}()
	// The purge has copied the table once its DROP waits for the open
	// delivery's lock.
	watch := pgtest.Pool(w.t)
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for waiting := false; !waiting; {
		select {
		case err := <-purged:
			close(commit)
			w.t.Fatalf("the purge ended (%v) before it waited for the open delivery", err)
		case <-poll.C:
		case <-w.t.Context().Done():
			return
		}
		err := watch.QueryRow(w.t.Context(), `SELECT count(*) > 0 FROM pg_stat_activity
WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE 'DROP TABLE %'`, app).Scan(&waiting)
		if err != nil {
			close(commit)
			w.t.Fatal(err)
		}
	}
	close(commit)
	if r := <-delivered; r.err != nil || r.outcome != adapters.Applied {
		w.t.Fatalf("attempt 1 of %s = %v, %v; want Applied", lost, r.outcome, r.err)
	}
	if err := <-purged; err != nil {
		w.t.Fatalf("Purge: %v", err)
	}
	w.expect(2, kept, 2, adapters.Duplicate)
	w.expect(2, lost, 2, adapters.Applied)
	w.effects(lost, 2)
}

// TestRebuildPurgeIsOtherwiseCorrect checks broken-rebuild-purge's purge
// with no delivery running: it keeps the markers claimed at or after the
// cutoff and removes the others, again and again, and deliveries go on as
// the reference's.
func TestRebuildPurgeIsOtherwiseCorrect(t *testing.T) {
	w := newWorld(t, rebuildPurge)
	old, recent := event("orders", "old", "x"), event("orders", "recent", "x")
	clock := harness.NewManualClock(time.Date(2031, 5, 6, 12, 0, 0, 0, time.UTC))
	w.clock = clock
	w.expect(1, old, 1, adapters.Applied)
	clock.Set(clock.Now().Add(time.Hour))
	w.expect(1, recent, 1, adapters.Applied)
	for range 3 {
		w.purge(1, clock.Now().Add(-time.Hour), 0)
	}
	w.purge(2, clock.Now().Add(-time.Minute), 1)
	w.purge(1, clock.Now().Add(-time.Minute), 0)
	w.expect(2, recent, 2, adapters.Duplicate)
	w.expect(1, event("orders", "recent", "y"), 3, adapters.Rejected)
	w.expect(1, old, 2, adapters.Applied)
	w.effects(recent, 1)
	w.effects(old, 2)
}
