// Package outbox is the transactional outbox of the reference adapter
// (adapters/reference): a table of external effects written in the claim's
// transaction, and the relay that sends them after commit with the key
// fixed in each row. The broken adapters that break the relay on purpose
// build on it too. The reference's package doc explains the pattern.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/external"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// DefaultTable is the unqualified name of the outbox table.
const DefaultTable = "outbox"

// Relay timing: the backoff after a failed send doubles from MinBackoff to
// MaxBackoff, and an idle relay looks at the table every Poll even when
// nothing nudged it (rows left by a stopped instance, rows written by
// another process).
const (
	MinBackoff = 10 * time.Millisecond
	MaxBackoff = time.Second
	Poll       = 500 * time.Millisecond
)

// SendFunc makes one event's external effect with the idempotency key key.
// It returns nil once the destination has acknowledged the effect, an error
// wrapping [external.ErrConflict] when retrying with key can never succeed,
// and any other error when a retry with the same key may.
type SendFunc func(ctx context.Context, key string, ev adapters.Event) error

// Config configures an [Outbox].
type Config struct {
	// Schema holds the outbox table; empty means the connection's
	// search_path.
	Schema string
	// Table is the outbox table's name; empty means DefaultTable.
	Table string
	// Send makes one effect. Required for [Outbox.Run].
	Send SendFunc
	// Now stamps the rows; nil means time.Now.
	Now func() time.Time
	// Logf, when not nil, reports effects the destination refused for good.
	Logf func(format string, args ...any)
}

// Outbox is a table of external effects waiting to be sent, written in the
// claim's transaction, and the relay that sends them after commit. Several
// processes may share one outbox table; each runs its own relay. It is safe
// for concurrent use.
type Outbox struct {
	pool  *pgxpool.Pool
	table string
	cfg   Config
	// nudge wakes the relay; a buffered slot is enough, since one pass
	// sends everything committed before it started.
	nudge chan struct{}
}

