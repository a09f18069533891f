// Package markerfirst is the `broken-marker-first` adapter: the marker is
// committed in its own transaction, before the effect runs in another.
//
// # The real-world bug
//
// Deduplication kept apart from the handler's work: record the message's
// key, then run the handler. watermill's middleware.Deduplicator records the
// key in its own store before calling the handler, so when the handler fails
// the redelivery finds the key and is dropped; the message is lost. The same
// shape appears whenever an idempotency store and the business database are
// written in separate transactions, marker first.
//
// # What goes wrong
//
// Transaction 1 claims the event (INSERT ... ON CONFLICT DO NOTHING
// RETURNING, on the reference's unique key) and commits. Transaction 2
// applies the effect and commits. If transaction 2 fails, the delivery
// correctly returns an error and is not acknowledged, but the marker is
// already committed: the broker's redelivery is answered Duplicate and the
// effect is never applied. Sequential and concurrent redeliveries of an event
// whose effect succeeded are handled correctly.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package markerfirst

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// Name is the adapter's name.
const Name = "broken-marker-first"

// Adapter returns the `broken-marker-first` adapter.
func Adapter() adapters.Adapter {
	return base.Adapter(Name, base.KeyedColumns, base.Wrap[implementation])
}

type implementation struct{ *base.Instance }

// Deliver commits the marker, then applies the effect in a second
// transaction.
func (i implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if err := kit.Validate(d.Event); err != nil {
		return 0, err
	}
	var claimed bool
	var outcome adapters.Outcome
	err := i.InTx(ctx, func(tx pgx.Tx) (err error) {
		if claimed, err = i.Claim(ctx, tx, d); err != nil || claimed {
			return err
		}
		outcome, err = i.Compare(ctx, tx, d)
		return err
	})
	switch {
	case err != nil:
		return 0, err
	case !claimed:
		return outcome, nil
	}
	// The bug: the marker is durable now, whatever happens to the effect.
	if err := i.InTx(ctx, func(tx pgx.Tx) error { return i.Effect.Apply(ctx, tx, d) }); err != nil {
		return 0, fmt.Errorf("effect of %s after its marker committed: %w", d.Event, err)
	}
	return adapters.Applied, nil
}
