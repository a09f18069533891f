// Package lease is the `alt-lease` adapter: a delivery first takes a
// one-second lease on the event, then applies the effect and marks the event
// done in a second transaction, only while the lease is still its own.
//
// # The technique
//
// The claims table has a row per identity ((namespace, event_id) is its
// primary key) with the payload's digest, the lease's owner (a random token
// per delivery), when it was claimed, lease_until and done. A delivery:
//
//  1. claims, in a transaction of its own that commits the lease:
//     INSERT ... (owner = me, lease_until = now + 1 s, done = false)
//     ON CONFLICT DO NOTHING. If the row was there: done means the event
//     was applied (Duplicate, or Rejected for another payload); a live
//     lease (lease_until > now) means another delivery is at work, and the
//     delivery returns an error wrapping [ErrBusy] for the broker to
//     redeliver later; an expired lease is taken over with
//     UPDATE ... SET owner = me, lease_until = now + 1 s
//     WHERE ... AND NOT done AND lease_until <= now, which only one
//     delivery can win (it checks the rows affected);
//  2. in one transaction applies the effect and sets done with
//     UPDATE ... SET done = true WHERE ... AND owner = me AND NOT done. No
//     row means the lease passed to another delivery: it rolls back,
//     effect included, and returns an error wrapping [ErrLeaseLost].
//
// A failed second transaction does not give the lease back: the next
// delivery waits until it expires, as it must for a consumer that crashed
// holding one. Every time (claimed_at, lease_until, the takeover's now)
// comes from [adapters.Env.Clock], so the lease expires on the harness's
// clock.
//
// # Why it is correct
//
// The effect and done commit together, in one transaction, or not at all,
// so an event is done exactly when its effect is committed, and a delivery
// answers Duplicate or Rejected only for a done event. Two effects would
// need two transactions that both set done; the second one's UPDATE waits
// for the first's row lock, then re-reads the row (READ COMMITTED), finds
// done and matches nothing. A lease only decides who may try: an owner
// whose lease expired and was taken over finds owner changed and rolls
// back; one whose lease expired unnoticed still commits, and nobody else
// could take it over meanwhile, since a takeover changes the owner in the
// same row. A live lease is not an answer (its owner may still fail), so a
// busy delivery is never acknowledged.
//
// The claim is a transaction of its own, as most leases are written; its
// statements need not commit together (the takeover's WHERE re-checks what
// the SELECT before it saw), but a COMMIT that is not the effect's is
// exactly what a harness aiming at "the" COMMIT must not mistake for it.
//
// # Costs
//
//   - It leans on the broker's patience: a delivery that meets a live lease
//     is an error, and after a failure (an error in the effect, a killed
//     connection, a server crash) the event is stuck until the lease
//     expires, a second at least. A broker that gives up after a few quick
//     retries dead-letters it.
//   - A new event costs two transactions, seven round trips against the
//     reference's four; the claim commits on its own, so a crash leaves
//     leases behind, which expire.
//   - The lease must be longer than a normal delivery takes, or slow
//     deliveries lose their lease to redeliveries and roll back: correct,
//     but wasted work. One second is short for that; it is what the broker
//     must wait out after a failure.
//   - Correctness rests on clocks only for progress, never for safety: a
//     clock that jumps expires leases early, which costs rollbacks, not
//     duplicates.
package lease

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/internal/marker"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// Name is the adapter's name.
const Name = "alt-lease"

// Lease is how long a claim keeps other deliveries off the event.
const Lease = time.Second

// ErrBusy wraps the error of a delivery that found another delivery's live
// lease on the event: it is not acknowledged, and its redelivery after the
// lease ends finds the event done, or takes the lease over.
var ErrBusy = errors.New("the event is busy: another delivery holds its lease; redeliver later")

// ErrLeaseLost wraps the error of a delivery whose lease passed to another
// delivery before its effect committed: its transaction rolled back.
var ErrLeaseLost = errors.New("the lease passed to another delivery before the effect committed; rolled back")

// Adapter returns the `alt-lease` adapter.
func Adapter() adapters.Adapter {
	return adapters.Adapter{Name: Name, Declares: marker.Declares(), New: open}
}

type leases struct {
	pool   *pgxpool.Pool
	table  string // quoted, schema-qualified
	effect adapters.Effect
	clock  adapters.Clock
}

func open(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
	pool, err := kit.Pool(ctx, env.DSN)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	l := &leases{pool: pool, table: kit.Table(env.Schema, "alt_lease_claims"), effect: env.Effect, clock: env.Clock}
	err = kit.Setup(ctx, pool,
		kit.CreateIfMissing(l.table, `CREATE TABLE `+l.table+` (
	namespace      text        NOT NULL,
	event_id       text        NOT NULL,
	payload_digest bytea       NOT NULL,
	owner          text        NOT NULL,
	claimed_at     timestamptz NOT NULL,
	lease_until    timestamptz NOT NULL,
	done           boolean     NOT NULL,
	PRIMARY KEY (namespace, event_id)
)`),
		// Purge finds old claims by claimed_at.
		kit.CreateIfMissing(kit.Table(env.Schema, "alt_lease_claims_claimed_at"),
			`CREATE INDEX alt_lease_claims_claimed_at ON `+l.table+` (claimed_at)`))
	if err != nil {
		return nil, fmt.Errorf("%s: create %s: %w", Name, l.table, err)
	}
	return l, nil
}

