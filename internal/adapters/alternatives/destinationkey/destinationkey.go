// Package destinationkey is the `alt-destination-key` adapter: no outbox;
// the external effect is sent inside the claim's transaction, before
// COMMIT, with an idempotency key derived from the event's identity, and
// the destination deduplicates.
//
// # Why it is correct
//
// The request goes out after the claim succeeded and before COMMIT, with
// [external.Key] of the identity: the same key on every attempt, by every
// instance, after every restart.
//
//   - If the send fails (5xx, a dropped connection, the destination down),
//     the transaction rolls back, marker and database effect with it, and
//     Deliver returns the error: the broker redelivers, and the retry claims
//     the event again and sends the same key.
//   - If the destination processed the request but the answer was lost, or
//     the COMMIT fails after a successful send, or the process dies between
//     the two, the event is not claimed: its redelivery sends again with the
//     same key, and the destination replays its first answer instead of
//     making the effect a second time.
//   - Once COMMIT succeeded, the destination had already acknowledged the
//     effect: nothing is left to send, so there is nothing to lose.
//
// Duplicates and conflicting copies never reach the send: their claim fails.
//
// # Costs
//
// The transaction, its connection and the claim's row lock are held for the
// whole request, so a slow destination slows every delivery of the event
// and ties up connections. It rests entirely on the destination honouring
// keys for at least as long as the broker may redeliver. The reference's
// outbox (package reference) holds no transaction open across the network.
package destinationkey

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/external"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// Name is the adapter's name.
const Name = "alt-destination-key"

// Adapter returns the `alt-destination-key` adapter. It declares the
// reference's claims about the database, and destination-idempotency.
func Adapter() adapters.Adapter {
	declares := reference.Adapter().Declares
	declares.ExternalEffects = adapters.DestinationIdempotency
	return adapters.Adapter{Name: Name, Declares: declares, New: newImplementation}
}

type implementation struct {
	pool        *pgxpool.Pool
	store       *reference.Store
	effect      adapters.Effect
	destination string
	client      *http.Client
}

func newImplementation(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
	pool, err := kit.Pool(ctx, env.DSN)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	store := reference.NewStore(pool, reference.Config{Schema: env.Schema, Now: env.Clock.Now})
	if err := store.Migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	return &implementation{pool: pool, store: store, effect: env.Effect, destination: env.Destination,
		client: &http.Client{Timeout: external.DefaultTimeout}}, nil
}

// Deliver claims the event and, only if the claim succeeded, applies the
// database effect and sends the external one, all before COMMIT. Without a
// destination it sends nothing.
func (i *implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	return i.store.Process(ctx, d.Event, func(ctx context.Context, tx pgx.Tx) error {
		if err := i.effect.Apply(ctx, tx, d); err != nil {
			return err
		}
		if i.destination == "" {
			return nil
		}
		// A failure rolls the claim back: the redelivery sends again, with
		// the same key.
		return external.Send(ctx, i.client, i.destination, external.Key(d.Event), d.Event)
	})
}

func (i *implementation) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	return i.store.Purge(ctx, cutoff)
}

func (i *implementation) Close(context.Context) error {
	i.pool.Close()
	return nil
}
