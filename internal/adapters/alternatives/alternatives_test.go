package alternatives_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/advisorylock"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/databasesql"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/failfast"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/lease"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/polling"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/serializable"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/slowrelay"
	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/effect"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// alternative is an adapter under test, with the name it must have and
// how it treats a busy event.
type alternative struct {
	name    string
	adapter func() adapters.Adapter
	// external is the external effects it declares.
	external adapters.ExternalEffects
	// busy, when not nil, is what a delivery that finds the event busy
	// returns (wrapped), for the broker to redeliver; with nil, such a
	// delivery waits and answers.
	busy error
	// polls tells that a delivery that finds the event busy polls until
	// the claimant ends: it neither answers nor waits on a lock meanwhile.
	polls bool
	// stuck is how far the clock must move after a failed delivery before
	// the event can be claimed again: a lease or a claim the failure left.
	stuck time.Duration
}

// alternatives are the adapters under test.
var alternatives = []alternative{
	{name: "alt-serializable", adapter: serializable.Adapter},
	{name: "alt-advisory-lock", adapter: advisorylock.Adapter},
	{name: "alt-database-sql", adapter: databasesql.Adapter},
	{name: "alt-fail-fast", adapter: failfast.Adapter, busy: failfast.ErrBusy},
	{name: "alt-lease", adapter: lease.Adapter, busy: lease.ErrBusy, stuck: lease.Lease},
	{name: "alt-polling", adapter: polling.Adapter, polls: true, stuck: polling.StaleAfter},
	{name: "alt-slow-relay", adapter: slowrelay.Adapter, external: adapters.Outbox},
}

// forEach runs test once per alternative, each in a fresh fixture.
func forEach(t *testing.T, test func(t *testing.T, f *fixture)) {
	forEachWhere(t, func(alternative) bool { return true }, test)
}

// forEachWhere runs test once per alternative for which which holds.
func forEachWhere(t *testing.T, which func(alternative) bool, test func(t *testing.T, f *fixture)) {
	for _, alt := range alternatives {
		if which(alt) {
			t.Run(alt.name, func(t *testing.T) { test(t, newFixture(t, alt)) })
		}
	}
}

// fixture is one adapter in a schema of its own holding the harness ledger.
type fixture struct {
	t       *testing.T
	alt     alternative
	adapter adapters.Adapter
	pool    *pgxpool.Pool
	schema  string
	app     string // application_name of the instances' connections
	clock   *harness.ManualClock
	hook    atomic.Pointer[effect.Hook]
}

var fixtures atomic.Int64

func newFixture(t *testing.T, alt alternative) *fixture {
	t.Helper()
	n := fixtures.Add(1)
	f := &fixture{
		t:       t,
		alt:     alt,
		adapter: alt.adapter(),
		pool:    pgtest.Pool(t),
		schema:  fmt.Sprintf("alt_test_%d_%d", time.Now().UnixNano(), n),
		app:     fmt.Sprintf("alt-test-%d-%d", time.Now().UnixNano(), n),
		clock:   harness.NewManualClock(time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)),
	}
	ctx := context.Background()
	if _, err := f.pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{f.schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = f.pool.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{f.schema}.Sanitize()+` CASCADE`)
	})
	if err := ledger.Install(ctx, f.pool, f.schema); err != nil {
		t.Fatal(err)
	}
	return f
}

// setHook makes fn run at the start of every effect; nil removes it.
func (f *fixture) setHook(fn effect.Hook) { f.hook.Store(&fn) }

func (f *fixture) runHook(ctx context.Context, d adapters.Delivery) error {
	if fn := f.hook.Load(); fn != nil && *fn != nil {
		return (*fn)(ctx, d)
	}
	return nil
}

// instance builds instance n, closed when the test ends.
func (f *fixture) instance(n int) adapters.Implementation {
	f.t.Helper()
	return f.instanceWith(n, f.clock, "")
}

// instanceWith builds instance n reading clock, with destination as its
// external destination; it is closed when the test ends.
func (f *fixture) instanceWith(n int, clock adapters.Clock, destination string) adapters.Implementation {
	f.t.Helper()
	dsn, err := harness.WithApplicationName(pgtest.DSN(f.t), f.app)
	if err != nil {
		f.t.Fatal(err)
	}
	impl, err := f.adapter.New(context.Background(), adapters.Env{
		DSN:         dsn,
		Schema:      f.schema,
		Effect:      ledger.Effect(f.schema, f.runHook),
		Clock:       clock,
		Instance:    n,
		Logf:        f.t.Logf,
		Destination: destination,
	})
	if err != nil {
		f.t.Fatalf("build instance %d: %v", n, err)
	}
	f.t.Cleanup(func() {
		if err := impl.Close(context.Background()); err != nil {
			f.t.Errorf("close instance %d: %v", n, err)
		}
	})
	return impl
}

