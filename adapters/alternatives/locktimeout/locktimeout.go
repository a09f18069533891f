// Package locktimeout is the `alt-lock-timeout` adapter: the reference
// pattern on connections whose lock_timeout is 10 ms, so that a delivery
// never waits long for another's claim; one that gives up returns an
// error, and the broker redelivers it.
//
// # Why it exists
//
// Many teams never let a consumer block on a lock: a short lock_timeout,
// NOWAIT or SKIP LOCKED turns a busy event into a quick failure, and the
// broker's redelivery does the waiting. That is correct as long as a
// delivery that gave up is not acknowledged (broken-busy-is-duplicate is
// the same code answering Duplicate instead). harmless must certify it:
// its contenders fail fast instead of waiting, and the deliveries that
// crash-recovery holds behind a lock give up before the crash, so a rule
// may find nothing in flight to judge, which is inconclusive, never a
// failure. The verdict matrix expects it to pass every fixture.
//
// # What it does
//
// It is the reference's Store (package reference) on a pool whose
// connections set lock_timeout, as a user would in the pool's
// configuration. Its tables are created on a connection without the
// timeout, so that a migration waits for deliveries in flight rather than
// fail the instance.
package locktimeout

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
)

// Name is the adapter's name.
const Name = "alt-lock-timeout"

// LockTimeout is how long a statement waits for a lock before it fails
// with SQLSTATE 55P03, and the delivery with it.
const LockTimeout = 10 * time.Millisecond

// maxConns is the pool's size: enough for every delivery harmless makes
// to one instance at once.
const maxConns = 32

// Adapter returns the `alt-lock-timeout` adapter. It declares what the
// reference declares.
func Adapter() adapters.Adapter {
	return adapters.Adapter{
		Name:     Name,
		Declares: reference.Adapter().Declares,
		New:      newImplementation,
	}
}

type implementation struct {
	pool   *pgxpool.Pool
	store  *reference.Store
	effect adapters.Effect
}

func newImplementation(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
	cfg := reference.Config{Schema: env.Schema, Now: env.Clock.Now}
	if err := migrate(ctx, env.DSN, cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	poolCfg, err := pgxpool.ParseConfig(env.DSN)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	poolCfg.MaxConns = maxConns
	poolCfg.ConnConfig.RuntimeParams["lock_timeout"] = fmt.Sprintf("%dms", LockTimeout.Milliseconds())
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	return &implementation{pool: pool, store: reference.NewStore(pool, cfg), effect: env.Effect}, nil
}

// migrate creates the tables on a pool of one connection without the lock
// timeout.
func migrate(ctx context.Context, dsn string, cfg reference.Config) error {
	poolCfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	poolCfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	return reference.NewStore(pool, cfg).Migrate(ctx)
}

// Deliver is the reference's transaction; a claim that waited longer than
// LockTimeout fails it, unacknowledged.
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
