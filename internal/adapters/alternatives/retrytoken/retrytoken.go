// Package retrytoken is the `alt-retry-token` adapter: the reference
// pattern run by a retry helper inside the delivery, which reads back a
// claim token after a COMMIT whose answer was lost.
//
// # The technique
//
// Transaction functions with retry loops are everywhere: pgx.BeginTxFunc
// in a loop, CockroachDB's ExecuteTx, Spring's @Retryable, Python retry
// decorators. This adapter wraps claim, effect and COMMIT in one such
// helper, which runs the whole transaction again, up to [MaxTries] times
// with a short backoff, when it fails on a lost connection or with SQLSTATE
// 57P01 to 57P03 (the backend was terminated, or the server is shutting
// down or starting), 40001 (serialization failure) or 40P01 (deadlock).
// Every other error is returned at once, for the broker to redeliver.
//
// Each delivery draws a random claim token and stores it in the marker it
// claims. A retry after a COMMIT whose answer was lost cannot tell, from
// the marker alone, whether the COMMIT landed: the retry's claim finds a
// marker either way, its own or another delivery's. The token tells them
// apart: the delivery's own token means its COMMIT landed, and it answers
// Applied; another token means another delivery claimed the event, and it
// answers Duplicate (or Rejected, for another payload).
//
// # Why it is correct
//
// An answer is given only once the delivery knows it is true: Applied when
// its COMMIT returned, or when its own token shows that the COMMIT whose
// answer was lost landed; Duplicate when another delivery's committed
// marker, committed with that delivery's effect, is there. A delivery that
// meets a fault may therefore still answer Applied: the harness judges the
// answer against the ledger, not whether an error came back.
//
// # What the protections are for
//
// Two broken adapters are this one with one protection removed (see
// [Without]): without the token, a COMMIT whose answer was lost is taken
// for a success; with errors swallowed, a delivery whose tries ran out is
// acknowledged anyway. Each answers Applied for an event whose effect is
// not committed, and the harness must fail it.
package retrytoken

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/internal/marker"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// Name is the adapter's name.
const Name = "alt-retry-token"

// MaxTries bounds how often one delivery runs its transaction.
const MaxTries = 4

// firstBackoff is the pause before the first retry; it doubles with each.
const firstBackoff = 25 * time.Millisecond

// Without names a protection of the technique that a broken variant
// removes.
type Without int

const (
	// Nothing removes nothing: the correct adapter.
	Nothing Without = iota
	// NoToken stores no claim token: a COMMIT whose answer was lost is
	// taken for a success and answered Applied, though the server may
	// have rolled it back.
	NoToken
	// SwallowedErrors acknowledges a delivery whose tries ran out, or
	// that failed with an error the helper does not retry, as Applied,
	// "so that the queue keeps moving".
	SwallowedErrors
)

// Adapter returns the `alt-retry-token` adapter.
func Adapter() adapters.Adapter { return Variant(Name, Nothing) }

// Variant returns the adapter called name: the technique with without
// removed.
func Variant(name string, without Without) adapters.Adapter {
	return adapters.Adapter{
		Name:     name,
		Declares: marker.Declares(),
		New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
			pool, err := kit.Pool(ctx, env.DSN)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			i := &instance{name: name, pool: pool, markers: kit.Table(env.Schema, "retry_token_markers"), effect: env.Effect, now: env.Clock.Now, without: without}
			if err := kit.Setup(ctx, pool, i.ddl(env.Schema)...); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			return i, nil
		},
	}
}

// instance is one instance of the adapter, with a pool of its own.
type instance struct {
	name    string
	pool    *pgxpool.Pool
	markers string // quoted, schema-qualified
	effect  adapters.Effect
	now     func() time.Time
	without Without
}

func (i *instance) ddl(schema string) []string {
	index := "retry_token_markers_processed_at"
	return []string{
		kit.CreateIfMissing(i.markers, `CREATE TABLE `+i.markers+` (
	namespace      text        NOT NULL,
	event_id       text        NOT NULL,
	payload_digest bytea       NOT NULL,
	claim_token    bytea       NOT NULL,
	processed_at   timestamptz NOT NULL,
	PRIMARY KEY (namespace, event_id)
)`),
		kit.CreateIfMissing(kit.Table(schema, index), `CREATE INDEX `+index+` ON `+i.markers+` (processed_at)`),
	}
}

