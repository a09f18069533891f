// Package failfast is the `alt-fail-fast` adapter: the seed's pattern on
// connections that wait at most 10 ms for a lock, leaving the waiting to the
// broker.
//
// # The technique
//
// One transaction claims the event and applies its effect, as in the seed:
//
//	BEGIN;
//	INSERT INTO fail_fast_events (namespace, event_id, payload_digest, processed_at)
//	VALUES ($1, $2, $3, $4) ON CONFLICT (namespace, event_id) DO NOTHING RETURNING true;
//	-- a row: apply the effect; none: compare digests (Duplicate or Rejected)
//	COMMIT;
//
// but every connection of its pool starts with lock_timeout = 10ms (a
// startup parameter of the pool's configuration). A claim that meets
// another delivery's uncommitted claim of the same event waits 10 ms, then
// fails with SQLSTATE 55P03 (lock_not_available). The delivery rolls back
// and returns that error, wrapped in [ErrBusy]: the broker redelivers the
// event later. Any other error is returned as it is.
//
// # Why it is correct
//
// The unique key arbitrates, as in the reference. A busy claim is not an
// answer: the claim it met is uncommitted and may still roll back, so the
// delivery is not acknowledged (broken-busy-is-duplicate acknowledges it as
// a Duplicate there, and loses the event when the claimant fails). Its
// redelivery finds the marker committed (Duplicate, or Rejected for
// another payload), or claims the event itself if the claimant rolled back.
// Every failure (a busy claim, a failed effect, a connection that died with
// the server) rolls the marker back with the effect and returns an error.
// Nothing reconnects by hand: pgxpool discards a connection that failed,
// so after a server restart the broker's redeliveries go on until they meet
// live connections.
//
// # Costs
//
//   - It leans on the broker's patience. A busy event costs a redelivery
//     instead of a lock wait: sixteen copies of one event held by a slow
//     claimant are fifteen errors, redelivered after the broker's backoff. A
//     broker that gives up after a few quick retries dead-letters an event
//     that another instance was still processing.
//   - lock_timeout applies to every lock the session takes, not only the
//     claim's: a migration holding the table, or any lock the effect needs,
//     fails deliveries for as long as it is held (they are retried, never
//     lost). Setup lifts it, so that creating the tables is not refused.
//   - After a server restart the pooled connections are dead, and each
//     delivery that meets one fails.
package failfast

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/internal/marker"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// Name is the adapter's name.
const Name = "alt-fail-fast"

// LockTimeout is the most any statement of the adapter's sessions waits for
// a lock.
const LockTimeout = 10 * time.Millisecond

// lockNotAvailable is SQLSTATE lock_not_available, which an expired
// lock_timeout raises.
const lockNotAvailable = "55P03"

// ErrBusy wraps the error of a claim that gave up waiting for a lock,
// almost always another delivery's uncommitted claim of the event: the
// delivery is not acknowledged, and its redelivery will find the event
// decided.
var ErrBusy = errors.New("the event is busy: its claim gave up waiting for a lock (another delivery's uncommitted claim, most likely); redeliver later")

// Adapter returns the `alt-fail-fast` adapter.
func Adapter() adapters.Adapter {
	return adapters.Adapter{Name: Name, Declares: marker.Declares(), New: open}
}

type consumer struct {
	pool   *pgxpool.Pool
	table  string // quoted, schema-qualified
	effect adapters.Effect
	clock  adapters.Clock
}

func open(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
	cfg, err := pgxpool.ParseConfig(env.DSN)
	if err != nil {
		return nil, fmt.Errorf("%s: parse DSN: %w", Name, err)
	}
	cfg.MaxConns = kit.MaxConns
	// A startup parameter, so that every connection the pool opens, after
	// a restart too, has it before its first statement.
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = fmt.Sprintf("%dms", LockTimeout.Milliseconds())
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: connect: %w", Name, err)
	}
	c := &consumer{pool: pool, table: kit.Table(env.Schema, "fail_fast_events"), effect: env.Effect, clock: env.Clock}
	if err := c.migrate(ctx, env.Schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	return c, nil
}

// migrate creates the table and its index on processed_at (for Purge) when
// they are missing, without a lock timeout: two instances creating them at
// once wait for each other's catalog rows, briefly, and must not fail.
func (c *consumer) migrate(ctx context.Context, schema string) error {
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = 0`); err != nil {
			return fmt.Errorf("lift lock_timeout for setup: %w", err)
		}
		for _, stmt := range []string{
			kit.CreateIfMissing(c.table, `CREATE TABLE `+c.table+` (
	namespace      text        NOT NULL,
	event_id       text        NOT NULL,
	payload_digest bytea       NOT NULL,
	processed_at   timestamptz NOT NULL,
	PRIMARY KEY (namespace, event_id)
)`),
			kit.CreateIfMissing(kit.Table(schema, "fail_fast_events_processed_at"),
				`CREATE INDEX fail_fast_events_processed_at ON `+c.table+` (processed_at)`),
		} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("create %s: %w", c.table, err)
			}
		}
		return nil
	})
}

// Deliver claims the event and applies its effect in one transaction; a
// claim that found the event busy is returned as an error wrapping ErrBusy.
func (c *consumer) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if err := kit.Validate(d.Event); err != nil {
		return 0, err
	}
	outcome, err := c.process(ctx, d, kit.Digest(d.Payload))
	if err != nil {
		return 0, fmt.Errorf("%s: %s attempt %d: %w", Name, d.Event, d.Attempt, err)
	}
	return outcome, nil
}

func (c *consumer) process(ctx context.Context, d adapters.Delivery, digest []byte) (outcome adapters.Outcome, err error) {
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	// A no-op after Commit; on every other path, a panic in the effect
	// included, the claim rolls back with the effect. Not with ctx, which
	// may be what failed.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	var claimed bool
	err = tx.QueryRow(ctx, `INSERT INTO `+c.table+` (namespace, event_id, payload_digest, processed_at)
VALUES ($1, $2, $3, $4) ON CONFLICT (namespace, event_id) DO NOTHING RETURNING true`,
		d.Namespace, d.ID, digest, c.clock.Now()).Scan(&claimed)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// Claimed and committed before: compare the payloads.
		var stored []byte
		if err := tx.QueryRow(ctx, `SELECT payload_digest FROM `+c.table+` WHERE namespace = $1 AND event_id = $2`,
			d.Namespace, d.ID).Scan(&stored); err != nil {
			return 0, fmt.Errorf("read the marker: %w", err) // ErrNoRows too: purged meanwhile
		}
		return kit.Classify(stored, digest), nil
	case errors.As(err, &pgErr) && pgErr.Code == lockNotAvailable:
		return 0, fmt.Errorf("%w (waited %s): %w", ErrBusy, LockTimeout, err)
	case err != nil:
		return 0, fmt.Errorf("claim: %w", err)
	}
	if err := c.effect.Apply(ctx, tx, d); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return adapters.Applied, nil
}

// Purge deletes the markers of events processed before cutoff.
func (c *consumer) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	tag, err := c.pool.Exec(ctx, `DELETE FROM `+c.table+` WHERE processed_at < $1`, cutoff)
	if err != nil {
		return 0, fmt.Errorf("%s: purge before %s: %w", Name, cutoff.Format(time.RFC3339Nano), err)
	}
	return tag.RowsAffected(), nil
}

// Close closes the pool.
func (c *consumer) Close(context.Context) error {
	c.pool.Close()
	return nil
}

var (
	_ adapters.Implementation = (*consumer)(nil)
	_ adapters.Purger         = (*consumer)(nil)
)
