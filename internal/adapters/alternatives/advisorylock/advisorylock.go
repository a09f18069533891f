// Package advisorylock is the `alt-advisory-lock` adapter: check-then-insert
// with no unique constraint, made safe by a transaction-level advisory lock
// on the event's identity.
//
// # The technique
//
// The marker table has no unique key, only a plain index on
// (namespace, event_id) for the lookup. Each delivery runs one transaction
// at READ COMMITTED (asked for explicitly):
//
//	BEGIN ISOLATION LEVEL READ COMMITTED;
//	SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2)); -- namespace, id
//	SELECT payload_digest FROM markers WHERE namespace = $1 AND event_id = $2;
//	-- found: Duplicate (same digest) or Rejected (another digest)
//	-- not found:
//	INSERT INTO markers (...) VALUES (...);
//	INSERT INTO ledger ...;               -- the harness's effect
//	COMMIT;
//
// pg_advisory_xact_lock "obtains an exclusive transaction-level advisory
// lock, waiting if necessary" (PostgreSQL documentation, 9.27.10 Advisory
// Lock Functions), and "transaction-level lock requests ... are
// automatically released at the end of the transaction, and there is no
// explicit unlock operation" (13.3.5 Advisory Locks), so a panic, an error
// or a killed connection can never leave the lock held. The lock is
// keyed by the two-key form, (hashtext(namespace), hashtext(id)): the
// namespace and the id are hashed separately, so they are never joined into
// one string whose split would be ambiguous ("a:b" + "c" against
// "a" + "b:c").
//
// # Why it is correct
//
// Every delivery of one identity asks for the same lock, so at most one of
// them is between its lock and its COMMIT or ROLLBACK at any time: the
// check-then-insert runs alone for that identity.
//
// The waiters must also see what the holder committed. At READ COMMITTED "a
// SELECT query (without a FOR UPDATE/SHARE clause) sees only data committed
// before the query began", and "two successive SELECT commands can see
// different data, even though they are within a single transaction, if
// other transactions commit changes after the first SELECT starts and
// before the second SELECT starts" (13.2.1 Read Committed Isolation Level):
// each statement takes a fresh snapshot.
// The marker lookup is a statement after the one that waited for the lock,
// so its snapshot is taken after the lock was granted. PostgreSQL releases
// a transaction's locks only after its commit is visible to new snapshots
// (CommitTransaction in src/backend/access/transam/xact.c marks the
// transaction committed in the proc array before it releases its locks), so
// the lookup sees the previous holder's committed marker, or, if the
// holder rolled back, no marker, and claims the event itself. (At
// REPEATABLE READ or SERIALIZABLE the snapshot would be taken by the
// transaction's first statement, possibly before the lock wait, and the
// lookup could miss the winner's marker and claim the event a second time:
// this technique needs READ COMMITTED, which is why the adapter asks for it
// explicitly instead of relying on default_transaction_isolation.)
//
// hashtext returns a 32-bit integer, so two identities can map to the same
// lock. A collision only makes two unrelated events wait for each other; it
// never merges them, because the lookup compares the full namespace and id
// text, not the hashes.
//
// # Costs
//
//   - Waiting. Contenders of one event queue on the lock, each holding a
//     connection and an open transaction, for as long as the holder's
//     effect runs (250 ms per holder in the harness's overlapping rounds).
//     Nothing is redone, unlike alt-serializable.
//   - Advisory locks live in one lock space per database, shared with every
//     other application that uses them; an unrelated user of the same two
//     keys would contend (never corrupt). The two-key and single-key forms
//     do not overlap.
//   - Nothing in the schema enforces one marker per identity: any writer
//     that skips the lock can insert a second marker. The reference
//     adapter's unique key does not depend on every writer's discipline.
//   - hashtext is an internal, undocumented hash whose results may change
//     between major versions. That is harmless here: the lock only needs
//     every session of one running server to agree, and markers store the
//     identity, never the hash.
//   - Each waiter holds a lock slot; locks are bounded by
//     max_locks_per_transaction times max_connections, far above one lock
//     per delivery.
package advisorylock

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/internal/marker"
)

// Name is the adapter's name.
const Name = "alt-advisory-lock"

// Adapter returns the `alt-advisory-lock` adapter.
func Adapter() adapters.Adapter {
	return marker.PgxAdapter(Name, "alt_advisory_lock_markers", marker.PlainIndex, deliver)
}

// readCommitted is explicit rather than the server's default: the technique
// depends on each statement taking a fresh snapshot.
var readCommitted = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// deliver takes the identity's advisory lock, then claims d's event and
// applies its effect, in one transaction.
func deliver(ctx context.Context, s *marker.Store, d adapters.Delivery, digest []byte) (adapters.Outcome, error) {
	return s.InTx(ctx, readCommitted, func(tx pgx.Tx) (adapters.Outcome, error) {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))`, d.Namespace, d.ID); err != nil {
			return 0, fmt.Errorf("%s: lock %s: %w", Name, d.Event, err)
		}
		return s.ClaimOrClassify(ctx, tx, d, digest)
	})
}