// expect delivers ev as attempt to impl and checks the outcome.
func (f *fixture) expect(impl adapters.Implementation, ev adapters.Event, attempt int, want adapters.Outcome) {
	f.t.Helper()
	got, err := impl.Deliver(context.Background(), adapters.Delivery{Event: ev, Attempt: attempt})
	if err != nil || got != want {
		f.t.Fatalf("Deliver(%s %q, attempt %d) = %v, %v; want %v", ev, ev.Payload, attempt, got, err, want)
	}
}

// effects returns the ledger's effects of ev.
func (f *fixture) effects(ev adapters.Event) []ledger.Entry {
	f.t.Helper()
	entries, err := ledger.Entries(context.Background(), f.pool, f.schema, ev.Namespace, ev.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	return entries
}

// expectOneEffect checks that ev has exactly one effect, by attempt.
func (f *fixture) expectOneEffect(ev adapters.Event, attempt int) {
	f.t.Helper()
	entries := f.effects(ev)
	if len(entries) != 1 || entries[0].Attempt != attempt || entries[0].PayloadDigest != adapters.PayloadDigest(ev.Payload) {
		f.t.Fatalf("effects of %s: %+v; want exactly one, by attempt %d", ev, entries, attempt)
	}
}

// waitFor polls cond until it holds; it fails the test after a minute.
func (f *fixture) waitFor(what string, cond func(ctx context.Context) (bool, error)) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond(ctx)
		if err != nil {
			f.t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			f.t.Fatalf("gave up waiting for %s", what)
		case <-tick.C:
		}
	}
}

