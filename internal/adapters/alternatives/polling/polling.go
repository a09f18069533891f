// Package polling is the `alt-polling` adapter: the seed's guarantee reached
// by deliveries that poll the claim of a busy event instead of blocking on a
// lock.
//
// # The technique
//
// The claims table has a row per identity ((namespace, event_id) is its
// primary key) with the payload's digest, a state ('claimed' or 'done'),
// the claim's owner (a random token per delivery) and when it was claimed.
// A delivery:
//
//  1. looks at the row (SELECT, its own statement); if there is none,
//     claims the event with INSERT ... (state 'claimed', owner = me,
//     claimed_at = now) ON CONFLICT DO NOTHING, a statement that commits
//     on its own;
//  2. if the event is claimed by another delivery, polls the row every
//     [PollEvery] with a fresh SELECT, honouring its context, until it is
//     done (Duplicate, or Rejected for another payload) or the claim has
//     been [StaleAfter] old without being finished; it then takes the
//     claim over with UPDATE ... SET owner = me, claimed_at = now WHERE ...
//     AND state = 'claimed' AND claimed_at <= now - StaleAfter, which only
//     one poller can win (it checks the rows affected), and goes on;
//  3. in one transaction applies the effect and sets the state with
//     UPDATE ... SET state = 'done' WHERE ... AND owner = me AND state =
//     'claimed'. No row means the claim passed to another delivery: it
//     rolls back, effect included, and returns an error wrapping
//     [ErrClaimLost].
//
// A failed second transaction leaves the claim as it is: the pollers, and
// the broker's redelivery, take it over once it is stale, as they must for
// a consumer that crashed holding it. Every time comes from
// [adapters.Env.Clock].
//
// # Why it is correct
//
// The effect and the state 'done' commit together or not at all, so an
// event is done exactly when its effect is committed, and a delivery
// answers Duplicate or Rejected only once it has read 'done'. Two effects
// would need two transactions that both set 'done'; the second one's
// UPDATE waits for the first's row lock, then re-reads the row (READ
// COMMITTED), finds 'done' and matches nothing. A claim only decides who
// may try: an owner whose claim was taken over finds another owner and
// rolls back. A busy event is never answered before it is done, so a
// claimant that fails loses nothing: a poller takes its claim over.
//
// A poller waits for nothing but its timer: its SELECTs take no row locks,
// and the claim's INSERT is made only when the row looked absent. Only two
// statements can wait, briefly: that INSERT, for a concurrent INSERT of
// the same event to end, and a takeover, for a claimant's last UPDATE to
// commit or roll back.
//
// # Costs
//
//   - Polling: a busy event costs a SELECT per poller every 20 ms, and a
//     poller holds a delivery (not a connection) for as long as the
//     claimant takes; the answer comes up to 20 ms after the claimant
//     committed.
//   - A claimant that fails holds the event for a second, until its claim
//     is stale; a claimant slower than that is taken over and rolls back
//     (correct, but wasted work).
//   - A new event costs a SELECT, the claim's INSERT and a second
//     transaction: six round trips against the reference's four.
//   - Progress rests on the clock: pollers take a claim over only once the
//     clock has moved a second past it. A clock that stands still leaves a
//     failed claimant's event stuck; one that jumps expires claims early,
//     which costs rollbacks, not duplicates.
package polling

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
const Name = "alt-polling"

// PollEvery is how often a delivery that found the event claimed looks at
// the claim again.
const PollEvery = 20 * time.Millisecond

// StaleAfter is how old, on the clock, an unfinished claim must be before a
// poller takes it over.
const StaleAfter = time.Second

// ErrClaimLost wraps the error of a delivery whose claim passed to another
// delivery before its effect committed: its transaction rolled back.
var ErrClaimLost = errors.New("the claim passed to another delivery before the effect committed; rolled back")

// Adapter returns the `alt-polling` adapter.
func Adapter() adapters.Adapter {
	return adapters.Adapter{Name: Name, Declares: marker.Declares(), New: open}
}

type pollers struct {
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
	p := &pollers{pool: pool, table: kit.Table(env.Schema, "alt_polling_claims"), effect: env.Effect, clock: env.Clock}
	err = kit.Setup(ctx, pool,
		kit.CreateIfMissing(p.table, `CREATE TABLE `+p.table+` (
	namespace      text        NOT NULL,
	event_id       text        NOT NULL,
	payload_digest bytea       NOT NULL,
	state          text        NOT NULL CHECK (state IN ('claimed', 'done')),
	owner          text        NOT NULL,
	claimed_at     timestamptz NOT NULL,
	PRIMARY KEY (namespace, event_id)
)`),
		// Purge finds old claims by claimed_at.
		kit.CreateIfMissing(kit.Table(env.Schema, "alt_polling_claims_claimed_at"),
			`CREATE INDEX alt_polling_claims_claimed_at ON `+p.table+` (claimed_at)`))
	if err != nil {
		return nil, fmt.Errorf("%s: create %s: %w", Name, p.table, err)
	}
	return p, nil
}

