// Package base holds what the broken adapters share, so that each of their
// packages shows only its bug: an instance's pool, effect and clock, its
// processed-events table, transaction handling, the reference's retention,
// and the reference pattern itself (claim and effect in one transaction),
// which most broken adapters follow but for one detail.
package base

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// Table is the unqualified name of every broken adapter's processed-events
// table, as in the reference.
const Table = kit.ProcessedEventsTable

// Columns are the reference's processed-events columns without any key: a
// table created from them alone has no unique constraint.
const Columns = `namespace      text        NOT NULL,
	event_id       text        NOT NULL,
	payload_digest bytea       NOT NULL,
	processed_at   timestamptz NOT NULL`

// KeyedColumns are the reference's processed-events columns with its unique
// key on (namespace, event_id).
const KeyedColumns = Columns + `,
	PRIMARY KEY (namespace, event_id)`

// NoTable, passed to [Adapter] as the columns, creates no table.
const NoTable = ""

// Declaration is what every broken adapter declares: the reference's
// claims about the database, which the bug then breaks. It declares no
// external effects: the adapters whose bug lies at that boundary declare
// theirs with [Declaring].
func Declaration() adapters.Declaration {
	d := reference.Adapter().Declares
	d.ExternalEffects = adapters.NoExternalEffects
	return d
}

// Declaring returns a with its declaration of external effects set to e.
func Declaring(a adapters.Adapter, e adapters.ExternalEffects) adapters.Adapter {
	a.Declares = declaring(e)
	return a
}

func declaring(e adapters.ExternalEffects) adapters.Declaration {
	d := Declaration()
	d.ExternalEffects = e
	return d
}

// Adapter returns the adapter called name, declaring [Declaration]. Its
// factory opens an [Instance] whose processed-events table has columns
// (none for [NoTable]) and hands it to wrap.
func Adapter[T adapters.Implementation](name, columns string, wrap func(*Instance) T) adapters.Adapter {
	return AdapterWith(name, columns, nil, wrap)
}

// AdapterWith is [Adapter] whose instances open their pools with
// configure applied to the configuration read from the DSN (see
// kit.PoolWith): for an adapter whose bug lies in how it connects, not in
// what it runs.
func AdapterWith[T adapters.Implementation](name, columns string, configure func(*pgxpool.Config), wrap func(*Instance) T) adapters.Adapter {
	return adapters.Adapter{
		Name:     name,
		Declares: Declaration(),
		New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
			inst, err := open(ctx, env, name, columns, configure)
			if err != nil {
				return nil, err
			}
			return wrap(inst), nil
		},
	}
}

// Wrap is the wrap function of [Adapter] for an implementation that is an
// [Instance] with some of its methods replaced.
func Wrap[T ~struct{ *Instance }](i *Instance) T { return T{i} }

// Instance is one instance of a broken adapter. It is safe for concurrent use.
// Embedding it gives an implementation Close, the reference's Purge and the
// reference pattern as Deliver; each broken adapter overrides what its bug
// changes.
type Instance struct {
	// Pool is the instance's own connection pool.
	Pool *pgxpool.Pool
	// Effect is the harness's effect.
	Effect adapters.Effect
	// Now is the harness's clock.
	Now func() time.Time
	// Markers is the quoted, schema-qualified processed-events table.
	Markers string
	// Env is the environment the instance was built from.
	Env adapters.Env
}

func open(ctx context.Context, env adapters.Env, name, columns string, configure func(*pgxpool.Config)) (*Instance, error) {
	pool, err := kit.PoolWith(ctx, env.DSN, configure)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	inst := &Instance{Pool: pool, Effect: env.Effect, Now: env.Clock.Now, Markers: kit.Table(env.Schema, Table), Env: env}
	if columns == NoTable {
		return inst, nil
	}
	// As the reference's Migrate: no lock on a table that exists, and
	// concurrent first setups are safe.
	index := Table + "_processed_at"
	for _, ddl := range []string{
		kit.CreateIfMissing(inst.Markers, `CREATE TABLE `+inst.Markers+` (
	`+columns+`
)`),
		kit.CreateIfMissing(kit.Table(env.Schema, index), `CREATE INDEX `+index+` ON `+inst.Markers+` (processed_at)`),
	} {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			pool.Close()
			return nil, fmt.Errorf("%s: create %s: %w", name, inst.Markers, err)
		}
	}
	return inst, nil
}

// Close closes the instance's pool.
func (i *Instance) Close(context.Context) error {
	i.Pool.Close()
	return nil
}

// Purge is the reference's retention: it deletes the markers claimed before
// cutoff and reports how many it deleted.
func (i *Instance) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	tag, err := i.Pool.Exec(ctx, `DELETE FROM `+i.Markers+` WHERE processed_at < $1`, cutoff)
	if err != nil {
		return 0, fmt.Errorf("purge %s before %s: %w", i.Markers, cutoff.Format(time.RFC3339Nano), err)
	}
	return tag.RowsAffected(), nil
}

// InTx runs fn in a transaction and commits it if fn returns nil. On every
// other path, including a panic in fn, the transaction is rolled back.
func (i *Instance) InTx(ctx context.Context, fn func(pgx.Tx) error) (err error) {
	tx, err := i.Pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if rbErr := tx.Rollback(context.WithoutCancel(ctx)); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) && err == nil {
			err = fmt.Errorf("rollback: %w", rbErr)
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// Deliver is the reference pattern: in one transaction, claim the event's
// identity with [Instance.Claim], apply the effect only if the claim
// succeeded, and commit; an identity already claimed is compared with
// [Instance.Compare].
func (i *Instance) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	return i.Process(ctx, d, i.Claim, i.Compare)
}

