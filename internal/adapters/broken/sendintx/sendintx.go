// Package sendintx is the `broken-send-in-tx` adapter: the external effect
// is sent inside the claim's transaction, with a fresh idempotency key on
// every attempt.
//
// # The real-world bug
//
// A handler calls the payment or email API in the middle of its database
// transaction and, to "be idempotent", passes an idempotency key it makes
// up on the spot (a new UUID per call, the default of many client
// libraries and of code that copies the API's quick-start). The key
// protects one HTTP call against the client library's own retries, never
// the handler: when the transaction rolls back after the call and the
// message is redelivered, the retry sends a new key and the destination
// charges again.
//
// # What goes wrong
//
// After a successful claim, before the database effect and COMMIT, the
// request goes out with a random key. If the effect or the COMMIT then
// fails, or the answer is lost, the claim rolls back and the redelivery
// sends again with another key: two effects at the destination for one
// applied event.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package sendintx

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
)

// Name is the adapter's name.
const Name = "broken-send-in-tx"

// Adapter returns the `broken-send-in-tx` adapter. It declares
// destination-idempotency.
func Adapter() adapters.Adapter {
	return base.Declaring(base.Adapter(Name, base.KeyedColumns, base.Wrap[implementation]), adapters.DestinationIdempotency)
}

type implementation struct{ *base.Instance }

// Deliver sends the effect right after a successful claim, in the claim's
// transaction, with a key made up for this attempt.
func (i implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	return i.Process(ctx, d, func(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (bool, error) {
		claimed, err := i.Claim(ctx, tx, d)
		if err != nil || !claimed {
			return claimed, err
		}
		// The bug: a key for this attempt, not for the event.
		return true, i.Send(ctx, base.RandomKey(), d.Event)
	}, i.Compare)
}
