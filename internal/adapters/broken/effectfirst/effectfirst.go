// Package effectfirst is the `broken-effect-first` adapter: the effect is
// committed in its own transaction, and the marker only afterwards in
// another.
//
// # The real-world bug
//
// "Process, then remember": the handler does its work and commits, and only
// then is the message recorded as processed, in a second transaction or a
// separate store (a cache, another database). It is the mirror image of
// recording the key first (watermill's Deduplicator): it never loses an
// event, but nothing makes the pair atomic. A crash, a killed connection or
// a failed second commit between the two leaves the effect without its
// marker, and the redelivery applies the event again; and because the check
// is a plain SELECT, two concurrent deliveries both find no marker and both
// apply.
//
// # What goes wrong
//
// Transaction 1 looks for the marker (found: Duplicate or Rejected), applies
// the effect and commits. Transaction 2 inserts the marker (INSERT ... ON
// CONFLICT DO NOTHING, on the reference's unique key) and commits. A failure
// of transaction 2 returns an error, so the broker redelivers, and the
// redelivery applies the effect a second time. Sequential redeliveries after
// a success, and failures inside transaction 1, are handled correctly.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package effectfirst

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
)

// Name is the adapter's name.
const Name = "broken-effect-first"

// Adapter returns the `broken-effect-first` adapter.
func Adapter() adapters.Adapter {
	return base.Adapter(Name, base.KeyedColumns, base.Wrap[implementation])
}

type implementation struct{ *base.Instance }

// Deliver applies the effect if no marker is found and commits it, then
// records the marker in a second transaction.
func (i implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	outcome, err := i.Process(ctx, d, i.Unseen, i.Compare)
	if err != nil || outcome != adapters.Applied {
		return outcome, err
	}
	// The bug: the effect is durable now; a failure from here on leaves it
	// without a marker.
	if err := i.InTx(ctx, func(tx pgx.Tx) error { _, err := i.Claim(ctx, tx, d); return err }); err != nil {
		return 0, fmt.Errorf("marker of %s after its effect committed: %w", d.Event, err)
	}
	return adapters.Applied, nil
}
