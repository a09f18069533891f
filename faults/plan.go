package faults

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harmless-dev/harmless/internal/faultplan"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// Point is where a planned database-side fault fires.
type Point string

const (
	// AtEffect fires when the effect row is inserted into the ledger, from a
	// plain AFTER INSERT ... FOR EACH ROW trigger: the effect's statement fails.
	AtEffect Point = "effect"
	// AtCommit fires when the transaction that inserted the effect row
	// commits, from a DEFERRABLE INITIALLY DEFERRED constraint trigger: the
	// COMMIT fails. An implementation that runs SET CONSTRAINTS ALL IMMEDIATE
	// moves this point to the end of its statements.
	AtCommit Point = "commit"
)

// Action is what a planned database-side fault does when it fires.
type Action string

const (
	// Raise fails with SQLSTATE HF001 and a message naming the fault; the
	// transaction rolls back. [IsInjected] recognises the error.
	Raise Action = "raise"
	// Sleep holds the transaction for [Plan.Sleep] (pg_sleep), widening race
	// windows so that concurrent deliveries overlap. Nothing fails.
	Sleep Action = "sleep"
	// Terminate makes the backend terminate itself
	// (pg_terminate_backend(pg_backend_pid())). The client sees SQLSTATE
	// 57P01 or a closed connection; the transaction is gone.
	Terminate Action = "terminate"
	// SleepThenRaise holds the transaction for [Plan.Sleep], as Sleep,
	// then fails it, as Raise: a delivery that holds its event for a
	// while and then fails, whether or not the harness cuts the sleep
	// short first. One plan, so that both happen to the same delivery.
	SleepThenRaise Action = "sleep-then-raise"
	// Gate holds the transaction, in short sleeps, until the harness opens
	// the fault ([Fault.Open]) or [Plan.Sleep] has passed; nothing fails.
	// It holds a delivery without a lock, so that an implementation with a
	// short lock_timeout is held like any other and does not fail for it.
	Gate Action = "gate"
)

// injectedSQLState is the SQLSTATE of the error a [Raise] fault raises
// (plan.sql's ERRCODE), documented as HF001 for code in other languages.
const injectedSQLState = "HF001"

// Plan says which effect insert a database-side fault fires on, and what it
// does there.
type Plan struct {
	// Namespace and ID name the event. They are compared, as exact bytes,
	// with the ledger row's namespace and event_id.
	Namespace, ID string
	// Attempt is the delivery attempt the fault fires on; 0 matches every
	// attempt.
	Attempt int
	// Times is how many times the fault fires for its event, at most,
	// counting the matching effect inserts in the order they reach the
	// point: 1 fires on the first only. 0 fires on every one. A one-off
	// failure is planned with Times 1, not with Attempt 1: an
	// implementation that stores a delivery and applies it later from the
	// stored copy (an inbox) retries with the same attempt number, and a
	// fault keyed on it would fire on every retry.
	Times int
	// Point is where the fault fires.
	Point Point
	// Action is what it does.
	Action Action
	// Sleep is how long a [Sleep] fault sleeps, at least a microsecond, in
	// whole microseconds. It must be zero for the other actions.
	Sleep time.Duration
}

func (p Plan) validate() error {
	switch p.Point {
	case AtEffect, AtCommit:
	default:
		return fmt.Errorf("unknown point %q (known: %q, %q)", p.Point, AtEffect, AtCommit)
	}
	switch p.Action {
	case Raise, Terminate:
		if p.Sleep != 0 {
			return fmt.Errorf("a %s fault takes no sleep duration, got %s", p.Action, p.Sleep)
		}
	case Sleep, SleepThenRaise, Gate:
		if p.Sleep < time.Microsecond {
			return fmt.Errorf("a %s fault needs a sleep duration of at least 1µs, got %s", p.Action, p.Sleep)
		}
	default:
		return fmt.Errorf("unknown action %q (known: %q, %q, %q, %q, %q)", p.Action, Raise, Sleep, Terminate, SleepThenRaise, Gate)
	}
	if p.Times < 0 || p.Times > math.MaxInt32 {
		return fmt.Errorf("times %d out of range (0 for every time, else 1 to %d)", p.Times, math.MaxInt32)
	}
	return faultplan.ValidateTarget(p.ID, p.Attempt)
}

