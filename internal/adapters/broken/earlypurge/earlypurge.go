// Package earlypurge is the `broken-early-purge` adapter: the reference
// pattern, with a retention shorter than the redelivery window it declares.
//
// # The real-world bug
//
// Deduplication state removed while the broker may still redeliver. The
// retention of a processed-events table is rarely derived from the broker's
// redelivery window: dtm-labs' branch barrier leaves it to a DBA's cron job,
// inbox retentions range from 30 minutes to 7 days (NServiceBus,
// MassTransit), and watermill's Deduplicator forgets a key after one minute.
// A cleanup that keeps markers for half the window, or a cron job written
// against "yesterday" in the wrong time zone, looks harmless until a broker
// redelivers a message from the second half of the window.
//
// # What goes wrong
//
// It declares the reference's redelivery window, but Purge(cutoff) deletes
// the markers claimed before cutoff + window/2: markers still inside the
// declared window are removed, and a redelivery of their event is applied
// again. Deliveries are handled exactly as by the reference.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package earlypurge

import (
	"context"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
)

// Name is the adapter's name.
const Name = "broken-early-purge"

// Adapter returns the `broken-early-purge` adapter.
func Adapter() adapters.Adapter {
	return base.Adapter(Name, base.KeyedColumns, base.Wrap[implementation])
}

type implementation struct{ *base.Instance }

// Purge deletes the markers claimed before cutoff + window/2, half a window
// too many.
func (i implementation) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	return i.Instance.Purge(ctx, cutoff.Add(base.Declaration().RedeliveryWindow/2))
}
