package reference

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/external"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
	"github.com/harmless-dev/harmless/internal/adapters/outbox"
)

// Name is the reference adapter's name.
const Name = "reference"

// window is the redelivery window the reference adapter declares.
const window = 24 * time.Hour

// Adapter returns the `reference` adapter: a [Store] and an outbox (the
// harness's internal/adapters/outbox) per instance, each with its own
// connection pool, sharing one processed-events table and one outbox table
// in the play's schema ([adapters.Env.Schema]).
// Each instance runs a relay to [adapters.Env.Destination]; with no
// destination it writes no outbox rows and runs no relay.
func Adapter() adapters.Adapter {
	return adapters.Adapter{
		Name: Name,
		Declares: adapters.Declaration{
			ConflictPolicy:   adapters.RejectConflicts,
			RedeliveryWindow: window,
			AcceptsClock:     true,
			ExternalEffects:  adapters.Outbox,
		},
		New: newImplementation,
	}
}

type implementation struct {
	pool   *pgxpool.Pool
	store  *Store
	effect adapters.Effect
	outbox *outbox.Outbox // nil without a destination
	stop   context.CancelFunc
	relay  sync.WaitGroup
}

func newImplementation(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
	pool, err := kit.Pool(ctx, env.DSN)
	if err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	i := &implementation{pool: pool, store: NewStore(pool, Config{Schema: env.Schema, Now: env.Clock.Now}), effect: env.Effect, stop: func() {}}
	if env.Destination != "" {
		client := &http.Client{Timeout: external.DefaultTimeout}
		i.outbox = outbox.New(pool, outbox.Config{
			Schema: env.Schema,
			Now:    env.Clock.Now,
			Logf:   env.Logf,
			Send: func(ctx context.Context, key string, ev adapters.Event) error {
				return external.Send(ctx, client, env.Destination, key, ev)
			},
		})
	}
	if err := i.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("reference: %w", err)
	}
	if i.outbox != nil {
		// The relay outlives the construction's ctx: Close stops it.
		var relayCtx context.Context
		relayCtx, i.stop = context.WithCancel(context.WithoutCancel(ctx))
		i.relay.Go(func() { i.outbox.Run(relayCtx) })
	}
	return i, nil
}

func (i *implementation) migrate(ctx context.Context) error {
	if err := i.store.Migrate(ctx); err != nil {
		return err
	}
	if i.outbox != nil {
		return i.outbox.Migrate(ctx)
	}
	return nil
}

// Deliver claims the event, applies the database effect and writes the
// outbox row in one transaction, then wakes the relay.
func (i *implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	outcome, err := i.store.Process(ctx, d.Event, func(ctx context.Context, tx pgx.Tx) error {
		if err := i.effect.Apply(ctx, tx, d); err != nil {
			return err
		}
		if i.outbox == nil {
			return nil
		}
		return i.outbox.Add(ctx, tx, d.Event)
	})
	if outcome == adapters.Applied && i.outbox != nil {
		i.outbox.Wake()
	}
	return outcome, err
}

func (i *implementation) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	return i.store.Purge(ctx, cutoff)
}

// Drain waits until the outbox rows committed before the call have been
// sent.
func (i *implementation) Drain(ctx context.Context) error {
	if i.outbox == nil {
		return nil
	}
	return i.outbox.Drain(ctx)
}

// Close stops the relay without draining the outbox, as a process that is
// killed would: the rows it has not sent stay in the table for the next
// instance's relay. Then it closes the pool.
func (i *implementation) Close(context.Context) error {
	i.stop()
	i.relay.Wait()
	i.pool.Close()
	return nil
}
