// Package river certifies River (github.com/riverqueue/river) used as an
// idempotent consumer: the consumer inserts a follow-up job whose unique key
// is the event's identity, with InsertTx in the same transaction as the
// effect, and reads the outcome from UniqueSkippedAsDuplicate.
//
//harmless:library github.com/riverqueue/river
package river

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/harmless-dev/harmless/adapters"
)

// Name is the adapter's name.
const Name = "river"

// maxConns keeps each instance's pool small: several instances and
// concurrent deliveries share one server.
const maxConns = 4

// FollowUpArgs is the follow-up job a consumed event enqueues. Only the
// event's identity is tagged unique (River's UniqueOpts.ByArgs with
// `river:"unique"` fields), so the job's unique key is the identity, as
// River's docs recommend for deduplicating on a subset of the args; the
// payload digest travels with the job but does not take part.
type FollowUpArgs struct {
	Namespace     string `json:"namespace" river:"unique"`
	EventID       string `json:"event_id" river:"unique"`
	PayloadDigest string `json:"payload_digest"`
}

// Kind is the job's kind, part of River's unique key.
func (FollowUpArgs) Kind() string { return "harmless_follow_up" }

// uniqueOpts is River's default uniqueness by args: ByState is left unset,
// so River's default states apply (available, completed, pending, running,
// retryable, scheduled). With an insert-only client nothing works the jobs,
// so they stay available and keep blocking duplicates; no job cleaner runs.
var uniqueOpts = river.UniqueOpts{ByArgs: true}

// Adapter returns the River adapter. It declares nothing: River's unique
// key ignores the payload (no conflict policy), an insert-only client runs
// no maintenance that removes jobs (no window, no purger), and River stamps
// jobs with the database's now() and its own clock, not Env.Clock.
func Adapter() adapters.Adapter {
	return adapters.Adapter{Name: Name, New: newImplementation}
}

type implementation struct {
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
	effect adapters.Effect
}

func newImplementation(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
	cfg, err := pgxpool.ParseConfig(env.DSN)
	if err != nil {
		return nil, fmt.Errorf("river: parse DSN: %w", err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("river: connect: %w", err)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: env.Schema})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("river: migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		pool.Close()
		return nil, fmt.Errorf("river: migrate schema %q: %w", env.Schema, err)
	}
	// An insert-only client: no Queues, never started. Workers is omitted
	// too, since no worker of this process runs the follow-up jobs.
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: env.Schema})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("river: client: %w", err)
	}
	return &implementation{pool: pool, client: client, effect: env.Effect}, nil
}

// Deliver inserts the follow-up job with InsertTx and, unless River reports
// it skipped the insert as a duplicate, applies the effect in the same
// transaction and commits both.
func (i *implementation) Deliver(ctx context.Context, d adapters.Delivery) (outcome adapters.Outcome, err error) {
	tx, err := i.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("river: begin: %w", err)
	}
	defer func() {
		if rbErr := tx.Rollback(context.WithoutCancel(ctx)); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) && err == nil {
			err = fmt.Errorf("river: rollback: %w", rbErr)
		}
	}()
	args := FollowUpArgs{Namespace: d.Namespace, EventID: d.ID, PayloadDigest: adapters.PayloadDigest(d.Payload)}
	res, err := i.client.InsertTx(ctx, tx, args, &river.InsertOpts{UniqueOpts: uniqueOpts})
	if err != nil {
		return 0, fmt.Errorf("river: insert follow-up job for %s: %w", d.Event, err)
	}
	if res.UniqueSkippedAsDuplicate {
		// Nothing was written; the deferred rollback ends the transaction.
		return adapters.Duplicate, nil
	}
	if err := i.effect.Apply(ctx, tx, d); err != nil {
		return 0, fmt.Errorf("river: apply effect of %s: %w", d.Event, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("river: commit %s: %w", d.Event, err)
	}
	return adapters.Applied, nil
}

// Close closes the pool; the insert-only client was never started, so it
// has nothing to stop.
func (i *implementation) Close(context.Context) error {
	i.pool.Close()
	return nil
}
