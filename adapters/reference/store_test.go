package reference_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

// newStore returns a migrated store in a fresh schema, and the pool.
func newStore(t *testing.T, now func() time.Time) (*reference.Store, *pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := fmt.Sprintf("harmless_test_ref_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+schema+`; CREATE TABLE `+schema+`.effects (id text)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	store := reference.NewStore(pool, reference.Config{Schema: schema, Now: now})
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return store, pool, schema
}

func insertEffect(schema, id string) reference.EffectFunc {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+schema+`.effects VALUES ($1)`, id)
		return err
	}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestProcessClassifiesDeliveries(t *testing.T) {
	store, pool, schema := newStore(t, nil)
	ctx := context.Background()
	ev := adapters.Event{Namespace: "orders", ID: "42", Payload: []byte(`{"total":1}`)}
	conflicting := adapters.Event{Namespace: "orders", ID: "42", Payload: []byte(`{"total":2}`)}
	otherNamespace := adapters.Event{Namespace: "refunds", ID: "42", Payload: ev.Payload}

	for _, step := range []struct {
		ev   adapters.Event
		want adapters.Outcome
	}{
		{ev, adapters.Applied},
		{ev, adapters.Duplicate},
		{conflicting, adapters.Rejected},
		{otherNamespace, adapters.Applied},
		{ev, adapters.Duplicate},
	} {
		got, err := store.Process(ctx, step.ev, insertEffect(schema, step.ev.Namespace))
		if err != nil || got != step.want {
			t.Fatalf("Process(%s, %q) = %v, %v; want %v", step.ev, step.ev.Payload, got, err, step.want)
		}
	}
	if n := count(t, pool, `SELECT count(*) FROM `+schema+`.effects`); n != 2 {
		t.Fatalf("%d effects; want 2 (one per namespace)", n)
	}
}

func TestProcessRollsBackTheClaimWithTheEffect(t *testing.T) {
	store, pool, schema := newStore(t, nil)
	ctx := context.Background()
	ev := adapters.Event{Namespace: "orders", ID: "7", Payload: []byte("x")}
	boom := errors.New("effect failed")
	if _, err := store.Process(ctx, ev, func(context.Context, pgx.Tx) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Process with a failing effect: err = %v; want %v", err, boom)
	}
	if n := count(t, pool, `SELECT count(*) FROM `+schema+`.processed_events`); n != 0 {
		t.Fatalf("%d markers after a failed effect; want 0", n)
	}
	got, err := store.Process(ctx, ev, insertEffect(schema, ev.ID))
	if err != nil || got != adapters.Applied {
		t.Fatalf("retry = %v, %v; want Applied", got, err)
	}
}

func TestProcessRollsBackOnPanic(t *testing.T) {
	store, pool, schema := newStore(t, nil)
	ev := adapters.Event{Namespace: "orders", ID: "8"}
	func() {
		defer func() { _ = recover() }()
		_, _ = store.Process(context.Background(), ev, func(context.Context, pgx.Tx) error { panic("boom") })
	}()
	if n := count(t, pool, `SELECT count(*) FROM `+schema+`.processed_events`); n != 0 {
		t.Fatalf("%d markers after a panicking effect; want 0", n)
	}
}

func TestProcessRefusesInvalidIdentities(t *testing.T) {
	store, _, schema := newStore(t, nil)
	for _, ev := range []adapters.Event{
		{Namespace: "n", ID: ""},
		{Namespace: "n", ID: "a\x00b"},
		{Namespace: "\xff", ID: "1"},
	} {
		_, err := store.Process(context.Background(), ev, insertEffect(schema, ev.ID))
		if !errors.Is(err, adapters.ErrInvalidInput) {
			t.Errorf("Process(%s) err = %v; want ErrInvalidInput", ev, err)
		}
	}
}

func TestPurgeRemovesOnlyMarkersBeforeTheCutoff(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	store, pool, schema := newStore(t, func() time.Time { return now })
	ctx := context.Background()
	for i := range 4 {
		now = t0.Add(time.Duration(i) * time.Hour)
		if _, err := store.Process(ctx, adapters.Event{Namespace: "n", ID: fmt.Sprint(i)}, insertEffect(schema, fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := store.Purge(ctx, t0.Add(2*time.Hour))
	if err != nil || removed != 2 {
		t.Fatalf("Purge = %d, %v; want 2 removed", removed, err)
	}
	if n := count(t, pool, `SELECT count(*) FROM `+schema+`.processed_events WHERE event_id IN ('2', '3')`); n != 2 {
		t.Fatalf("%d of the markers at or after the cutoff survived; want 2", n)
	}
}

// TestMigrateDoesNotWaitForDeliveriesInFlight migrates a table while
// another transaction holds it with a delivery in flight (an uncommitted
// INSERT, so a ROW EXCLUSIVE lock), as when a service starts a process
// while others are busy. Migrate must finish without ever waiting for a
// lock: CREATE INDEX IF NOT EXISTS, for one, would wait on a SHARE lock
// until the delivery ended.
func TestMigrateDoesNotWaitForDeliveriesInFlight(t *testing.T) {
	_, pool, schema := newStore(t, nil)
	ctx := t.Context()
	// A new process: a pool of its own, named so that its backend can be
	// found waiting.
	app := "harmless-test-migrate-" + schema
	other, err := pgxpool.New(ctx, pgtest.NamedDSN(t, app))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.processed_events VALUES ('n', 'in-flight', '\x00', now())`); err != nil {
		t.Fatal(err)
	}
	err = pgtest.WithoutLockWait(t, pool, app, reference.NewStore(other, reference.Config{Schema: schema}).Migrate)
	if err != nil {
		t.Fatalf("Migrate with a delivery in flight: %v", err)
	}
}

// TestConcurrentFirstMigrations runs Migrate from several pools at once on
// a schema without the table, as the processes of a service starting
// together would: every one must succeed, and the table and its index must
// exist once.
func TestConcurrentFirstMigrations(t *testing.T) {
	const processes, rounds = 8, 5
	ctx := t.Context()
	admin := pgtest.Pool(t)
	pools := make([]*pgxpool.Pool, processes)
	for i := range pools {
		pools[i] = pgtest.Pool(t)
	}
	for round := range rounds {
		schema := fmt.Sprintf("harmless_test_ref_race_%d_%d", time.Now().UnixNano(), round)
		if _, err := admin.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
		start := make(chan struct{})
		errs := make(chan error, processes)
		for _, pool := range pools {
			go func() {
				<-start
				errs <- reference.NewStore(pool, reference.Config{Schema: schema}).Migrate(ctx)
			}()
		}
		close(start)
		for range processes {
			if err := <-errs; err != nil {
				t.Errorf("round %d: a concurrent first Migrate failed: %v", round, err)
			}
		}
		if n := count(t, admin, `SELECT count(*) FROM pg_class WHERE relnamespace = '`+schema+`'::regnamespace
AND relname IN ('processed_events', 'processed_events_processed_at')`); n != 2 {
			t.Errorf("round %d: %d of the table and its index exist; want both", round, n)
		}
	}
}