// Deliver runs the delivery's transaction with retries.
func (i *instance) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if err := kit.Validate(d.Event); err != nil {
		return 0, err
	}
	token := make([]byte, 16)
	if _, err := crand.Read(token); err != nil {
		return 0, fmt.Errorf("%s: draw a claim token: %w", i.name, err)
	}
	digest := kit.Digest(d.Payload)
	var outcome adapters.Outcome
	err := withRetries(ctx, func(ctx context.Context) (err error) {
		outcome, err = i.once(ctx, d, digest, token)
		return err
	})
	if err != nil && i.without == SwallowedErrors {
		return adapters.Applied, nil // the bug
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %s attempt %d: %w", i.name, d.Event, d.Attempt, err)
	}
	return outcome, nil
}

// once runs the delivery's transaction once: claim with the token, apply
// the effect if the claim succeeded, commit; or, when the event is
// claimed, read whose claim it is.
func (i *instance) once(ctx context.Context, d adapters.Delivery, digest, token []byte) (_ adapters.Outcome, err error) {
	tx, err := i.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if rbErr := tx.Rollback(context.WithoutCancel(ctx)); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) && err == nil {
			err = fmt.Errorf("rollback: %w", rbErr)
		}
	}()
	stored := token
	if i.without == NoToken {
		stored = []byte{}
	}
	var claimed bool
	err = tx.QueryRow(ctx, `INSERT INTO `+i.markers+` (namespace, event_id, payload_digest, claim_token, processed_at) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (namespace, event_id) DO NOTHING RETURNING true`, d.Namespace, d.ID, digest, stored, i.now()).Scan(&claimed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return i.claimedBy(ctx, tx, d, digest, token)
	case err != nil:
		return 0, fmt.Errorf("claim %s: %w", d.Event, err)
	}
	if err := i.effect.Apply(ctx, tx, d); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		if i.without == NoToken && !isServerError(err) {
			return adapters.Applied, nil // the bug: the COMMIT's outcome is unknown
		}
		return 0, fmt.Errorf("commit: %w", err)
	}
	return adapters.Applied, nil
}

// claimedBy answers a delivery whose event is claimed: Applied when the
// claim is its own, made by an earlier try whose COMMIT's answer was lost;
// else Duplicate or Rejected by the stored digest.
func (i *instance) claimedBy(ctx context.Context, tx pgx.Tx, d adapters.Delivery, digest, token []byte) (adapters.Outcome, error) {
	var storedDigest, storedToken []byte
	if err := tx.QueryRow(ctx, `SELECT payload_digest, claim_token FROM `+i.markers+` WHERE namespace = $1 AND event_id = $2`, d.Namespace, d.ID).Scan(&storedDigest, &storedToken); err != nil {
		return 0, fmt.Errorf("read the claim of %s: %w", d.Event, err)
	}
	if i.without != NoToken && bytes.Equal(storedToken, token) {
		return adapters.Applied, nil
	}
	return kit.Classify(storedDigest, digest), nil
}

// Purge deletes the markers claimed before cutoff.
func (i *instance) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	tag, err := i.pool.Exec(ctx, `DELETE FROM `+i.markers+` WHERE processed_at < $1`, cutoff)
	if err != nil {
		return 0, fmt.Errorf("%s: purge before %s: %w", i.name, cutoff.Format(time.RFC3339Nano), err)
	}
	return tag.RowsAffected(), nil
}

// Close closes the pool.
func (i *instance) Close(context.Context) error {
	i.pool.Close()
	return nil
}

// withRetries runs fn, and again while it fails with an error worth
// retrying (see retryable), up to MaxTries times, with a jittered backoff
// that honours ctx. It returns fn's last error.
func withRetries(ctx context.Context, fn func(context.Context) error) error {
	for try := 1; ; try++ {
		err := fn(ctx)
		if err == nil || try == MaxTries || ctx.Err() != nil || !retryable(err) {
			return err
		}
		pause := firstBackoff << (try - 1)
		t := time.NewTimer(pause/2 + rand.N(pause/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// retryable reports whether err is worth running the transaction again
// for: a lost connection (no answer from the server at all), or a server
// error that says the same transaction may succeed when run again.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
	}
	switch pgErr.Code {
	case "57P01", "57P02", "57P03", "40001", "40P01":
		return true
	}
	return false
}

// isServerError reports whether err is the server's answer: a COMMIT that
// failed so was rolled back, where a lost connection leaves it unknown.
func isServerError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}

var (
	_ adapters.Implementation = (*instance)(nil)
	_ adapters.Purger         = (*instance)(nil)
)