// String describes the plan, e.g. "raise at commit for ns/42 attempt 1".
func (p Plan) String() string {
	action := string(p.Action)
	switch p.Action {
	case Sleep:
		action += " " + p.Sleep.String()
	case SleepThenRaise:
		action = "sleep " + p.Sleep.String() + " then raise"
	case Gate:
		action = "gate (at most " + p.Sleep.String() + ")"
	}
	return fmt.Sprintf("%s at %s for %s", action, p.Point, faultplan.DescribeTarget(p.Namespace, p.ID, p.Attempt, p.Times))
}

//go:embed plan.sql
var installSQL string

// Install creates the fault points on the ledger of schema: a plan table, a
// trigger function and two triggers ([AtEffect], [AtCommit]), all in schema.
// Dropping the schema removes everything.
//
// The ledger is the table harmless_effects of schema, the one the harness's
// effect (adapters.Effect) inserts into: a row per applied effect, with the
// event's namespace and id as bytea, the hex SHA-256 digest of its payload
// (adapters.PayloadDigest) and the delivery attempt:
//
//	INSERT INTO <schema>.harmless_effects (namespace, event_id, payload_digest, attempt) VALUES ($1, $2, $3, $4)
//
// The fault points fire on those inserts. Install creates the ledger when
// schema has none, so that a test of one's own can install the fault points
// in a schema of its own and apply its effects with that statement.
//
// The triggers run as the role that inserts the effect, which therefore
// needs to read the plan table and advance the faults' sequences: the same
// role as the harness's, as adapters.Env intends.
func Install(ctx context.Context, db DB, schema string) error {
	hasLedger, err := queryOne[bool](ctx, db, "SELECT to_regclass($1) IS NOT NULL", ledger.Table(schema))
	if err != nil {
		return fmt.Errorf("install fault points in schema %q: look for its ledger: %w", schema, err)
	}
	if !hasLedger {
		if err := ledger.Install(ctx, db, schema); err != nil {
			return fmt.Errorf("install fault points in schema %q: %w", schema, err)
		}
	}
	sql := strings.NewReplacer(
		"{{schema}}", pgx.Identifier{schema}.Sanitize(),
		"{{ledger}}", ledger.Table(schema),
	).Replace(installSQL)
	// Without arguments, Exec uses the simple protocol: the statements run
	// as one implicit transaction.
	if _, err := db.Exec(ctx, sql); err != nil {
		return fmt.Errorf("install fault points in schema %q: %w", schema, err)
	}
	return nil
}

// Fault is one armed database-side fault.
type Fault struct {
	db       DB // the fault was armed through; Fired and Disarm run on it
	id       int64
	plan     Plan
	plans    string // quoted, schema-qualified plan table
	evidence string // quoted, schema-qualified sequence
	// opened and left, for a [Gate], are sequences: opened is called once
	// the gate opens, left counts the deliveries that went through it.
	opened, left string
}

// Arm validates p and arms it in schema, where [Install] has run. The fault
// fires on every matching effect insert from then on, until it is disarmed
// ([Fault.Disarm]); several faults matching one insert fire in the order
// they were armed, until one of them fails the transaction. Arm before
// delivering: a transaction at REPEATABLE READ or SERIALIZABLE that started
// earlier does not see the plan.
//
// The fault keeps db: [Fault.Fired] and [Fault.Disarm] run on it, so it
// must stay usable as long as the fault is (a pool, not a transaction that
// ends first).
func Arm(ctx context.Context, db DB, schema string, p Plan) (*Fault, error) {
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("arm fault %s: invalid plan: %w", p, err)
	}
	ids := pgx.Identifier{schema, "harmless_fault_ids"}.Sanitize()
	plans := pgx.Identifier{schema, faultplan.PlanTable}.Sanitize()
	id, err := queryOne[int64](ctx, db, "SELECT nextval($1::regclass)", ids)
	if err != nil {
		return nil, fmt.Errorf("arm fault %s: number it: %w", p, err)
	}
	f := &Fault{
		db:       db,
		id:       id,
		plan:     p,
		plans:    plans,
		evidence: pgx.Identifier{schema, faultplan.EvidenceSequence(id)}.Sanitize(),
	}
	// Should the INSERT fail, unused sequences are left behind: harmless.
	if _, err := db.Exec(ctx, "CREATE SEQUENCE "+f.evidence); err != nil {
		return nil, fmt.Errorf("arm fault %s: create its evidence sequence: %w", p, err)
	}
	var opened, left *string
	if p.Action == Gate {
		f.opened = pgx.Identifier{schema, fmt.Sprintf("harmless_fault_%d_opened", id)}.Sanitize()
		f.left = pgx.Identifier{schema, fmt.Sprintf("harmless_fault_%d_left", id)}.Sanitize()
		if _, err := db.Exec(ctx, "CREATE SEQUENCE "+f.opened+"; CREATE SEQUENCE "+f.left); err != nil {
			return nil, fmt.Errorf("arm fault %s: create its gate's sequences: %w", p, err)
		}
		opened, left = &f.opened, &f.left
	}
	_, err = db.Exec(ctx, "INSERT INTO "+plans+` (id, namespace, event_id, attempt, times, point, action, sleep, evidence, opened, passed, description)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8 * interval '1 microsecond', $9::regclass, $10::regclass, $11::regclass, $12)`,
		id, []byte(p.Namespace), []byte(p.ID), int32(p.Attempt), int32(p.Times), string(p.Point), string(p.Action),
		p.Sleep.Microseconds(), f.evidence, opened, left, p.String())
	if err != nil {
		return nil, fmt.Errorf("arm fault %s: record its plan: %w", p, err)
	}
	return f, nil
}