// Deliver takes the event's lease, then applies the effect and marks the
// event done while the lease is still this delivery's.
func (l *leases) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if err := kit.Validate(d.Event); err != nil {
		return 0, err
	}
	owner := rand.Text() // this delivery's, and no other's
	outcome, leased, err := l.claim(ctx, d, kit.Digest(d.Payload), owner)
	if err == nil && leased {
		outcome, err = l.complete(ctx, d, owner)
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %s attempt %d: %w", Name, d.Event, d.Attempt, err)
	}
	return outcome, nil
}

// claim takes the lease for owner (leased) or answers the delivery from the
// done row (outcome), in a transaction of its own that commits the lease.
func (l *leases) claim(ctx context.Context, d adapters.Delivery, digest []byte, owner string) (outcome adapters.Outcome, leased bool, err error) {
	err = pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		var err error
		outcome, leased, err = l.claimIn(ctx, tx, d, digest, owner)
		return err
	})
	return outcome, leased, err
}

// claimIn is claim's work, in tx.
func (l *leases) claimIn(ctx context.Context, tx pgx.Tx, d adapters.Delivery, digest []byte, owner string) (outcome adapters.Outcome, leased bool, err error) {
	now := l.clock.Now()
	until := now.Add(Lease)
	tag, err := tx.Exec(ctx, `INSERT INTO `+l.table+` (namespace, event_id, payload_digest, owner, claimed_at, lease_until, done)
VALUES ($1, $2, $3, $4, $5, $6, false) ON CONFLICT (namespace, event_id) DO NOTHING`,
		d.Namespace, d.ID, digest, owner, now, until)
	if err != nil {
		return 0, false, fmt.Errorf("claim: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return 0, true, nil
	}

	// The times are compared in SQL, at the precision they are stored in.
	var stored []byte
	var done, live bool
	var leaseUntil time.Time
	err = tx.QueryRow(ctx, `SELECT payload_digest, done, lease_until > $3, lease_until FROM `+l.table+`
WHERE namespace = $1 AND event_id = $2`, d.Namespace, d.ID, now).Scan(&stored, &done, &live, &leaseUntil)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, errors.New("the claim vanished (purged) after the INSERT found it; redeliver")
	case err != nil:
		return 0, false, fmt.Errorf("read the claim: %w", err)
	case done:
		return kit.Classify(stored, digest), false, nil
	case live:
		return 0, false, fmt.Errorf("%w: leased until %s, now %s", ErrBusy, leaseUntil.Format(time.RFC3339Nano), now.Format(time.RFC3339Nano))
	}

	// Expired: take it over, unless another delivery did first or the
	// owner finished meanwhile. This delivery's payload is the one it will
	// apply, so its digest replaces the previous owner's.
	tag, err = tx.Exec(ctx, `UPDATE `+l.table+` SET owner = $3, payload_digest = $4, claimed_at = $5, lease_until = $6
WHERE namespace = $1 AND event_id = $2 AND NOT done AND lease_until <= $5`,
		d.Namespace, d.ID, owner, digest, now, until)
	switch {
	case err != nil:
		return 0, false, fmt.Errorf("take over the expired lease: %w", err)
	case tag.RowsAffected() == 0:
		return 0, false, fmt.Errorf("%w: the expired lease (until %s) was taken over or finished by another delivery first", ErrBusy, leaseUntil.Format(time.RFC3339Nano))
	}
	return 0, true, nil
}

// complete applies the effect and marks the event done in one
// transaction, if owner still holds the lease. On failure the lease stays
// until it expires.
func (l *leases) complete(ctx context.Context, d adapters.Delivery, owner string) (adapters.Outcome, error) {
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	// A no-op after Commit; on every other path, a panic in the effect
	// included, it undoes the effect. Not with ctx, which may be what
	// failed.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := l.effect.Apply(ctx, tx, d); err != nil {
		return 0, err
	}
	tag, err := tx.Exec(ctx, `UPDATE `+l.table+` SET done = true
WHERE namespace = $1 AND event_id = $2 AND owner = $3 AND NOT done`, d.Namespace, d.ID, owner)
	switch {
	case err != nil:
		return 0, fmt.Errorf("mark done: %w", err)
	case tag.RowsAffected() == 0:
		return 0, ErrLeaseLost
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return adapters.Applied, nil
}

// Purge deletes the claims of events done before cutoff, and the leases
// that expired before it without their event being done (an event the
// broker gave up on: deleting such a lease is no different from its
// expiry). Live leases stay.
func (l *leases) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	tag, err := l.pool.Exec(ctx, `DELETE FROM `+l.table+` WHERE claimed_at < $1 AND (done OR lease_until < $1)`, cutoff)
	if err != nil {
		return 0, fmt.Errorf("%s: purge before %s: %w", Name, cutoff.Format(time.RFC3339Nano), err)
	}
	return tag.RowsAffected(), nil
}

// Close closes the pool.
func (l *leases) Close(context.Context) error {
	l.pool.Close()
	return nil
}

var (
	_ adapters.Implementation = (*leases)(nil)
	_ adapters.Purger         = (*leases)(nil)
)
