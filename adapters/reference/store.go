package reference

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// Config configures a [Store].
type Config struct {
	// Schema holds the processed-events table; empty means the connection's
	// search_path.
	Schema string
	// Table is the processed-events table's name; empty means
	// "processed_events".
	Table string
	// Now is the clock used to stamp markers; nil means time.Now.
	Now func() time.Time
}

// EffectFunc applies an event's effect inside the claiming transaction.
type EffectFunc func(ctx context.Context, tx pgx.Tx) error

// Store claims events in a processed-events table and applies their effects
// exactly once. It is safe for concurrent use.
type Store struct {
	pool      *pgxpool.Pool
	table     string // quoted, schema-qualified unless Config.Schema is empty
	index     string // the index on processed_at, qualified like table
	indexName string // the same, unqualified: an index is in its table's schema
	now       func() time.Time
}

// NewStore returns a store over pool. Call [Store.Migrate] once before use.
func NewStore(pool *pgxpool.Pool, cfg Config) *Store {
	name := cfg.Table
	if name == "" {
		name = kit.ProcessedEventsTable
	}
	qualified := func(name string) string {
		if cfg.Schema == "" {
			return pgx.Identifier{name}.Sanitize()
		}
		return pgx.Identifier{cfg.Schema, name}.Sanitize()
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	index := name + "_processed_at"
	return &Store{pool: pool, table: qualified(name), index: qualified(index), indexName: pgx.Identifier{index}.Sanitize(), now: now}
}

// Migrate creates the processed-events table and its index on processed_at
// when they are missing. Every process of a service may run it at startup,
// several at once, while others are processing deliveries: it takes no lock
// on a table that exists (CREATE INDEX IF NOT EXISTS would, and wait for
// every delivery in flight), and a concurrent first creation is not an
// error.
func (s *Store) Migrate(ctx context.Context) error {
	for _, step := range []struct{ relation, create string }{
		{s.table, `CREATE TABLE ` + s.table + ` (
	namespace      text        NOT NULL,
	event_id       text        NOT NULL,
	payload_digest bytea       NOT NULL,
	processed_at   timestamptz NOT NULL,
	PRIMARY KEY (namespace, event_id)
)`},
		// Purge finds expired markers by processed_at.
		{s.index, `CREATE INDEX ` + s.indexName + ` ON ` + s.table + ` (processed_at)`},
	} {
		if _, err := s.pool.Exec(ctx, kit.CreateIfMissing(step.relation, step.create)); err != nil {
			return fmt.Errorf("create %s: %w", step.relation, err)
		}
	}
	return nil
}

// Process handles one delivery of ev: it claims the event and, only if the
// claim succeeded, runs effect in the same transaction.
//
// It returns Applied when this call claimed the event and committed,
// Duplicate when the event was already claimed with the same payload, and
// Rejected when it was claimed with a different payload. Any error means
// nothing was committed and the delivery should be retried; errors wrapping
// [adapters.ErrInvalidInput] will fail again on retry.
func (s *Store) Process(ctx context.Context, ev adapters.Event, effect EffectFunc) (outcome adapters.Outcome, err error) {
	if err := kit.Validate(ev); err != nil {
		return 0, err
	}
	digest := sha256.Sum256(ev.Payload)

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	// Rollback after Commit is a no-op; on every other path, including a
	// panic in effect, it undoes the claim together with the effect.
	defer func() {
		if rbErr := tx.Rollback(context.WithoutCancel(ctx)); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) && err == nil {
			err = fmt.Errorf("rollback: %w", rbErr)
		}
	}()

	var claimed bool
	err = tx.QueryRow(ctx, `INSERT INTO `+s.table+` (namespace, event_id, payload_digest, processed_at)
VALUES ($1, $2, $3, $4) ON CONFLICT (namespace, event_id) DO NOTHING RETURNING true`,
		ev.Namespace, ev.ID, digest[:], s.now()).Scan(&claimed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return s.compare(ctx, tx, ev, digest[:])
	case err != nil:
		return 0, fmt.Errorf("claim %s: %w", ev, err)
	}

	if err := effect(ctx, tx); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit %s: %w", ev, err)
	}
	return adapters.Applied, nil
}

// compare classifies a delivery whose identity is already claimed.
func (s *Store) compare(ctx context.Context, tx pgx.Tx, ev adapters.Event, digest []byte) (adapters.Outcome, error) {
	var stored []byte
	err := tx.QueryRow(ctx, `SELECT payload_digest FROM `+s.table+` WHERE namespace = $1 AND event_id = $2`,
		ev.Namespace, ev.ID).Scan(&stored)
	if errors.Is(err, pgx.ErrNoRows) {
		// Purged between the claim and the read: let the broker retry.
		return 0, fmt.Errorf("marker of %s vanished during the conflict check; retry", ev)
	}
	if err != nil {
		return 0, fmt.Errorf("read marker of %s: %w", ev, err)
	}
	if !bytes.Equal(stored, digest) {
		return adapters.Rejected, nil
	}
	return adapters.Duplicate, nil
}

// Purge deletes the markers of events processed before cutoff and returns how
// many it deleted. Run it with cutoff = now - redelivery window.
func (s *Store) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM `+s.table+` WHERE processed_at < $1`, cutoff)
	if err != nil {
		return 0, fmt.Errorf("purge %s before %s: %w", s.table, cutoff.Format(time.RFC3339Nano), err)
	}
	return tag.RowsAffected(), nil
}
