// Package checktheninsert is the `broken-check-then-insert` adapter: the
// reference pattern without its unique constraint, so the claim is a
// check followed by an insert.
//
// # The real-world bug
//
// The most common hand-written deduplication: "if we have not seen this
// event, record it and process it", done with a SELECT and then an INSERT
// in one transaction, on a processed-events table that has no unique
// constraint on the event's identity (often one that has a plain index, or a
// surrogate primary key, and so looks keyed). It passes every sequential
// test. Under READ COMMITTED, which is PostgreSQL's default, a transaction
// does not see another's uncommitted marker, so two instances handed the same
// event at once both find nothing, both insert a marker and both apply the
// effect. The anchors list it first among the broken variants seen in the
// wild.
//
// # What goes wrong
//
// Sequential redeliveries are recognised (double-delivery passes), and a
// failure rolls marker and effect back together (failure-after-marker
// passes). Concurrent deliveries of one event apply it several times and
// are each answered Applied.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package checktheninsert

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
)

// Name is the adapter's name.
const Name = "broken-check-then-insert"

// Adapter returns the `broken-check-then-insert` adapter.
func Adapter() adapters.Adapter {
	// base.Columns: no unique key, which is the bug.
	return base.Adapter(Name, base.Columns, base.Wrap[implementation])
}

type implementation struct{ *base.Instance }

// Deliver checks for the marker, then inserts it and applies the effect, in
// one transaction but with nothing that stops a concurrent delivery from
// doing the same between the check and the insert.
func (i implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	return i.Process(ctx, d, i.checkThenInsert, i.Compare)
}

// checkThenInsert claims d's event if a SELECT finds no marker for it.
func (i implementation) checkThenInsert(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (bool, error) {
	if unseen, err := i.Unseen(ctx, tx, d); err != nil || !unseen {
		return false, err
	}
	if _, err := tx.Exec(ctx, i.Insert(), i.MarkerArgs(d)...); err != nil {
		return false, fmt.Errorf("insert marker of %s: %w", d.Event, err)
	}
	return true, nil
}