// backends counts the instances' connections, those waiting on a lock
// (wait_event_type Lock) only if waiting is set.
func (f *fixture) backends(ctx context.Context, waiting bool) (int, error) {
	var n int
	err := f.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE application_name = $1 AND (NOT $2 OR wait_event_type = 'Lock')`, f.app, waiting).Scan(&n)
	return n, err
}

func event(ns, id, payload string) adapters.Event {
	return adapters.Event{Namespace: ns, ID: id, Payload: []byte(payload)}
}

func TestAdaptersAreRegisteredWithTheirDeclarations(t *testing.T) {
	for _, alt := range alternatives {
		want := adapters.Declaration{ConflictPolicy: adapters.RejectConflicts, RedeliveryWindow: 24 * time.Hour, AcceptsClock: true, ExternalEffects: alt.external}
		a := alt.adapter()
		if a.Name != alt.name || a.Declares != want || a.Validate() != nil {
			t.Errorf("%s: Adapter() = %q declaring %+v (Validate: %v); want %q declaring %+v", alt.name, a.Name, a.Declares, a.Validate(), alt.name, want)
		}
		if _, err := builtin.Lookup(alt.name); err != nil {
			t.Errorf("builtin.Lookup(%q): %v", alt.name, err)
		}
	}
}

func TestDeliveriesAreClassified(t *testing.T) {
	forEach(t, func(t *testing.T, f *fixture) {
		w1, w2 := f.instance(1), f.instance(2)
		ev := event("orders", "42", `{"total":1}`)
		conflicting := event("orders", "42", `{"total":2}`)
		otherNamespace := event("refunds", "42", `{"total":1}`)

		f.expect(w1, ev, 1, adapters.Applied)
		f.expect(w2, ev, 2, adapters.Duplicate)
		f.expect(w1, ev, 3, adapters.Duplicate)
		f.expect(w2, conflicting, 1, adapters.Rejected)
		f.expect(w1, conflicting, 2, adapters.Rejected)
		f.expect(w2, otherNamespace, 1, adapters.Applied)
		f.expect(w1, otherNamespace, 2, adapters.Duplicate)
		f.expect(w2, ev, 4, adapters.Duplicate)

		f.expectOneEffect(ev, 1)
		f.expectOneEffect(otherNamespace, 1)
	})
}

func TestAFailedEffectLeavesTheEventClaimable(t *testing.T) {
	boom := errors.New("effect failed")
	failures := []struct {
		name string
		// fail makes the effect of attempt 1 fail; check checks what Deliver
		// returned for it.
		fail  func(ctx context.Context, cancel context.CancelFunc) error
		check func(err error, panicked any) bool
	}{
		{
			name:  "error",
			fail:  func(context.Context, context.CancelFunc) error { return boom },
			check: func(err error, p any) bool { return p == nil && errors.Is(err, boom) },
		},
		{
			name:  "panic",
			fail:  func(context.Context, context.CancelFunc) error { panic(boom) },
			check: func(err error, p any) bool { return p == boom },
		},
		{
			name: "cancelled context",
			fail: func(ctx context.Context, cancel context.CancelFunc) error {
				cancel()
				return nil // the effect's INSERT then fails on ctx
			},
			check: func(err error, p any) bool { return p == nil && errors.Is(err, context.Canceled) },
		},
	}
	for _, failure := range failures {
		t.Run(failure.name, func(t *testing.T) {
			forEach(t, func(t *testing.T, f *fixture) {
				w1 := f.instance(1)
				ev := event("orders", "7", "x")
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				f.setHook(func(ctx context.Context, d adapters.Delivery) error {
					if d.Attempt == 1 {
						return failure.fail(ctx, cancel)
					}
					return nil
				})

				var outcome adapters.Outcome
				var err error
				var panicked any
				func() {
					defer func() { panicked = recover() }()
					outcome, err = w1.Deliver(ctx, adapters.Delivery{Event: ev, Attempt: 1})
				}()
				if !failure.check(err, panicked) || errors.Is(err, adapters.ErrInvalidInput) {
					t.Fatalf("attempt 1 = %v, %v (panic: %v); want the %s to surface", outcome, err, panicked, failure.name)
				}
				if n := len(f.effects(ev)); n != 0 {
					t.Fatalf("%d effects after the failed attempt; want 0", n)
				}
				// A lease or a claim the failure left must be waited out.
				f.clock.Set(f.clock.Now().Add(f.alt.stuck))
				f.expect(w1, ev, 2, adapters.Applied)
				f.expect(f.instance(2), ev, 3, adapters.Duplicate)
				f.expectOneEffect(ev, 2)
			})
		})
	}
}

func TestInvalidIdentitiesAreRefused(t *testing.T) {
	forEach(t, func(t *testing.T, f *fixture) {
		w1 := f.instance(1)
		for _, ev := range []adapters.Event{
			event("n", "", "x"),
			event("n", "a\x00b", "x"),
			event("n\x00", "1", "x"),
			event("\xff", "1", "x"),
			event("n", "\xc3\x28", "x"),
		} {
			outcome, err := w1.Deliver(context.Background(), adapters.Delivery{Event: ev, Attempt: 1})
			if !errors.Is(err, adapters.ErrInvalidInput) {
				t.Errorf("Deliver(%s) = %v, %v; want an error wrapping ErrInvalidInput", ev, outcome, err)
			}
		}
		all, err := ledger.All(context.Background(), f.pool, f.schema)
		if err != nil || len(all) != 0 {
			t.Fatalf("ledger after invalid deliveries: %+v, %v; want it empty", all, err)
		}
	})
}

func TestPurgeRemovesOnlyMarkersBeforeTheCutoff(t *testing.T) {
	forEach(t, func(t *testing.T, f *fixture) {
		w1 := f.instance(1)
		purger, ok := w1.(adapters.Purger)
		if !ok {
			t.Fatalf("%T does not implement adapters.Purger", w1)
		}
		t0 := f.clock.Now()
		events := make([]adapters.Event, 4)
		for i := range events {
			f.clock.Set(t0.Add(time.Duration(i) * time.Hour))
			events[i] = event("n", fmt.Sprint(i), "p")
			f.expect(w1, events[i], 1, adapters.Applied)
		}

		// The markers carry the clock's times, not the system's: with the
		// clock 25 years back, a marker stamped with time.Now() would
		// survive this cutoff.
		removed, err := purger.Purge(context.Background(), t0.Add(2*time.Hour))
		if err != nil || removed != 2 {
			t.Fatalf("Purge(t0+2h) = %d, %v; want 2 removed", removed, err)
		}
		if removed, err := purger.Purge(context.Background(), t0.Add(2*time.Hour)); err != nil || removed != 0 {
			t.Fatalf("Purge(t0+2h) again = %d, %v; want 0 removed", removed, err)
		}
		f.expect(w1, events[2], 2, adapters.Duplicate) // at the cutoff: kept
		f.expect(w1, events[3], 2, adapters.Duplicate)
		f.expect(w1, events[1], 2, adapters.Applied) // purged: a new event again
		if n := len(f.effects(events[1])); n != 2 {
			t.Fatalf("%d effects of %s after its marker was purged and it was redelivered; want 2", n, events[1])
		}
	})
}

// contenders is how many deliveries of one event race, as in the harness's
// concurrent-delivery fixture.
const contenders = 16

// race releases contenders deliveries of ev together over w1 and w2 and
// checks that exactly one was Applied, the rest Duplicate, with one effect.
// Each contender is delivered once, and an error fails the test, except
// the busy error of an adapter that returns one: that contender is
// redelivered once every contender has returned, as a broker would. If
// whileBlocked is not nil, it runs once every contender was released.
func (f *fixture) race(w1, w2 adapters.Implementation, ev adapters.Event, whileBlocked func(returned *atomic.Int64)) {
	f.t.Helper()
	type result struct {
		outcome adapters.Outcome
		err     error
	}
	results := make([]result, contenders)
	var ready, done sync.WaitGroup
	var returned atomic.Int64
	release := make(chan struct{})
	for i := range results {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			impl := []adapters.Implementation{w1, w2}[i%2]
			ready.Done()
			<-release
			o, err := impl.Deliver(context.Background(), adapters.Delivery{Event: ev, Attempt: i + 1})
			results[i] = result{o, err}
			returned.Add(1)
		}()
	}
	ready.Wait()
	close(release)
	if whileBlocked != nil {
		whileBlocked(&returned)
	}
	done.Wait()
	for i, r := range results {
		if f.alt.busy != nil && errors.Is(r.err, f.alt.busy) {
			impl := []adapters.Implementation{w1, w2}[i%2]
			o, err := impl.Deliver(context.Background(), adapters.Delivery{Event: ev, Attempt: contenders + i + 1})
			if err != nil || o != adapters.Duplicate {
				f.t.Fatalf("%s: contender %d was busy (%v); its redelivery = %v, %v; want Duplicate", ev, i+1, r.err, o, err)
			}
			results[i] = result{o, nil}
		}
	}

	winner := 0
	var applied, duplicate int
	var odd []string
	for i, r := range results {
		switch {
		case r.err == nil && r.outcome == adapters.Applied:
			applied++
			winner = i + 1
		case r.err == nil && r.outcome == adapters.Duplicate:
			duplicate++
		default:
			odd = append(odd, fmt.Sprintf("contender %d: %v, %v", i+1, r.outcome, r.err))
		}
	}
	if applied != 1 || duplicate != contenders-1 {
		f.t.Fatalf("%s: %d Applied, %d Duplicate; want 1 and %d\n%s", ev, applied, duplicate, contenders-1, strings.Join(odd, "\n"))
	}
	f.expectOneEffect(ev, winner)
}

func TestConcurrentDeliveriesApplyOnce(t *testing.T) {
	t.Run("released together", func(t *testing.T) {
		forEach(t, func(t *testing.T, f *fixture) {
			w1, w2 := f.instance(1), f.instance(2)
			for round := range 5 {
				f.race(w1, w2, event("race", fmt.Sprint(round), "p"), nil)
			}
		})
	})

	// The first delivery to reach the effect holds its transaction open
	// until every other contender has either returned or is waiting on a
	// lock in the database, so all of them overlap the winner's
	// uncommitted claim. Pollers do neither: TestPollersWaitForTheClaimant
	// holds them.
	t.Run("while the first claim is uncommitted", func(t *testing.T) {
		forEachWhere(t, func(alt alternative) bool { return !alt.polls }, func(t *testing.T, f *fixture) {
			w1, w2 := f.instance(1), f.instance(2)
			for round := range 3 {
				ev := event("held", fmt.Sprint(round), "p")
				gate := make(chan struct{})
				var first atomic.Bool
				f.setHook(func(ctx context.Context, d adapters.Delivery) error {
					if d.ID != ev.ID || !first.CompareAndSwap(false, true) {
						return nil
					}
					select {
					case <-gate:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				})
				f.race(w1, w2, ev, func(returned *atomic.Int64) {
					defer close(gate)
					f.waitFor("the other contenders to return or block", func(ctx context.Context) (bool, error) {
						if !first.Load() {
							return false, nil
						}
						waiting, err := f.backends(ctx, true)
						return int(returned.Load())+waiting == contenders-1, err
					})
				})
			}
		})
	})
}

func TestCloseReleasesTheConnections(t *testing.T) {
	forEach(t, func(t *testing.T, f *fixture) {
		w1 := f.instance(1)
		f.expect(w1, event("n", "1", "p"), 1, adapters.Applied)
		if err := w1.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		f.waitFor("the instance's connections to end", func(ctx context.Context) (bool, error) {
			n, err := f.backends(ctx, false)
			return n == 0, err
		})
	})
}
