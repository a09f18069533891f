// Package ledger owns the harness's effect table.
//
// Every effect an implementation applies is one row in the ledger, inserted
// by [adapters.Effect] inside the implementation's own transaction. The
// harness counts effects here, never from what an implementation reports:
// a committed row is an applied effect, a rolled-back one never happened.
package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harmless-dev/harmless/internal/effect"
)

// TableName is the unqualified name of the ledger table in a spec's schema.
const TableName = "harmless_effects"

// DB is the subset of *pgxpool.Pool and *pgx.Conn the ledger needs.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Entry is one applied effect.
type Entry struct {
	Seq           int64
	Namespace     string
	ID            string
	PayloadDigest string
	Attempt       int
	RecordedAt    time.Time
	BackendPID    int
}

// Table returns the quoted, schema-qualified ledger table of schema.
func Table(schema string) string {
	return pgx.Identifier{schema, TableName}.Sanitize()
}

// Install creates the ledger table in schema.
func Install(ctx context.Context, db DB, schema string) error {
	sql := fmt.Sprintf(`CREATE TABLE %s (
	seq            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	namespace      bytea   NOT NULL,
	event_id       bytea   NOT NULL,
	payload_digest text    NOT NULL,
	attempt        integer NOT NULL,
	recorded_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
	backend_pid    integer NOT NULL DEFAULT pg_backend_pid()
)`, Table(schema))
	if _, err := db.Exec(ctx, sql); err != nil {
		return fmt.Errorf("create ledger in schema %q: %w", schema, err)
	}
	return nil
}

// Effect returns the effect that inserts into schema's ledger, with hook.
func Effect(schema string, hook effect.Hook) effect.Effect {
	return effect.New(Table(schema), hook)
}

// Entries returns the committed effects of one event, oldest first.
func Entries(ctx context.Context, db DB, schema, namespace, id string) ([]Entry, error) {
	return query(ctx, db, fmt.Sprintf(`SELECT seq, namespace, event_id, payload_digest, attempt, recorded_at, backend_pid
FROM %s WHERE namespace = $1 AND event_id = $2 ORDER BY seq`, Table(schema)), []byte(namespace), []byte(id))
}

// Count returns how many effects of one event are committed. The harness
// reads it right after each acknowledgement: an acknowledgement promises
// the effect is committed, and a count of 0 then disproves it.
func Count(ctx context.Context, db DB, schema, namespace, id string) (int, error) {
	rows, err := db.Query(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE namespace = $1 AND event_id = $2`, Table(schema)), []byte(namespace), []byte(id))
	if err != nil {
		return 0, fmt.Errorf("count effects: %w", err)
	}
	n, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[int])
	if err != nil {
		return 0, fmt.Errorf("count effects: %w", err)
	}
	return n, nil
}

// All returns every committed effect in schema's ledger, oldest first.
func All(ctx context.Context, db DB, schema string) ([]Entry, error) {
	return query(ctx, db, fmt.Sprintf(`SELECT seq, namespace, event_id, payload_digest, attempt, recorded_at, backend_pid
FROM %s ORDER BY seq`, Table(schema)))
}

// After returns the committed effects in schema's ledger whose seq is
// above seq, oldest first: those committed since a reader saw seq (0 for
// every effect).
func After(ctx context.Context, db DB, schema string, seq int64) ([]Entry, error) {
	return query(ctx, db, fmt.Sprintf(`SELECT seq, namespace, event_id, payload_digest, attempt, recorded_at, backend_pid
FROM %s WHERE seq > $1 ORDER BY seq`, Table(schema)), seq)
}

func query(ctx context.Context, db DB, sql string, args ...any) ([]Entry, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	entries, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Entry, error) {
		var e Entry
		var ns, id []byte
		err := row.Scan(&e.Seq, &ns, &id, &e.PayloadDigest, &e.Attempt, &e.RecordedAt, &e.BackendPID)
		e.Namespace, e.ID = string(ns), string(id)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	return entries, nil
}
