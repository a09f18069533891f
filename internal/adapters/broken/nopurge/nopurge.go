// Package nopurge is the `broken-no-purge` adapter: the reference pattern,
// declaring a redelivery window but never removing a marker.
//
// # The real-world bug
//
// Deduplication state kept forever. Eventuate Tram's inbox keeps its rows
// with no retention at all, and dtm-labs' branch barrier leaves cleanup to a
// DBA's cron job: where nobody writes one, nothing is ever removed. The
// table grows without bound, slows every claim, and keeps recognising
// events long after the broker stopped redelivering them, so a producer
// that reuses an id after the window has its new event dropped as a
// Duplicate.
//
// # What goes wrong
//
// It declares the reference's redelivery window, but Purge deletes nothing
// and reports 0. Deliveries are handled exactly as by the reference.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package nopurge

import (
	"context"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
)

// Name is the adapter's name.
const Name = "broken-no-purge"

// Adapter returns the `broken-no-purge` adapter.
func Adapter() adapters.Adapter {
	return base.Adapter(Name, base.KeyedColumns, base.Wrap[implementation])
}

type implementation struct{ *base.Instance }

// Purge removes nothing.
func (implementation) Purge(context.Context, time.Time) (int64, error) { return 0, nil }
