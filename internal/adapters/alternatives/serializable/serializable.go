// Package serializable is the `alt-serializable` adapter: check-then-insert
// with no unique constraint, made safe by running every delivery's
// transaction at the SERIALIZABLE isolation level and retrying it on
// serialization failures.
//
// # The technique
//
// The marker table has no unique key, only a plain index on
// (namespace, event_id). Each delivery runs
//
//	BEGIN ISOLATION LEVEL SERIALIZABLE;
//	SELECT payload_digest FROM markers WHERE namespace = $1 AND event_id = $2;
//	-- found: Duplicate (same digest) or Rejected (another digest)
//	-- not found:
//	INSERT INTO markers (...) VALUES (...);
//	INSERT INTO ledger ...;               -- the harness's effect
//	COMMIT;
//
// and when any statement, or the COMMIT, fails with SQLSTATE 40001
// (serialization_failure), rolls back and runs the whole transaction again,
// up to [MaxTries] times with a small jittered backoff that honours the
// context. When the tries run out it returns an error: the delivery is not
// acknowledged and the broker redelivers. Every other error is returned at
// once, not acknowledged.
//
// # Why it is correct
//
// At READ COMMITTED this is the classic race: two deliveries both find no
// marker and both insert one. PostgreSQL's Serializable Snapshot Isolation
// forbids the outcome. "The Serializable isolation level ... emulates serial
// transaction execution for all committed transactions; as if transactions
// had been executed one after another, serially, rather than concurrently"
// (PostgreSQL documentation, 13.2.3 Serializable Isolation Level). In any serial
// order, the second delivery's SELECT sees the first one's marker, so two
// committed claims of one identity are not a serializable history. SSI
// detects the pattern: each transaction's SELECT takes a predicate (SIRead)
// lock on the part of the index it searched, each INSERT into that part
// records a read-write conflict against the other, and the second of the two
// to commit (or, sometimes, to write) fails with 40001. The retry starts a
// new snapshot, sees the winner's committed marker, and answers Duplicate.
//
// A Duplicate or Rejected answer also comes from a SERIALIZABLE read, and the
// documentation says it is important "that any data read from a permanent
// user table not be considered valid until the transaction which read it
// has successfully committed. This is true even for read-only transactions"
// (13.2.3). So the read-only path commits too, and answers only once its
// COMMIT succeeded; a 40001 there is retried like any other.
//
// The effect runs in the same transaction as the marker, so a failure
// anywhere before COMMIT (an error, a panic, a killed connection, a
// serialization failure) rolls back both, and the event stays claimable.
//
// SSI only protects transactions that run at SERIALIZABLE: a transaction at
// a lower level takes no predicate locks and is not checked (Serializable
// Isolation Level; Enforcing Consistency with Serializable Transactions).
// Every marker read and write of this adapter runs at SERIALIZABLE. Purge
// runs at the default level; it only deletes markers older than the
// redelivery window, which makes those events claimable again by design.
//
// # Why a plain index
//
// The index is not there for uniqueness but to keep predicate locks narrow.
// "A sequential scan will always necessitate a relation-level predicate
// lock. This can result in an increased rate of serialization failures"
// (13.2.3): without the index, every delivery would conflict with
// every other delivery's INSERT, whatever their events. With it, the SELECT
// locks only the B-tree leaf page it searched, so only deliveries whose
// identities share a leaf page (the same event, or a neighbour) conflict.
// An empty B-tree has no pages yet: the first deliveries into a fresh table
// take a lock on the whole index, which is correct, merely coarse.
//
// # Costs
//
//   - Retries. Under contention all but one contender of an event fail, at
//     the latest at COMMIT, after having done all their work, effect
//     included. In one certify run, 150 of the 160 deliveries of the
//     concurrent-delivery fixture's overlapping rounds (16 contenders, a
//     250 ms sleep in the effect) ran their transaction twice or three
//     times, and the plain rounds needed up to five tries. Work done before
//     a 40001 is wasted, and an effect with consequences outside the
//     database must never be part of such a transaction.
//   - False positives. Page-granular predicate locks (and their promotion
//     to coarser locks when max_pred_locks_per_transaction is exceeded, or
//     after a sequential scan) make unrelated events conflict now and then;
//     they cost a retry, never correctness.
//   - Every other writer of the marker table must also run at
//     SERIALIZABLE, and narrow locks depend on the planner choosing the
//     index (a sequential scan is still correct, only coarser).
//   - A bounded number of retries can run out under extreme contention; the
//     delivery is then returned unacknowledged and the broker's redelivery
//     is the outer retry loop.
//
// The bare unique key of the reference adapter gets the same guarantee with
// a lock wait instead of a rollback and redo.
package serializable

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/internal/marker"
)

// Name is the adapter's name.
const Name = "alt-serializable"

// MaxTries bounds how often one delivery runs its transaction when it keeps
// failing with a serialization failure.
const MaxTries = 20

// Backoff bounds between retries: the n-th retry waits a random duration in
// [0, min(maxBackoff, baseBackoff<<n)).
const (
	baseBackoff = 2 * time.Millisecond
	maxBackoff  = 100 * time.Millisecond
)

// serializationFailure is SQLSTATE serialization_failure.
const serializationFailure = "40001"

// Adapter returns the `alt-serializable` adapter.
func Adapter() adapters.Adapter {
	return marker.PgxAdapter(Name, "alt_serializable_markers", marker.PlainIndex, deliver)
}

var serializable = pgx.TxOptions{IsoLevel: pgx.Serializable}

// deliver claims d's event and applies its effect at SERIALIZABLE, retrying
// the transaction on serialization failures.
func deliver(ctx context.Context, s *marker.Store, d adapters.Delivery, digest []byte) (adapters.Outcome, error) {
	for try := 1; ; try++ {
		outcome, err := s.InTx(ctx, serializable, func(tx pgx.Tx) (adapters.Outcome, error) {
			return s.ClaimOrClassify(ctx, tx, d, digest)
		})
		if !IsSerializationFailure(err) {
			return outcome, err
		}
		if try == MaxTries {
			return 0, fmt.Errorf("%s: %s attempt %d: still failing after %d tries: %w", Name, d.Event, d.Attempt, try, err)
		}
		if wait(ctx, try) != nil {
			return 0, fmt.Errorf("%s: %s attempt %d: stopped retrying after %d tries: %w (last: %v)", Name, d.Event, d.Attempt, try, context.Cause(ctx), err)
		}
	}
}

// IsSerializationFailure reports whether err is, or wraps, a PostgreSQL
// error with SQLSTATE 40001.
func IsSerializationFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == serializationFailure
}

// wait waits a random, exponentially growing time before retry n+1, or
// until ctx ends.
func wait(ctx context.Context, n int) error {
	ceiling := min(maxBackoff, baseBackoff<<min(n, 16))
	t := time.NewTimer(rand.N(ceiling))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
