package adapters

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// EffectHook runs inside [Effect.Apply] before the effect's INSERT. The
// harness uses it to inject Go-level faults into in-process implementations:
// it may return an error, panic, or cancel the delivery's context.
type EffectHook func(ctx context.Context, d Delivery) error

// Effect is the harness-owned database effect: one INSERT into the run's
// ledger table recording the event's namespace, id, payload digest and the
// delivery attempt.
//
// In-process Go implementations call [Effect.Apply] with a pgx.Tx or
// [Effect.ApplySQL] with a *sql.Tx. Implementations in other languages run
// [Effect.SQL] with [Effect.Args] through their own driver. Either way the
// effect must run in the transaction that claims the event's marker, and only
// when the claim succeeded.
type Effect struct {
	table string
	hook  EffectHook
}

// NewEffect returns the effect that inserts into table, a schema-qualified,
// already quoted table name. hook may be nil. Implementations do not call
// NewEffect; the harness does.
func NewEffect(table string, hook EffectHook) Effect {
	return Effect{table: table, hook: hook}
}

// Table is the quoted, schema-qualified ledger table the effect inserts into.
func (e Effect) Table() string { return e.table }

// SQL is the effect's statement, with PostgreSQL placeholders $1..$4 bound
// to [Effect.Args] in order: namespace (bytea), id (bytea), payload digest
// (text, hex SHA-256) and attempt (integer).
func (e Effect) SQL() string {
	return "INSERT INTO " + e.table + " (namespace, event_id, payload_digest, attempt) VALUES ($1, $2, $3, $4)"
}

// EffectParam names one argument of [Effect.SQL] and its PostgreSQL type.
type EffectParam struct {
	Name string
	Type string
}

// Params describes the arguments of [Effect.SQL], in placeholder order. Each
// value [Effect.Args] returns is a []byte for a bytea, a string for a text
// and an int32 for an int4.
func (e Effect) Params() []EffectParam {
	return []EffectParam{{"namespace", "bytea"}, {"event_id", "bytea"}, {"payload_digest", "text"}, {"attempt", "int4"}}
}

// Args are the arguments of [Effect.SQL] for delivery d.
func (e Effect) Args(d Delivery) []any {
	return []any{[]byte(d.Namespace), []byte(d.ID), PayloadDigest(d.Payload), int32(d.Attempt)}
}

// Apply executes the effect for d inside tx.
func (e Effect) Apply(ctx context.Context, tx pgx.Tx, d Delivery) error {
	if err := e.runHook(ctx, d); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, e.SQL(), e.Args(d)...); err != nil {
		return fmt.Errorf("apply effect of %s attempt %d: %w", d.Event, d.Attempt, err)
	}
	return nil
}

// ApplySQL executes the effect for d inside a database/sql transaction.
func (e Effect) ApplySQL(ctx context.Context, tx *sql.Tx, d Delivery) error {
	if err := e.runHook(ctx, d); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, e.SQL(), e.Args(d)...); err != nil {
		return fmt.Errorf("apply effect of %s attempt %d: %w", d.Event, d.Attempt, err)
	}
	return nil
}

func (e Effect) runHook(ctx context.Context, d Delivery) error {
	if e.hook == nil {
		return nil
	}
	if err := e.hook(ctx, d); err != nil {
		return fmt.Errorf("effect hook for %s attempt %d: %w", d.Event, d.Attempt, err)
	}
	return nil
}

// PayloadDigest is the hex SHA-256 digest of payload, as the ledger records
// it. Implementations may use it for their own conflict checks.
func PayloadDigest(payload []byte) string {
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:])
}
