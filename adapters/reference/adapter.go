package reference

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/internal/kit"
)

// Name is the reference adapter's name.
const Name = "reference"

// Window is the redelivery window the reference adapter declares.
const Window = 24 * time.Hour

// Adapter returns the `reference` adapter: a [Store] per instance, each with
// its own connection pool, sharing one processed-events table in the
// play's schema ([adapters.Env.Schema]).
func Adapter() adapters.Adapter {
	return adapters.Adapter{
		Name: Name,
		Declares: adapters.Declaration{
			ConflictPolicy:   adapters.RejectConflicts,
			RedeliveryWindow: Window,
			AcceptsClock:     true,
		},
		New: newImplementation,
	}
}

type implementation struct {
	pool   *pgxpool.Pool
	store  *Store
	effect adapters.Effect
}

func newImplementation(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
	pool, err := kit.Pool(ctx, env.DSN)
	if err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	store := NewStore(pool, Config{Schema: env.Schema, Now: env.Clock.Now})
	if err := store.Migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("reference: %w", err)
	}
	return &implementation{pool: pool, store: store, effect: env.Effect}, nil
}

func (i *implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	return i.store.Process(ctx, d.Event, func(ctx context.Context, tx pgx.Tx) error {
		return i.effect.Apply(ctx, tx, d)
	})
}

func (i *implementation) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	return i.store.Purge(ctx, cutoff)
}

func (i *implementation) Close(context.Context) error {
	i.pool.Close()
	return nil
}
