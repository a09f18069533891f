// Package casefolded is the `broken-case-folded` adapter: the reference
// pattern with the id lower-cased on its way into the marker.
//
// # The real-world bug
//
// Ids come from systems that disagree about case: hex digests and GUIDs
// printed in upper or lower case, email addresses, codes typed by people.
// To recognise "the same" id in another case, the claim stores lower(id),
// or the column is citext, or it has a case-insensitive collation. But an
// event's id is case-sensitive in general: base64 and base62 ids (Stripe's
// object ids and YouTube's video ids among them) use both cases, and two of
// them may differ only in case.
//
// # What goes wrong
//
// Ids that differ only in letter case, Order-7 and order-7, get one
// marker: the first is applied, the second is answered Duplicate and its
// effect is lost, without an error. Every id the other fixtures send is in
// lower case already, so they all pass.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package casefolded

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
)

// Name is the adapter's name.
const Name = "broken-case-folded"

// Adapter returns the `broken-case-folded` adapter.
func Adapter() adapters.Adapter {
	return base.Adapter(Name, base.KeyedColumns, base.Wrap[implementation])
}

type implementation struct{ *base.Instance }

// Deliver is the reference pattern, claiming and comparing by the
// lower-cased id.
func (i implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	return i.Process(ctx, d, i.claim, i.compare)
}

// claim is the reference's claim with lower() on the id: the bug.
func (i implementation) claim(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (bool, error) {
	return base.ClaimWith(ctx, tx, d, `INSERT INTO `+i.Markers+` (namespace, event_id, payload_digest, processed_at)
VALUES ($1, lower($2), $3, $4) ON CONFLICT (namespace, event_id) DO NOTHING RETURNING true`, i.MarkerArgs(d)...)
}

func (i implementation) compare(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (adapters.Outcome, error) {
	outcome, found, err := base.LookupWith(ctx, tx, d, `SELECT payload_digest FROM `+i.Markers+` WHERE namespace = $1 AND event_id = lower($2)`, d.Namespace, d.ID)
	return base.MustFind(d, outcome, found, err)
}
