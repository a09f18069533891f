// Package busyisduplicate is the `broken-busy-is-duplicate` adapter: the
// reference pattern, except that its claim waits at most a short
// lock_timeout for another delivery's uncommitted claim of the same event,
// and a claim that times out is answered Duplicate.
//
// # The real-world bug
//
// A consumer that finds an event busy, because another instance's
// transaction holds its claim, does not want to block: it sets a short
// lock_timeout (or uses NOWAIT, pg_try_advisory_xact_lock, or SELECT ...
// FOR UPDATE SKIP LOCKED on a marker row) and reads "busy" as "someone else is
// handling it, so it is handled": it acknowledges the delivery as a
// duplicate. That holds only if the other instance commits. The claim it
// found was not yet a fact: when the claimant then fails (its effect
// errors, its COMMIT fails, its connection or the server dies), the claim
// rolls back with it. The broker has an acknowledgement for the message
// from the busy instance, so it redelivers nothing, and the event is lost:
// no instance applied it, every copy was acknowledged.
//
// Anything else that holds a lock the claim needs looks just as busy: a
// migration that locks the table, say, has every delivery meanwhile
// acknowledged as a duplicate, and lost.
//
// # What goes wrong
//
// Every sequential fixture passes, and so do concurrent deliveries whose
// claimant commits: the copies that gave up waiting are answered Duplicate
// and the claimant applies the event once. When the claimant fails while
// the others have given up, the event has no effect. A conflicting copy
// delivered while the first is in flight also gives up and is answered
// Duplicate, never compared with the stored payload. And a delivery that
// waits on the harness's own lock on the marker table (crash-recovery's
// write hold) gives up and is answered Duplicate, without an effect.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package busyisduplicate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
)

// Name is the adapter's name.
const Name = "broken-busy-is-duplicate"

// LockTimeout is how long a claim waits for another delivery's claim of the
// same event before it takes the event for busy.
const LockTimeout = 10 * time.Millisecond

// lockNotAvailable is SQLSTATE lock_not_available, which an expired
// lock_timeout raises.
const lockNotAvailable = "55P03"

// errBusy marks a claim that gave up waiting for another delivery's claim.
var errBusy = errors.New("the event is busy: another delivery holds its claim")

// Adapter returns the `broken-busy-is-duplicate` adapter.
func Adapter() adapters.Adapter {
	return base.Adapter(Name, base.KeyedColumns, base.Wrap[implementation])
}

type implementation struct{ *base.Instance }

// Deliver is the reference pattern with a claim that gives up after
// LockTimeout, and the bug: a delivery that gave up is acknowledged as
// Duplicate, as if the claim it found were committed.
func (i implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	outcome, err := i.Process(ctx, d, i.claimUnlessBusy, i.Compare)
	if errors.Is(err, errBusy) {
		return adapters.Duplicate, nil
	}
	return outcome, err
}

// claimUnlessBusy is the reference's claim under a short lock_timeout; it
// returns an error wrapping errBusy when the timeout expired.
func (i implementation) claimUnlessBusy(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (bool, error) {
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", LockTimeout.Milliseconds())); err != nil {
		return false, fmt.Errorf("set lock_timeout: %w", err)
	}
	claimed, err := i.Claim(ctx, tx, d)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == lockNotAvailable {
		return false, fmt.Errorf("%w: %w", errBusy, err)
	}
	return claimed, err
}
