// Package adaptertest holds checks of an implementation's behaviour that
// the harness's own tests run against several kinds of implementation: the
// built-in adapters and the children of the exec protocol alike.
package adaptertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

// SetupDoesNotWaitForDeliveriesInFlight builds an instance of adapter in a
// fresh schema, then a second one while a transaction holds every table the
// first created with the lock a delivery in flight holds (ROW EXCLUSIVE),
// as when an instance or a process starts while others are busy. Building the
// second must never wait for a lock: CREATE INDEX IF NOT EXISTS, for one,
// would wait on a SHARE lock until the deliveries ended.
func SetupDoesNotWaitForDeliveriesInFlight(t *testing.T, adapter adapters.Adapter) {
	t.Helper()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	schema := fmt.Sprintf("harmless_test_setup_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	if err := ledger.Install(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	ledgerTables := tables(t, pool, schema)
	app := "harmless-test-setup-" + schema
	env := adapters.Env{DSN: pgtest.NamedDSN(t, app), Schema: schema, Effect: ledger.Effect(schema, nil), Clock: harness.SystemClock{}, Instance: 1}
	first, err := adapter.New(ctx, env)
	if err != nil {
		t.Fatalf("the first instance: %v", err)
	}
	defer first.Close(context.Background())

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	var held []string
	for table := range tables(t, pool, schema) {
		if !ledgerTables[table] {
			if _, err := tx.Exec(ctx, `LOCK TABLE `+pgx.Identifier{schema, table}.Sanitize()+` IN ROW EXCLUSIVE MODE`); err != nil {
				t.Fatal(err)
			}
			held = append(held, table)
		}
	}
	env.Instance = 2
	err = pgtest.WithoutLockWait(t, pool, app, func(ctx context.Context) error {
		second, err := adapter.New(ctx, env)
		if err == nil {
			err = second.Close(ctx)
		}
		return err
	})
	if err != nil {
		t.Fatalf("a second instance, with tables %v held by a delivery in flight: %v", held, err)
	}
	t.Logf("a second instance was set up while a delivery in flight held tables %v", held)
}

// tables returns the names of the tables in schema.
func tables(t *testing.T, pool *pgxpool.Pool, schema string) map[string]bool {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT tablename FROM pg_tables WHERE schemaname = $1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	return set
}
