// Package timebucketed is the `broken-time-bucketed-key` adapter: the
// reference pattern with the claim's UTC day in the marker's unique key.
//
// # The real-world bug
//
// A processed-events table grows with every event, and the cheap way to
// bound it is to partition it by day and drop the old partitions. But
// PostgreSQL requires a unique constraint on a partitioned table to
// include the partition key, so the key becomes (namespace, event_id,
// processed_on). The same happens without partitions where a key is built
// as "namespace:id:2031-05-06" to make a daily cleanup a prefix scan. Each
// day then has its own set of claims.
//
// # What goes wrong
//
// A redelivery on the day of its claim is Duplicate, as it should be. One
// that comes after midnight UTC, well inside the declared redelivery
// window, finds no claim for its day: it is Applied again, a second
// effect. Tests that start at midnight and last a few minutes never see
// it.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package timebucketed

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
)

// Name is the adapter's name.
const Name = "broken-time-bucketed-key"

// columns are the reference's processed-events columns with the claim's
// UTC day, which is in the unique key: the bug.
const columns = base.Columns + `,
	processed_on   date        NOT NULL,
	PRIMARY KEY (namespace, event_id, processed_on)`

// Adapter returns the `broken-time-bucketed-key` adapter.
func Adapter() adapters.Adapter {
	return base.Adapter(Name, columns, base.Wrap[implementation])
}

type implementation struct{ *base.Instance }

// Deliver is the reference pattern, claiming and comparing within the
// claim's UTC day.
func (i implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	return i.Process(ctx, d, i.claim, i.compare)
}

// day is the UTC day of now on the harness's clock, as a date.
func (i implementation) day() string { return i.Now().UTC().Format("2006-01-02") }

func (i implementation) claim(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (bool, error) {
	args := append(i.MarkerArgs(d), i.day())
	return base.ClaimWith(ctx, tx, d, `INSERT INTO `+i.Markers+` (namespace, event_id, payload_digest, processed_at, processed_on)
VALUES ($1, $2, $3, $4, $5::date) ON CONFLICT (namespace, event_id, processed_on) DO NOTHING RETURNING true`, args...)
}

func (i implementation) compare(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (adapters.Outcome, error) {
	outcome, found, err := base.LookupWith(ctx, tx, d, `SELECT payload_digest FROM `+i.Markers+`
WHERE namespace = $1 AND event_id = $2 AND processed_on = $3::date`, d.Namespace, d.ID, i.day())
	return base.MustFind(d, outcome, found, err)
}
