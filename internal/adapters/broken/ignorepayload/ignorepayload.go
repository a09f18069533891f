// Package ignorepayload is the `broken-ignore-payload` adapter: the
// reference pattern, except that a delivery whose identity is already
// claimed is always a Duplicate, whatever its payload.
//
// # The real-world bug
//
// Keying on the identity alone and never looking at the payload. dtm-labs'
// branch barrier and riverqueue's unique jobs have no payload check at all;
// AWS Lambda Powertools' idempotency utility validates a payload hash, but
// its fast path skipped that validation in three of its language ports, so
// a reused key with a different request was answered with the first
// request's result. Stripe and the IETF Idempotency-Key draft answer such a
// request with 422.
//
// # What goes wrong
//
// The adapter declares the conflict policy "reject", falsely: a delivery
// that reuses a claimed identity with a different payload is acknowledged as
// Duplicate and silently dropped, so the producer never learns that two
// different events collided on one id. Everything else is the reference's.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package ignorepayload

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
)

// Name is the adapter's name.
const Name = "broken-ignore-payload"

// Adapter returns the `broken-ignore-payload` adapter. It declares
// [adapters.RejectConflicts], which it does not honour.
func Adapter() adapters.Adapter {
	return base.Adapter(Name, base.KeyedColumns, base.Wrap[implementation])
}

type implementation struct{ *base.Instance }

// Deliver is the reference pattern without the conflict check.
func (i implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	return i.Process(ctx, d, i.Claim, alwaysDuplicate)
}

// alwaysDuplicate answers every delivery of a claimed identity without
// reading the stored digest: the bug.
func alwaysDuplicate(context.Context, pgx.Tx, adapters.Delivery) (adapters.Outcome, error) {
	return adapters.Duplicate, nil
}
