package suite_test

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/suite"
)

// consumer adapts an implementation (here the reference Store, standing in
// for your own code) to the harness.
type consumer struct {
	pool   *pgxpool.Pool
	store  *reference.Store
	effect adapters.Effect
}

// Deliver runs the harness's effect inside the store's claiming transaction.
func (c consumer) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	return c.store.Process(ctx, d.Event, func(ctx context.Context, tx pgx.Tx) error {
		return c.effect.Apply(ctx, tx, d)
	})
}

func (c consumer) Close(context.Context) error {
	c.pool.Close()
	return nil
}

// An adapter declares what the implementation claims and builds instances
// of it in the environment the harness gives. In your own test, pass it to
// suite.Run (or, with options, suite.RunWith):
//
//	func TestDuplicateDeliveryIsHarmless(t *testing.T) {
//		suite.Run(t, adapter)
//	}
//
// In a Ginkgo suite of your own, register it instead, next to your specs:
//
//	var _ = suite.Register(adapter)
//
// From a program, certify it with suite.Certify(ctx, adapter).
func ExampleRun() {
	adapter := adapters.Adapter{
		Name: "my-consumer",
		Declares: adapters.Declaration{
			ConflictPolicy:   adapters.RejectConflicts,
			RedeliveryWindow: 7 * 24 * time.Hour,
		},
		New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
			pool, err := pgxpool.New(ctx, env.DSN)
			if err != nil {
				return nil, err
			}
			store := reference.NewStore(pool, reference.Config{Schema: env.Schema})
			if err := store.Migrate(ctx); err != nil {
				pool.Close()
				return nil, err
			}
			return consumer{pool: pool, store: store, effect: env.Effect}, nil
		},
	}
	_ = suite.Register // or suite.Run(t, adapter) from a test, or suite.Certify(ctx, adapter)
	_ = adapter
}
