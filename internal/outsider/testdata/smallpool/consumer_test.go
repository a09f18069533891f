// Package smallpool is a consumer written from harmless's README alone, the
// way a user might write it: its own table and names, the importable
// identity checks, and a pool of 2 connections where the README asks for
// one per delivery in flight. Package internal/outsider certifies it from a
// module of its own.
package smallpool

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/suite"
)

type inbox struct {
	pool   *pgxpool.Pool
	table  string
	clock  adapters.Clock
	effect adapters.Effect
}

func openInbox(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
	cfg, err := pgxpool.ParseConfig(env.DSN)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	table := pgx.Identifier{env.Schema, "inbox"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (
		topic   text NOT NULL,
		msg_id  text NOT NULL,
		sha256  bytea NOT NULL,
		seen_at timestamptz NOT NULL,
		UNIQUE (topic, msg_id))`); err != nil {
		pool.Close()
		return nil, err
	}
	return &inbox{pool: pool, table: table, clock: env.Clock, effect: env.Effect}, nil
}

func (in *inbox) Deliver(ctx context.Context, d adapters.Delivery) (outcome adapters.Outcome, err error) {
	if err := adapters.CheckIdentity(d.Event); err != nil {
		return 0, err
	}
	sum := sha256.Sum256(d.Payload)
	tx, err := in.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() {
		if rbErr := tx.Rollback(context.WithoutCancel(ctx)); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) && err == nil {
			err = rbErr
		}
	}()
	var one int
	err = tx.QueryRow(ctx, `INSERT INTO `+in.table+` (topic, msg_id, sha256, seen_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (topic, msg_id) DO NOTHING RETURNING 1`, d.Namespace, d.ID, sum[:], in.clock.Now()).Scan(&one)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		var stored []byte
		if err := tx.QueryRow(ctx, `SELECT sha256 FROM `+in.table+` WHERE topic = $1 AND msg_id = $2`, d.Namespace, d.ID).Scan(&stored); err != nil {
			return 0, fmt.Errorf("look up %s: %w", d.Event, err)
		}
		if bytes.Equal(stored, sum[:]) {
			return adapters.Duplicate, nil
		}
		return adapters.Rejected, nil
	case err != nil:
		return 0, fmt.Errorf("claim %s: %w", d.Event, err)
	}
	if err := in.effect.Apply(ctx, tx, d); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return adapters.Applied, nil
}

func (in *inbox) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	tag, err := in.pool.Exec(ctx, `DELETE FROM `+in.table+` WHERE seen_at < $1`, cutoff)
	return tag.RowsAffected(), err
}

func (in *inbox) Close(context.Context) error {
	in.pool.Close()
	return nil
}

func TestSmallPool(t *testing.T) {
	suite.RunWith(t, []suite.Option{suite.WithProvisioning("cluster")}, adapters.Adapter{
		Name: "small-pool",
		Declares: adapters.Declaration{
			ConflictPolicy:   adapters.RejectConflicts,
			RedeliveryWindow: 72 * time.Hour,
			AcceptsClock:     true,
		},
		New: openInbox,
	})
}
