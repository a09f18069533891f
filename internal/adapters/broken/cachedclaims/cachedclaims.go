// Package cachedclaims is the `broken-cached-claims` adapter: the reference
// pattern behind a cache, in each instance's memory, of the identities it
// has seen committed, which answers a redelivery without asking the
// database.
//
// # The real-world bug
//
// A "fast path" in front of the inbox table: most redeliveries are of
// events an instance has just processed, so it remembers the identities it has
// seen committed (an LRU or a map with a TTL in process memory, a Redis set
// with an expiry written after the COMMIT) and answers a redelivery found
// there at once, without a transaction. That is right as long as the
// database keeps what it committed. When the database loses committed
// state behind the cache's back (a failover to a standby that lacked the
// last commits, under asynchronous replication; a restore from a backup; a
// point-in-time recovery), the cache goes on answering Duplicate for events
// whose marker and effect are gone. The broker takes the acknowledgement,
// and the event is lost for good, where the reference would have found no
// marker and applied it again.
//
// # What goes wrong
//
// Each instance caches, by identity, the payload digest and the time of
// the claim, after the COMMIT of a delivery it applied or found Duplicate
// (reading the marker's digest and processed_at). A delivery whose identity
// is in the cache is answered from it, Duplicate for the same payload and
// Rejected for another, without touching the database.
//
// The cache is filled only after a successful COMMIT, never at the claim:
// a claim cached before its transaction committed would answer Duplicate
// after a rollback (an effect that failed, a COMMIT that failed) and lose
// the event on a single server, which failure-after-marker catches.
// Entries live as long as the declared redelivery window on the harness's
// clock, as the markers do, and Purge forgets those claimed before its
// cutoff after deleting their markers, so retention behaves as the
// reference's, across instances too. And on a single server nothing loses
// committed state (a crash and a restart keep every commit, which
// crash-recovery checks), so there the cache is never wrong, and nothing
// tells it from the reference.
//
// # What catches it
//
// The failover fixture, in its variant with asynchronous replication,
// where a failover loses acknowledged commits:
//
//   - failover.reapplied-after-loss (SHOULD): the redelivery of an event
//     whose marker and effect the failover lost, to an instance that saw
//     the event committed, is answered Duplicate from its cache, and the
//     event ends with no effect.
//
// Only that rule, and only a SHOULD, so it is certified even there. Where
// replication is synchronous a failover loses nothing acknowledged, the
// cache stays right, and no MUST rule can tell it from the reference:
// failing it for that would be failing a correct implementation. The
// catch needs a redelivery to an instance that cached the event (the one
// that applied it, or one that found it Duplicate), not a restarted one
// nor one that never saw it: the fixture redelivers a lost event to the
// instance that applied it.
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package cachedclaims

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// Name is the adapter's name.
const Name = "broken-cached-claims"

// Adapter returns the `broken-cached-claims` adapter.
func Adapter() adapters.Adapter {
	ttl := base.Declaration().RedeliveryWindow
	return base.Adapter(Name, base.KeyedColumns, func(i *base.Instance) *implementation {
		return &implementation{Instance: i, ttl: ttl, seen: map[key]claim{}}
	})
}

type key struct{ namespace, id string }

// claim is what the cache holds of a committed claim: its payload digest
// and the time it was claimed, the marker's processed_at.
type claim struct {
	digest  []byte
	claimed time.Time
}

type implementation struct {
	*base.Instance
	// ttl is how long an entry answers: the declared redelivery window.
	ttl  time.Duration
	mu   sync.Mutex
	seen map[key]claim
}

// Deliver answers from the cache when it can, which is the bug; otherwise
// it is the reference pattern, and it caches what it committed.
func (i *implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if err := kit.Validate(d.Event); err != nil {
		return 0, err
	}
	k, digest := key{d.Namespace, d.ID}, kit.Digest(d.Payload)
	if outcome, ok := i.cached(k, digest); ok {
		return outcome, nil
	}
	var committed claim // set by the claim, or by a conflict found Duplicate
	outcome, err := i.Transact(ctx, d,
		func(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (bool, error) {
			// The time as the marker stores it, to the microsecond, so that
			// the cache and Purge's cutoff agree on which side it is.
			now := i.Now().Truncate(time.Microsecond)
			committed = claim{digest: digest, claimed: now}
			return base.ClaimWith(ctx, tx, d, i.Insert()+` ON CONFLICT (namespace, event_id) DO NOTHING RETURNING true`,
				d.Namespace, d.ID, digest, now)
		},
		func(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (adapters.Outcome, error) {
			stored, err := i.marker(ctx, tx, d)
			if err != nil {
				return 0, err
			}
			outcome := kit.Classify(stored.digest, digest)
			if outcome == adapters.Duplicate {
				committed = stored
			}
			return outcome, nil
		})
	if err == nil && (outcome == adapters.Applied || outcome == adapters.Duplicate) {
		// After the COMMIT, never before it.
		i.remember(k, committed)
	}
	return outcome, err
}

// marker reads d's marker in tx; its claim just failed, so it must exist
// (see base.MustFind).
func (i *implementation) marker(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (claim, error) {
	var c claim
	err := tx.QueryRow(ctx, `SELECT payload_digest, processed_at FROM `+i.Markers+` WHERE namespace = $1 AND event_id = $2`,
		d.Namespace, d.ID).Scan(&c.digest, &c.claimed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return claim{}, fmt.Errorf("marker of %s vanished during the conflict check; retry", d.Event)
	case err != nil:
		return claim{}, fmt.Errorf("read marker of %s: %w", d.Event, err)
	}
	return c, nil
}

// cached answers a delivery of k with digest from the cache, if it holds
// a live entry for k: one claimed within the redelivery window.
func (i *implementation) cached(k key, digest []byte) (adapters.Outcome, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	c, ok := i.seen[k]
	if !ok {
		return 0, false
	}
	if c.claimed.Before(i.Now().Add(-i.ttl)) {
		delete(i.seen, k)
		return 0, false
	}
	return kit.Classify(c.digest, digest), true
}

// remember caches k's committed claim c.
func (i *implementation) remember(k key, c claim) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.seen[k] = c
}

// Purge is the reference's, and then forgets the cached claims it expired:
// those claimed before cutoff.
func (i *implementation) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	removed, err := i.Instance.Purge(ctx, cutoff)
	if err != nil {
		return removed, err
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	for k, c := range i.seen {
		if c.claimed.Before(cutoff) {
			delete(i.seen, k)
		}
	}
	return removed, nil
}
