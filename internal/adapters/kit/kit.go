// Package kit holds the small pieces the built-in adapters share: a
// connection pool sized for concurrent deliveries, schema-qualified table
// names, the identity check and the payload-digest comparison.
package kit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
)

// MaxConns is the size of each built-in instance's connection pool: enough
// that concurrent deliveries really run concurrently in the database instead
// of queueing for a connection.
const MaxConns = 32

// Pool opens a pool on dsn with MaxConns connections.
func Pool(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	return PoolWith(ctx, dsn, nil)
}

// PoolWith is [Pool] with configure, when it is not nil, applied to the
// configuration read from dsn before the pool opens: for an adapter whose
// bug lies in how it connects (a setting on every session, the hosts it
// tries), which the DSN the harness gives it does not say.
func PoolWith(ctx context.Context, dsn string, configure func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse DSN: %w", err)
	}
	cfg.MaxConns = MaxConns
	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return pool, nil
}

// Setup runs an adapter's setup statements (see [CreateIfMissing]) on
// pool, one after another, and closes the pool if one fails: a factory
// that could not set up returns no instance, and must leak no connection.
func Setup(ctx context.Context, pool *pgxpool.Pool, statements ...string) error {
	for _, stmt := range statements {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			pool.Close()
			return fmt.Errorf("set up: %w", err)
		}
	}
	return nil
}

// Table is the quoted name of table name in schema.
func Table(schema, name string) string { return pgx.Identifier{schema, name}.Sanitize() }

// Digest is the SHA-256 digest of a payload, as the adapters store it.
func Digest(payload []byte) []byte {
	sum := sha256.Sum256(payload)
	return sum[:]
}

// Classify answers a delivery whose identity was already claimed with the
// stored digest: Duplicate for the same payload, Rejected for another.
func Classify(stored, digest []byte) adapters.Outcome {
	if bytes.Equal(stored, digest) {
		return adapters.Duplicate
	}
	return adapters.Rejected
}

// ProcessedEventsTable is the unqualified name of the reference's
// processed-events table (reference.Config.Table's default), which the
// adapters that copy its schema and the tests that read its markers name.
const ProcessedEventsTable = "processed_events"

// MaxIdentityBytes bounds the namespace and the id, each: it is the bound
// [adapters.CheckIdentity] enforces (kit's tests hold the two together).
const MaxIdentityBytes = 1024

// Validate refuses identities that PostgreSQL text columns and the marker's
// unique index cannot store faithfully: it is [adapters.CheckIdentity],
// which users' implementations can call too. The error wraps
// [adapters.ErrInvalidInput].
func Validate(ev adapters.Event) error { return adapters.CheckIdentity(ev) }

// ValidateBounds is the part of [Validate] that does not look at the bytes:
// it refuses an empty id and a namespace or id longer than
// MaxIdentityBytes. The error wraps [adapters.ErrInvalidInput].
func ValidateBounds(ev adapters.Event) error {
	switch {
	case len(ev.Namespace) > MaxIdentityBytes || len(ev.ID) > MaxIdentityBytes:
		return fmt.Errorf("event %s: namespace and id may have at most %d bytes each: %w", ev, MaxIdentityBytes, adapters.ErrInvalidInput)
	case ev.ID == "":
		return fmt.Errorf("event %s: empty id: %w", ev, adapters.ErrInvalidInput)
	}
	return nil
}
