// Package txfunc is a consumer written from harmless's README alone, the
// way a user might write it with a library that owns the transaction:
// pgx.BeginTxFunc commits when the function returns nil and rolls back
// otherwise. The claim's result comes from the command tag instead of
// RETURNING. Package internal/outsider certifies it from a module of its
// own.
package txfunc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/suite"
)

type dedup struct {
	pool   *pgxpool.Pool
	schema string
	now    func() time.Time
	effect adapters.Effect
}

func (x *dedup) table() string { return pgx.Identifier{x.schema, "handled_events"}.Sanitize() }

func validID(namespace, id string) error {
	if id == "" || len(id) > 1024 || len(namespace) > 1024 {
		return errors.New("id must have 1 to 1024 bytes, the namespace at most 1024")
	}
	if !utf8.ValidString(namespace+id) || strings.ContainsRune(namespace+id, 0) {
		return errors.New("identity must be UTF-8 without NUL")
	}
	return nil
}

func (x *dedup) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if err := validID(d.Namespace, d.ID); err != nil {
		return 0, fmt.Errorf("%w: %v", adapters.ErrInvalidInput, err)
	}
	digest := sha256.Sum256(d.Payload)
	var outcome adapters.Outcome
	err := pgx.BeginTxFunc(ctx, x.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO `+x.table()+` (ns, id, digest, at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
			d.Namespace, d.ID, digest[:], x.now())
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			var stored []byte
			if err := tx.QueryRow(ctx, `SELECT digest FROM `+x.table()+` WHERE ns = $1 AND id = $2`, d.Namespace, d.ID).Scan(&stored); err != nil {
				return err
			}
			outcome = adapters.Duplicate
			if !bytes.Equal(stored, digest[:]) {
				outcome = adapters.Rejected
			}
			return nil
		}
		if err := x.effect.Apply(ctx, tx, d); err != nil {
			return err
		}
		outcome = adapters.Applied
		return nil
	})
	if err != nil {
		return 0, err
	}
	return outcome, nil
}

func (x *dedup) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	tag, err := x.pool.Exec(ctx, `DELETE FROM `+x.table()+` WHERE at < $1`, cutoff)
	return tag.RowsAffected(), err
}

func (x *dedup) Close(context.Context) error {
	x.pool.Close()
	return nil
}

func TestTxFunc(t *testing.T) {
	suite.RunWith(t, []suite.Option{suite.WithProvisioning("cluster")}, adapters.Adapter{
		Name: "tx-func",
		Declares: adapters.Declaration{
			ConflictPolicy:   adapters.RejectConflicts,
			RedeliveryWindow: 24 * time.Hour,
			AcceptsClock:     true,
		},
		New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
			cfg, err := pgxpool.ParseConfig(env.DSN)
			if err != nil {
				return nil, err
			}
			cfg.MaxConns = 20
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				return nil, err
			}
			x := &dedup{pool: pool, schema: env.Schema, now: env.Clock.Now, effect: env.Effect}
			_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+x.table()+` (
				ns     text NOT NULL,
				id     text NOT NULL,
				digest bytea NOT NULL,
				at     timestamptz NOT NULL,
				PRIMARY KEY (ns, id))`)
			if err != nil {
				pool.Close()
				return nil, err
			}
			return x, nil
		},
	})
}
