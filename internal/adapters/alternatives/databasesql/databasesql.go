// Package databasesql is the `alt-database-sql` adapter: the reference
// pattern written against database/sql, with the pgx driver behind it
// (github.com/jackc/pgx/v5/stdlib, registered as "pgx"), applying the
// harness's effect with [adapters.Effect.ApplySQL] on a *sql.Tx.
//
// # The technique
//
// The marker table's primary key is (namespace, event_id). Each delivery
// runs one transaction:
//
//	BEGIN;
//	INSERT INTO markers (namespace, event_id, payload_digest, processed_at)
//	VALUES ($1, $2, $3, $4) ON CONFLICT (namespace, event_id) DO NOTHING
//	RETURNING true;
//	-- a row came back: apply the effect (INSERT INTO ledger ...), COMMIT: Applied
//	-- no row: SELECT the stored digest: Duplicate (same) or Rejected (another)
//	COMMIT or ROLLBACK;
//
// It exists to prove that the effect helper for database/sql works and that
// nothing in the pattern depends on pgx's native interface.
//
// # Why it is correct
//
// The unique index arbitrates. "ON CONFLICT DO NOTHING simply avoids
// inserting a row as its alternative action" (PostgreSQL documentation,
// INSERT), and the check is made against the index, not the statement's
// snapshot: "INSERT with an ON CONFLICT DO NOTHING clause may have insertion
// not proceed for a row due to the outcome of another transaction whose
// effects are not visible to the INSERT snapshot" (13.2.1 Read Committed
// Isolation Level). A second inserter of the same key waits for the first
// one's transaction to end, then inserts nothing (the first committed: the
// marker is there) or inserts its own marker (the first rolled back).
// RETURNING yields a row only for an inserted row, so exactly one
// transaction per identity sees one and applies the effect, inside the
// transaction that holds the marker.
//
// Every path after BEGIN ends in a rollback unless COMMIT succeeded: tx is
// rolled back by a deferred tx.Rollback, which also runs when the effect
// panics (after a commit it is a no-op returning sql.ErrTxDone).
// database/sql rolls a transaction back by itself when its context is
// cancelled, and a connection the server killed is discarded by the pgx
// driver's session reset instead of going back to the pool.
//
// # Costs
//
//   - database/sql adds a layer over pgx: a connection pool of its own
//     (sized with SetMaxOpenConns to the same [kit.MaxConns] as the pgx
//     adapters, and kept warm with SetMaxIdleConns, whose default of 2
//     would close and reopen connections after every burst of concurrent
//     deliveries), a session reset (and, after a second of idleness, a
//     ping) whenever a connection is checked out, and no access to
//     pgx-only features such as batches or COPY.
//   - Otherwise the costs of the reference: a unique-index lock wait for
//     concurrent contenders of one event, and only effects inside the same
//     database are atomic with the marker.
package databasesql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/internal/marker"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// Name is the adapter's name.
const Name = "alt-database-sql"

// Adapter returns the `alt-database-sql` adapter.
func Adapter() adapters.Adapter {
	return adapters.Adapter{Name: Name, Declares: marker.Declares(), New: New}
}

// Implementation is one instance of the adapter.
type Implementation struct {
	db     *sql.DB
	table  marker.Table
	effect adapters.Effect
	now    func() time.Time
}

// New opens a *sql.DB of its own on env.DSN and creates the marker table in
// env.Schema.
func New(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
	db, err := sql.Open("pgx", env.DSN)
	if err != nil {
		return nil, fmt.Errorf("%s: open: %w", Name, err)
	}
	db.SetMaxOpenConns(kit.MaxConns)
	db.SetMaxIdleConns(kit.MaxConns)
	i := &Implementation{
		db:     db,
		table:  marker.NewTable(env.Schema, "alt_database_sql_markers", marker.UniqueKey),
		effect: env.Effect,
		now:    env.Clock.Now,
	}
	for _, stmt := range i.table.DDL() {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("%s: create %s: %w", Name, i.table.Quoted, err)
		}
	}
	return i, nil
}

// Deliver claims d's event and, only if the claim succeeded, applies its
// effect in the same transaction.
func (i *Implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if err := kit.Validate(d.Event); err != nil {
		return 0, err
	}
	digest := kit.Digest(d.Payload)

	tx, err := i.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("%s: begin: %w", Name, err)
	}
	// A no-op after Commit; on every other path, a panic included, it
	// undoes the marker together with the effect.
	defer func() { _ = tx.Rollback() }()

	var claimed bool
	err = tx.QueryRowContext(ctx, i.table.Claim(), d.Namespace, d.ID, digest, i.now()).Scan(&claimed)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return i.compare(ctx, tx, d.Event, digest)
	case err != nil:
		return 0, fmt.Errorf("%s: claim %s: %w", Name, d.Event, err)
	}
	if err := i.effect.ApplySQL(ctx, tx, d); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("%s: commit %s: %w", Name, d.Event, err)
	}
	return adapters.Applied, nil
}

// compare classifies a delivery whose identity is already claimed.
func (i *Implementation) compare(ctx context.Context, tx *sql.Tx, ev adapters.Event, digest []byte) (adapters.Outcome, error) {
	var stored []byte
	err := tx.QueryRowContext(ctx, i.table.Lookup(), ev.Namespace, ev.ID).Scan(&stored)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// Purged between the claim and the read: let the broker retry.
		return 0, fmt.Errorf("%s: marker of %s vanished during the conflict check; retry", Name, ev)
	case err != nil:
		return 0, fmt.Errorf("%s: read marker of %s: %w", Name, ev, err)
	}
	return kit.Classify(stored, digest), nil
}

// Purge deletes the markers stored before cutoff.
func (i *Implementation) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	res, err := i.db.ExecContext(ctx, i.table.Purge(), cutoff)
	if err != nil {
		return 0, fmt.Errorf("%s: purge %s before %s: %w", Name, i.table.Quoted, cutoff.Format(time.RFC3339Nano), err)
	}
	return res.RowsAffected()
}

// Close closes the *sql.DB.
func (i *Implementation) Close(context.Context) error {
	return i.db.Close()
}

var _ adapters.Purger = (*Implementation)(nil)
