// Package effect is the harness's side of [adapters.Effect]: the effect's
// statement, the Go hook that injects faults into it, and the way the exec
// adapter takes the statement to another process.
//
// It lives outside package adapters because none of it is for implementers:
// an implementation only calls [adapters.Effect]'s Apply or ApplySQL, and
// only the harness builds an effect. Package adapters does not import this
// package, so there is no import cycle and no registration between the two;
// [Effect] satisfies the [adapters.Effect] interface.
package effect

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
)

// Hook runs inside Apply and ApplySQL before the effect's INSERT. The
// harness uses it to inject Go-level faults into in-process implementations:
// it may return an error, panic, or cancel the delivery's context.
type Hook func(ctx context.Context, d adapters.Delivery) error

// Effect is the harness-owned database effect: one INSERT into a spec's
// ledger table recording the event's namespace, id, payload digest and the
// delivery attempt.
type Effect struct {
	table string
	hook  Hook
}

var _ adapters.Effect = Effect{}

// New returns the effect that inserts into table, a schema-qualified,
// already quoted table name. hook may be nil.
func New(table string, hook Hook) Effect {
	return Effect{table: table, hook: hook}
}

// Table is the quoted, schema-qualified ledger table the effect inserts into.
func (e Effect) Table() string { return e.table }

// SQL is the effect's statement, with PostgreSQL placeholders $1..$4 bound
// to [Effect.Args] in order, as [Params] describes them. The exec adapter
// sends it to an implementation in another language, which runs it through
// its own driver.
func (e Effect) SQL() string {
	return "INSERT INTO " + e.table + " (namespace, event_id, payload_digest, attempt) VALUES ($1, $2, $3, $4)"
}

// Param names one argument of [Effect.SQL] and its PostgreSQL type.
type Param struct {
	Name string
	Type string
}

// Params describes the arguments of [Effect.SQL], in placeholder order. Each
// value [Effect.Args] returns is a []byte for a bytea, a string for a text
// and an int32 for an int4. They are the same for every effect.
func Params() []Param {
	return []Param{{"namespace", "bytea"}, {"event_id", "bytea"}, {"payload_digest", "text"}, {"attempt", "int4"}}
}

// Args are the arguments of [Effect.SQL] for delivery d.
func (e Effect) Args(d adapters.Delivery) []any {
	return []any{[]byte(d.Namespace), []byte(d.ID), adapters.PayloadDigest(d.Payload), int32(d.Attempt)}
}

// Apply executes the effect for d inside tx.
func (e Effect) Apply(ctx context.Context, tx pgx.Tx, d adapters.Delivery) error {
	if err := e.runHook(ctx, d); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, e.SQL(), e.Args(d)...); err != nil {
		return fmt.Errorf("apply effect of %s attempt %d: %w", d.Event, d.Attempt, err)
	}
	return nil
}

// ApplySQL executes the effect for d inside a database/sql transaction.
func (e Effect) ApplySQL(ctx context.Context, tx *sql.Tx, d adapters.Delivery) error {
	if err := e.runHook(ctx, d); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, e.SQL(), e.Args(d)...); err != nil {
		return fmt.Errorf("apply effect of %s attempt %d: %w", d.Event, d.Attempt, err)
	}
	return nil
}

func (e Effect) runHook(ctx context.Context, d adapters.Delivery) error {
	if e.hook == nil {
		return nil
	}
	if err := e.hook(ctx, d); err != nil {
		return fmt.Errorf("effect hook for %s attempt %d: %w", d.Event, d.Attempt, err)
	}
	return nil
}

// Of returns the harness's effect behind an [adapters.Env]'s Effect, and
// false when env.Effect was not built by the harness (a caller that built
// its own Env, e.g. in a unit test).
func Of(e adapters.Effect) (Effect, bool) {
	eff, ok := e.(Effect)
	return eff, ok
}

// Remote is implemented by an implementation that runs the effect's
// statement in another process (package adapters/exec) instead of calling
// Apply. The harness's Go hook cannot reach such an implementation, so the
// fault variants that need the hook do not apply to it.
type Remote interface {
	// AppliesEffectRemotely reports whether the effect runs in another
	// process.
	AppliesEffectRemotely() bool
}

// IsRemote reports whether impl applies the effect in another process.
func IsRemote(impl adapters.Implementation) bool {
	r, ok := impl.(Remote)
	return ok && r.AppliesEffectRemotely()
}
