// Package nonamespace is the `broken-no-namespace` adapter: the reference
// pattern with a marker keyed by the event's id alone.
//
// # The real-world bug
//
// An event's id is unique only within its namespace (its topic, tenant,
// producer or event type), but the processed-events table is keyed by the
// id alone: a consumer that grew from one topic to several, an inbox shared
// by several handlers, or a message id that is a per-producer sequence
// number. The first event of one namespace then shadows every event of
// another namespace that happens to share its id.
//
// # What goes wrong
//
// The marker table has no namespace column; its unique key is event_id. A
// new event whose id was already claimed in another namespace is never
// applied: it is answered Duplicate (or Rejected, if its payload differs),
// and the event is lost. Within one namespace the adapter is the reference.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package nonamespace

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// Name is the adapter's name.
const Name = "broken-no-namespace"

// columns are the reference's, without the namespace: the bug.
const columns = `event_id       text        PRIMARY KEY,
	payload_digest bytea       NOT NULL,
	processed_at   timestamptz NOT NULL`

// Adapter returns the `broken-no-namespace` adapter.
func Adapter() adapters.Adapter {
	return base.Adapter(Name, columns, base.Wrap[implementation])
}

type implementation struct{ *base.Instance }

// Deliver is the reference pattern, claiming and comparing by id alone.
func (i implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	return i.Process(ctx, d, i.claim, i.compare)
}

func (i implementation) claim(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (bool, error) {
	return base.ClaimWith(ctx, tx, d, `INSERT INTO `+i.Markers+` (event_id, payload_digest, processed_at)
VALUES ($1, $2, $3) ON CONFLICT (event_id) DO NOTHING RETURNING true`, d.ID, kit.Digest(d.Payload), i.Now())
}

func (i implementation) compare(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (adapters.Outcome, error) {
	outcome, found, err := base.LookupWith(ctx, tx, d, `SELECT payload_digest FROM `+i.Markers+` WHERE event_id = $1`, d.ID)
	return base.MustFind(d, outcome, found, err)
}