// Fired reports how many times the fault fired, counting firings whose
// transaction rolled back or whose backend terminated.
func (f *Fault) Fired(ctx context.Context) (int64, error) {
	n, err := queryOne[int64](ctx, f.db, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM "+f.evidence)
	if err != nil {
		return 0, fmt.Errorf("count firings of fault %s: %w", f, err)
	}
	// The evidence counts every matching insert, including those that
	// came after the fault had fired its Times.
	if f.plan.Times > 0 {
		n = min(n, int64(f.plan.Times))
	}
	return n, nil
}

// Open opens a [Gate]: the deliveries it holds go on, and later ones pass
// it at once.
func (f *Fault) Open(ctx context.Context) error {
	if f.opened == "" {
		return fmt.Errorf("open fault %s: it is not a gate", f)
	}
	if _, err := queryOne[int64](ctx, f.db, "SELECT nextval($1::regclass)", f.opened); err != nil {
		return fmt.Errorf("open fault %s: %w", f, err)
	}
	return nil
}

// Held counts the deliveries a [Gate] holds now: those that reached it and
// have not gone through.
func (f *Fault) Held(ctx context.Context) (int64, error) {
	if f.left == "" {
		return 0, fmt.Errorf("count the deliveries fault %s holds: it is not a gate", f)
	}
	n, err := queryOne[int64](ctx, f.db, "SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM "+f.evidence+
		") - (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM "+f.left+")")
	if err != nil {
		return 0, fmt.Errorf("count the deliveries fault %s holds: %w", f, err)
	}
	return n, nil
}

// Disarm deletes the fault's plan, so that it never fires again; its
// evidence stays, so [Fault.Fired] still counts the firings before. A
// transaction already inside the fault (a [Sleep]) is not woken: it sleeps
// on. The deletion commits at once: every statement that starts after
// Disarm returns no longer sees the plan, except in a transaction at
// REPEATABLE READ or SERIALIZABLE that started earlier. Disarming a
// disarmed fault does nothing.
func (f *Fault) Disarm(ctx context.Context) error {
	if _, err := f.db.Exec(ctx, "DELETE FROM "+f.plans+" WHERE id = $1", f.id); err != nil {
		return fmt.Errorf("disarm fault %s: %w", f, err)
	}
	return nil
}

// Kind is the kind of the fault (see [Armed]): "db:" action "@" point,
// e.g. "db:raise@commit".
func (f *Fault) Kind() string { return faultplan.Kind(string(f.plan.Action), string(f.plan.Point)) }

// String describes the fault, e.g. "raise at commit for ns/42 attempt 1".
func (f *Fault) String() string { return f.plan.String() }

// IsInjected reports whether err, possibly wrapped, is the error raised by a
// [Raise] fault.
func IsInjected(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == injectedSQLState
}

// queryOne runs a query that returns exactly one row of one column.
func queryOne[T any](ctx context.Context, db DB, sql string, args ...any) (T, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		var zero T
		return zero, err
	}
	return pgx.CollectExactlyOneRow(rows, pgx.RowTo[T])
}
