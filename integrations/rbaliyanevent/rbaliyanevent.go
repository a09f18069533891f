// Package rbaliyanevent certifies the PostgreSQL idempotency store of
// github.com/rbaliyan/event/v3 (v3.15.5) as an idempotent consumer, wired
// as the godoc of its transaction.TransactionalHandler and of
// idempotency.PostgresStore wire it ("true exactly-once processing
// semantics"):
//
//	handler := transaction.NewTransactionalHandler(fn,
//	    transaction.NewSQLManager(db), idempotency.NewPostgresStore(db), keyFunc)
//
// # Wiring
//
//   - database/sql with the pgx stdlib driver, one *sql.DB per instance
//     (the godoc opens one with sql.Open; the store takes a *sql.DB). The
//     DSN is used unchanged; the connection's search_path is set to
//     Env.Schema (a runtime parameter of the parsed config), because
//     WithPostgresTable accepts only an unqualified identifier (a
//     schema-qualified name is silently ignored), so the store's table
//     can be put in the play's schema only through the search path.
//   - The store with its defaults (table event_idempotency, TTL 24 hours,
//     clean-up every minute) and its own CreateTable, which makes
//     message_id VARCHAR(255) PRIMARY KEY.
//   - The key is the event's identity, length-prefixed as [Key] spells it.
//   - The handler applies the harness's effect with the *sql.Tx the
//     manager hands it (transaction.SQLTransactionProvider), as the godoc's
//     example runs its business SQL.
//
// # Outcome
//
// Handle begins a transaction (default isolation, READ COMMITTED), asks
// IsDuplicateTx (a plain SELECT EXISTS, no lock), calls the handler when
// the key is new, then MarkProcessedTx (INSERT ... ON CONFLICT (message_id)
// DO UPDATE) and commits. It returns nil both for a duplicate and for an
// applied event, so the handler sets a flag: nil with the flag set is
// Applied, nil without it is Duplicate.
//
//harmless:library github.com/rbaliyan/event/v3
package rbaliyanevent

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/rbaliyan/event/v3/idempotency"
	"github.com/rbaliyan/event/v3/transaction"

	"github.com/harmless-dev/harmless/adapters"
)

// Name is the adapter's name.
const Name = "rbaliyan-event"

// maxConns bounds each instance's pool, as the other integrations do.
const maxConns = 4

// Adapter returns the adapter. It declares nothing: the store compares
// only the key (no conflict policy); its TTL runs on the server's NOW()
// and it offers no purge by cutoff, only a clean-up goroutine and Remove
// by key (no window, no Purger, no clock); it makes no external effect.
func Adapter() adapters.Adapter {
	return adapters.Adapter{Name: Name, New: New}
}

// Key is the idempotency key of an event: the namespace's length, the
// namespace and the id, so that no two identities share a key (a plain
// namespace+"/"+id would merge ("a/b","c") with ("a","b/c"), a fault of
// the wiring rather than of the library).
func Key(ev adapters.Event) string {
	return strconv.Itoa(len(ev.Namespace)) + ":" + ev.Namespace + "/" + ev.ID
}

// OpenDB opens database/sql on dsn through pgx's stdlib driver, with the
// connections' search_path set to schema.
func OpenDB(dsn, schema string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	return db, nil
}

// delivery is the handler's data: the delivery and where it says that it
// ran.
type delivery struct {
	adapters.Delivery
	applied *bool
}

// Implementation is one instance: its *sql.DB, store and handler.
type Implementation struct {
	db      *sql.DB
	store   *idempotency.PostgresStore
	handler *transaction.TransactionalHandler[delivery]
}

// New opens the instance's *sql.DB, creates the store's table in
// env.Schema with CreateTable and builds the TransactionalHandler.
func New(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
	db, err := OpenDB(env.DSN, env.Schema)
	if err != nil {
		return nil, fmt.Errorf("%s: parse dsn: %w", Name, err)
	}
	store, err := idempotency.NewPostgresStore(db)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%s: store: %w", Name, err)
	}
	if err := createTable(ctx, store); err != nil {
		_ = store.Close()
		_ = db.Close()
		return nil, fmt.Errorf("%s: create table in %s: %w", Name, env.Schema, err)
	}
	manager, err := transaction.NewSQLManager(db)
	if err != nil {
		_ = store.Close()
		_ = db.Close()
		return nil, fmt.Errorf("%s: manager: %w", Name, err)
	}
	effect := env.Effect
	handler := transaction.NewTransactionalHandler(
		func(ctx context.Context, tx transaction.Transaction, d delivery) error {
			sqlTx := tx.(transaction.SQLTransactionProvider).Tx()
			if err := effect.ApplySQL(ctx, sqlTx, d.Delivery); err != nil {
				return err
			}
			*d.applied = true
			return nil
		},
		manager, store,
		func(d delivery) string { return Key(d.Event) },
	)
	return &Implementation{db: db, store: store, handler: handler}, nil
}

// createTable runs the store's CreateTable. Two instances of one play
// create the table at once; CREATE TABLE IF NOT EXISTS is not safe against
// that (the loser hits the catalogue's unique index), so a loser runs it
// once more, when the winner's table is there.
func createTable(ctx context.Context, store *idempotency.PostgresStore) error {
	err := store.CreateTable(ctx)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P07") {
		err = store.CreateTable(ctx)
	}
	return err
}

// Deliver hands d to the TransactionalHandler.
func (i *Implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	applied := false
	if err := i.handler.Handle(ctx, delivery{Delivery: d, applied: &applied}); err != nil {
		return 0, fmt.Errorf("%s: handle %s: %w", Name, d.Event, err)
	}
	if applied {
		return adapters.Applied, nil
	}
	return adapters.Duplicate, nil
}

// Close stops the store's clean-up goroutine and closes the *sql.DB.
func (i *Implementation) Close(context.Context) error {
	_ = i.store.Close()
	if err := i.db.Close(); err != nil && !errors.Is(err, sql.ErrConnDone) {
		return fmt.Errorf("%s: close: %w", Name, err)
	}
	return nil
}