// ClaimFunc tries to claim d's event in tx and reports whether it did.
type ClaimFunc func(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (bool, error)

// ConflictFunc answers, in the claiming transaction, a delivery whose claim
// failed because its event was already claimed.
type ConflictFunc func(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (adapters.Outcome, error)

// Process validates d with the reference's identity check and runs
// [Instance.Transact].
func (i *Instance) Process(ctx context.Context, d adapters.Delivery, claim ClaimFunc, conflict ConflictFunc) (adapters.Outcome, error) {
	if err := kit.Validate(d.Event); err != nil {
		return 0, err
	}
	return i.Transact(ctx, d, claim, conflict)
}

// Transact runs the reference pattern with the given claim and conflict
// handling, without checking d's identity: one transaction claims, applies
// the effect if the claim succeeded (Applied) or asks conflict otherwise,
// and commits. It is for an adapter whose bug lies in what it accepts.
func (i *Instance) Transact(ctx context.Context, d adapters.Delivery, claim ClaimFunc, conflict ConflictFunc) (adapters.Outcome, error) {
	var outcome adapters.Outcome
	err := i.InTx(ctx, func(tx pgx.Tx) error {
		claimed, err := claim(ctx, tx, d)
		if err != nil {
			return err
		}
		if !claimed {
			outcome, err = conflict(ctx, tx, d)
			return err
		}
		outcome = adapters.Applied
		return i.Effect.Apply(ctx, tx, d)
	})
	if err != nil {
		return 0, err
	}
	return outcome, nil
}

// Insert is the INSERT of a marker for (namespace, event_id, payload_digest,
// processed_at) = ($1, $2, $3, $4); [Instance.MarkerArgs] are its arguments.
func (i *Instance) Insert() string {
	return `INSERT INTO ` + i.Markers + ` (namespace, event_id, payload_digest, processed_at) VALUES ($1, $2, $3, $4)`
}

// MarkerArgs are the arguments of [Instance.Insert] for d, stamped with the
// harness's clock.
func (i *Instance) MarkerArgs(d adapters.Delivery) []any {
	return []any{d.Namespace, d.ID, kit.Digest(d.Payload), i.Now()}
}

// Claim is the reference's claim: it inserts d's marker unless its
// (namespace, id) is already claimed, which needs the unique key of
// [KeyedColumns].
func (i *Instance) Claim(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (bool, error) {
	return ClaimWith(ctx, tx, d, i.Insert()+` ON CONFLICT (namespace, event_id) DO NOTHING RETURNING true`, i.MarkerArgs(d)...)
}

// ClaimWith runs claim, an INSERT ... ON CONFLICT DO NOTHING RETURNING
// statement, and reports whether it returned a row, that is whether it
// claimed d's event.
func ClaimWith(ctx context.Context, tx pgx.Tx, d adapters.Delivery, claim string, args ...any) (bool, error) {
	var claimed bool
	err := tx.QueryRow(ctx, claim, args...).Scan(&claimed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("claim %s: %w", d.Event, err)
	}
	return true, nil
}

// Lookup reads the stored digest of d's marker by (namespace, id) and
// classifies d against it with kit.Classify. found is false when there is
// no marker.
func (i *Instance) Lookup(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (outcome adapters.Outcome, found bool, err error) {
	return LookupWith(ctx, tx, d, `SELECT payload_digest FROM `+i.Markers+` WHERE namespace = $1 AND event_id = $2 LIMIT 1`, d.Namespace, d.ID)
}

// LookupWith is [Instance.Lookup] with query, which selects one stored
// payload digest.
func LookupWith(ctx context.Context, tx pgx.Tx, d adapters.Delivery, query string, args ...any) (outcome adapters.Outcome, found bool, err error) {
	var stored []byte
	err = tx.QueryRow(ctx, query, args...).Scan(&stored)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("read marker of %s: %w", d.Event, err)
	}
	return kit.Classify(stored, kit.Digest(d.Payload)), true, nil
}

// Unseen is a claim by looking: it reports whether d's event has no marker
// yet. It records nothing, so it does not stop a concurrent delivery from
// finding the event unseen too.
func (i *Instance) Unseen(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (bool, error) {
	_, found, err := i.Lookup(ctx, tx, d)
	return err == nil && !found, err
}

// Compare is the reference's conflict check: Duplicate for the payload the
// marker was claimed with, Rejected for another.
func (i *Instance) Compare(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (adapters.Outcome, error) {
	outcome, found, err := i.Lookup(ctx, tx, d)
	return MustFind(d, outcome, found, err)
}

// MustFind passes on the result of a lookup that must find d's marker
// because d's claim just failed: a missing marker (purged between the claim
// and the read) is an error, so the broker retries.
func MustFind(d adapters.Delivery, outcome adapters.Outcome, found bool, err error) (adapters.Outcome, error) {
	switch {
	case err != nil:
		return 0, err
	case !found:
		return 0, fmt.Errorf("marker of %s vanished during the conflict check; retry", d.Event)
	}
	return outcome, nil
}