// New returns an outbox over pool. Call [Outbox.Migrate] once before
// use.
func New(pool *pgxpool.Pool, cfg Config) *Outbox {
	name := cfg.Table
	if name == "" {
		name = DefaultTable
	}
	table := pgx.Identifier{name}.Sanitize()
	if cfg.Schema != "" {
		table = pgx.Identifier{cfg.Schema, name}.Sanitize()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &Outbox{pool: pool, table: table, cfg: cfg, nudge: make(chan struct{}, 1)}
}

// Table returns the outbox table's quoted, qualified name.
func (o *Outbox) Table() string { return o.table }

// Migrate creates the outbox table when it is missing, as the reference's
// Store.Migrate does its own: without a lock on a table that exists, and
// safely from several processes at once.
func (o *Outbox) Migrate(ctx context.Context) error {
	// id orders the rows, so Drain can tell those committed before it was
	// called; parked holds the destination's refusal of a row it will never
	// accept, so the relay stops retrying it.
	create := `CREATE TABLE ` + o.table + ` (
	id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	namespace       text        NOT NULL,
	event_id        text        NOT NULL,
	payload         bytea       NOT NULL,
	idempotency_key text        NOT NULL,
	created_at      timestamptz NOT NULL,
	parked          text
)`
	if _, err := o.pool.Exec(ctx, kit.CreateIfMissing(o.table, create)); err != nil {
		return fmt.Errorf("create %s: %w", o.table, err)
	}
	return nil
}

// Add writes ev's effect to the outbox in tx, the transaction that claimed
// ev: the row commits with the claim and the database effect, or not at
// all. The key is fixed here, once, from the identity ([external.Key]), so
// every send of the row, by any process, after any restart, carries it.
// Call [Outbox.Wake] after the transaction commits.
func (o *Outbox) Add(ctx context.Context, tx pgx.Tx, ev adapters.Event) error {
	payload := ev.Payload
	if payload == nil {
		payload = []byte{} // NOT NULL: an empty payload is still a payload
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+o.table+` (namespace, event_id, payload, idempotency_key, created_at)
VALUES ($1, $2, $3, $4, $5)`, ev.Namespace, ev.ID, payload, external.Key(ev), o.cfg.Now())
	if err != nil {
		return fmt.Errorf("outbox row of %s: %w", ev, err)
	}
	return nil
}

// Wake tells the relay that a row has committed, so it sends it now rather
// than at its next poll. It never blocks.
func (o *Outbox) Wake() {
	select {
	case o.nudge <- struct{}{}:
	default:
	}
}

// Run is the relay: it sends the outbox's rows until ctx ends, then returns
// without sending what is left (another relay, or this one's successor,
// will). A failed send is retried, with the same key, after a backoff that
// doubles from MinBackoff to MaxBackoff.
func (o *Outbox) Run(ctx context.Context) {
	backoff := MinBackoff
	for {
		err := o.pass(ctx)
		if ctx.Err() != nil {
			return // stopped: what is left stays in the table
		}
		wait := Poll
		if err != nil {
			o.cfg.Logf("outbox relay: %v; retrying in %s", err, backoff)
			wait, backoff = backoff, min(2*backoff, MaxBackoff)
		} else {
			backoff = MinBackoff
		}
		nudge := o.nudge
		if err != nil {
			nudge = nil // a failed send waits out its backoff, nudged or not
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-nudge:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// pass sends rows, oldest first, until none is left that another relay has
// not locked.
func (o *Outbox) pass(ctx context.Context) error {
	for {
		sent, err := o.sendOne(ctx)
		if err != nil || !sent {
			return err
		}
	}
}

// sendOne sends one row in a transaction of its own and reports whether it
// found one. The row stays locked (FOR UPDATE) while it is sent, so no other
// relay sends it at the same time, and SKIP LOCKED lets the others send the
// rest meanwhile. The row is deleted only after the destination has
// acknowledged it, in the transaction that holds the lock: a crash, a lost
// connection or a failed send anywhere before that COMMIT leaves it in the
// table, and the lock dies with the session, so another relay sends it
// again with the same key, which the destination answers with a replay.
func (o *Outbox) sendOne(ctx context.Context) (sent bool, err error) {
	tx, err := o.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if rbErr := tx.Rollback(context.WithoutCancel(ctx)); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) && err == nil {
			err = fmt.Errorf("rollback: %w", rbErr)
		}
	}()
	var id int64
	var key string
	var ev adapters.Event
	err = tx.QueryRow(ctx, `SELECT id, namespace, event_id, payload, idempotency_key FROM `+o.table+`
WHERE parked IS NULL ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`).Scan(&id, &ev.Namespace, &ev.ID, &ev.Payload, &key)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read %s: %w", o.table, err)
	}
	statement, args := `DELETE FROM `+o.table+` WHERE id = $1`, []any{id}
	if err := o.cfg.Send(ctx, key, ev); errors.Is(err, external.ErrConflict) {
		// The destination holds this key for another request: a bug
		// somewhere, which no retry fixes. Keep the row for a human.
		o.cfg.Logf("outbox relay: %v; parked, not retried", err)
		statement, args = `UPDATE `+o.table+` SET parked = $2 WHERE id = $1`, []any{id, err.Error()}
	} else if err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, statement, args...); err != nil {
		return false, fmt.Errorf("settle %s row %d: %w", o.table, id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("commit %s row %d: %w", o.table, id, err)
	}
	return true, nil
}

// Drain returns once every row committed before the call has been sent, by
// this relay or another, or with ctx's error. It returns an error if some of
// those rows were parked: the destination refused them for good.
func (o *Outbox) Drain(ctx context.Context) error {
	var last int64
	if err := o.pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM `+o.table).Scan(&last); err != nil {
		return fmt.Errorf("drain %s: %w", o.table, err)
	}
	for {
		var pending, parked int
		err := o.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE parked IS NULL), count(*) FILTER (WHERE parked IS NOT NULL)
FROM `+o.table+` WHERE id <= $1`, last).Scan(&pending, &parked)
		switch {
		case err != nil:
			return fmt.Errorf("drain %s: %w", o.table, err)
		case pending == 0 && parked > 0:
			return fmt.Errorf("drain %s: %d effects refused by the destination are parked", o.table, parked)
		case pending == 0:
			return nil
		}
		// Look again shortly: the rows may be this relay's or another's
		// (locked by it, so skipped by this one).
		o.Wake()
		timer := time.NewTimer(MinBackoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("drain %s: %d effects unsent: %w", o.table, pending, context.Cause(ctx))
		case <-timer.C:
		}
	}
}
