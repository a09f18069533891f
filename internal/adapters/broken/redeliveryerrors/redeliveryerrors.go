// Package redeliveryerrors is the `broken-redelivery-errors` adapter: the
// effect and then a plain INSERT of the marker in one transaction, so that
// the unique key stops a second effect by failing the redelivery.
//
// # The real-world bug
//
// "Let the constraint catch it": the handler does its work, then records
// the message as processed with a plain INSERT into a table whose primary
// key is the message's id, in the same transaction, trusting the key to
// stop a duplicate. It does stop the duplicate's effect: the INSERT fails
// with a unique violation (SQLSTATE 23505) and the transaction rolls back.
// But the violation goes up as an error like any other, so a redelivered
// message is never acknowledged: the broker redelivers it until its retry
// limit and dead-letters a message that was handled long ago, and someone
// is paged for it. A payload that conflicts with the recorded one fails
// the same way, told apart from a plain duplicate by nothing.
//
// # What goes wrong
//
// One transaction applies the effect, then inserts the marker (no ON
// CONFLICT, on the reference's unique key) and commits. The first delivery
// of an event is Applied, with one effect. Every later delivery of it
// errors with the unique violation and rolls its effect back: no second
// effect, and no Duplicate or Rejected either. A delivery that overlaps the
// first waits on its uncommitted marker and fails the same way once it
// commits.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package redeliveryerrors

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// Name is the adapter's name.
const Name = "broken-redelivery-errors"

// Adapter returns the `broken-redelivery-errors` adapter.
func Adapter() adapters.Adapter {
	return base.Adapter(Name, base.KeyedColumns, base.Wrap[implementation])
}

type implementation struct{ *base.Instance }

// Deliver applies the effect and inserts the marker in one transaction,
// and answers Applied when it commits. The bug: a marker that is there
// already fails the INSERT, and that is returned as the delivery's error.
func (i implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if err := kit.Validate(d.Event); err != nil {
		return 0, err
	}
	err := i.InTx(ctx, func(tx pgx.Tx) error {
		if err := i.Effect.Apply(ctx, tx, d); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, i.Insert(), i.MarkerArgs(d)...); err != nil {
			return fmt.Errorf("record %s as processed: %w", d.Event, err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return adapters.Applied, nil
}