// Deliver claims the event, polling while another delivery holds it, then
// applies the effect and marks the event done while the claim is still
// this delivery's.
func (p *pollers) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if err := kit.Validate(d.Event); err != nil {
		return 0, err
	}
	owner := rand.Text() // this delivery's, and no other's
	outcome, claimed, err := p.claim(ctx, d, kit.Digest(d.Payload), owner)
	if err == nil && claimed {
		outcome, err = p.complete(ctx, d, owner)
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %s attempt %d: %w", Name, d.Event, d.Attempt, err)
	}
	return outcome, nil
}

// claim claims the event for owner (claimed) or answers the delivery once
// the event is done (outcome). Each statement commits on its own.
func (p *pollers) claim(ctx context.Context, d adapters.Delivery, digest []byte, owner string) (outcome adapters.Outcome, claimed bool, err error) {
	var poll *time.Ticker // started at the first busy look
	for {
		now := p.clock.Now()
		var stored []byte
		var state string
		var stale bool
		err := p.pool.QueryRow(ctx, `SELECT payload_digest, state, claimed_at <= $3 FROM `+p.table+`
WHERE namespace = $1 AND event_id = $2`, d.Namespace, d.ID, now.Add(-StaleAfter)).Scan(&stored, &state, &stale)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			tag, err := p.pool.Exec(ctx, `INSERT INTO `+p.table+` (namespace, event_id, payload_digest, state, owner, claimed_at)
VALUES ($1, $2, $3, 'claimed', $4, $5) ON CONFLICT (namespace, event_id) DO NOTHING`, d.Namespace, d.ID, digest, owner, now)
			if err != nil {
				return 0, false, fmt.Errorf("claim: %w", err)
			}
			if tag.RowsAffected() == 1 {
				return 0, true, nil
			}
			// Another delivery claimed it since the SELECT: poll it.
		case err != nil:
			return 0, false, fmt.Errorf("read the claim: %w", err)
		case state == "done":
			return kit.Classify(stored, digest), false, nil
		case stale:
			// Unfinished for StaleAfter: take it over, unless another
			// poller did first or the owner finished meanwhile. This
			// delivery's payload is the one it will apply.
			tag, err := p.pool.Exec(ctx, `UPDATE `+p.table+` SET owner = $3, payload_digest = $4, claimed_at = $5
WHERE namespace = $1 AND event_id = $2 AND state = 'claimed' AND claimed_at <= $6`,
				d.Namespace, d.ID, owner, digest, now, now.Add(-StaleAfter))
			if err != nil {
				return 0, false, fmt.Errorf("take over the stale claim: %w", err)
			}
			if tag.RowsAffected() == 1 {
				return 0, true, nil
			}
		}
		if poll == nil {
			poll = time.NewTicker(PollEvery)
			defer poll.Stop()
		}
		select {
		case <-ctx.Done():
			return 0, false, fmt.Errorf("gave up polling the claim held by another delivery: %w", context.Cause(ctx))
		case <-poll.C:
		}
	}
}

// complete applies the effect and marks the event done in one
// transaction, if owner still holds the claim. On failure the claim stays
// until it is stale.
func (p *pollers) complete(ctx context.Context, d adapters.Delivery, owner string) (adapters.Outcome, error) {
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	// A no-op after Commit; on every other path, a panic in the effect
	// included, it undoes the effect. Not with ctx, which may be what
	// failed.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := p.effect.Apply(ctx, tx, d); err != nil {
		return 0, err
	}
	tag, err := tx.Exec(ctx, `UPDATE `+p.table+` SET state = 'done'
WHERE namespace = $1 AND event_id = $2 AND owner = $3 AND state = 'claimed'`, d.Namespace, d.ID, owner)
	switch {
	case err != nil:
		return 0, fmt.Errorf("mark done: %w", err)
	case tag.RowsAffected() == 0:
		return 0, ErrClaimLost
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return adapters.Applied, nil
}

// Purge deletes the claims made before cutoff, done or not: an unfinished
// claim that old is long stale, and deleting it is no different from
// taking it over.
func (p *pollers) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	tag, err := p.pool.Exec(ctx, `DELETE FROM `+p.table+` WHERE claimed_at < $1`, cutoff)
	if err != nil {
		return 0, fmt.Errorf("%s: purge before %s: %w", Name, cutoff.Format(time.RFC3339Nano), err)
	}
	return tag.RowsAffected(), nil
}

// Close closes the pool.
func (p *pollers) Close(context.Context) error {
	p.pool.Close()
	return nil
}

var (
	_ adapters.Implementation = (*pollers)(nil)
	_ adapters.Purger         = (*pollers)(nil)
)
