// Package faultplan is what the harness's plans of faults share beneath
// their packages' API: how the deliveries a plan targets (an event, an
// attempt, how many times) are checked and described, alike for the
// database fault points of package faults and the Go hooks of
// internal/hooks; the kinds the harness counts firings by ([Kind],
// [ProxyKind]); and the evidence sequences of the database fault points,
// by which the harness counts the faults armed in a schema ([CountArmed]),
// so that a fault armed around its count is noticed.
package faultplan

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
)

// ValidateTarget checks the event id and the attempt of a plan: an empty
// id never fires, and an attempt is 0 (every attempt) or one PostgreSQL
// can store as an integer.
func ValidateTarget(id string, attempt int) error {
	if id == "" {
		return errors.New("no event id: a plan for an empty id never fires")
	}
	if attempt < 0 || attempt > math.MaxInt32 {
		return fmt.Errorf("attempt %d out of range (0 for every attempt, else 1 to %d)", attempt, math.MaxInt32)
	}
	return nil
}

// DescribeTarget tells which deliveries a plan targets, e.g.
// "ns/42 attempt 1" or "ns/42, once".
func DescribeTarget(namespace, id string, attempt, times int) string {
	s := adapters.Event{Namespace: namespace, ID: id}.String()
	switch {
	case attempt == 0 && times == 0:
		return s + " every attempt"
	case attempt != 0:
		s += " attempt " + strconv.Itoa(attempt)
	}
	switch times {
	case 0:
		return s
	case 1:
		return s + ", once"
	}
	return s + ", at most " + strconv.Itoa(times) + " times"
}

// Kind is the kind of a database-side fault, as package faults' Armed
// names it: "db:" action "@" point, e.g. "db:raise@commit". The harness
// counts firings by kind and docs/reports.md lists the kinds.
func Kind(action, point string) string { return "db:" + action + "@" + point }

// ProxyKind is the kind of a rule of the wire proxy, faults/pgproxy:
// "proxy:" action "@" point with the point's words joined by hyphens,
// e.g. "proxy:cut@after-commit-complete".
func ProxyKind(action, point string) string {
	return "proxy:" + action + "@" + strings.ReplaceAll(point, " ", "-")
}

// EvidenceSequence is the unqualified name of the sequence, in the fault's
// schema, that counts the firings of the database-side fault numbered id.
func EvidenceSequence(id int64) string { return fmt.Sprintf("harmless_fault_%d_fired", id) }

// Querier runs a query: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// CountArmed reports how many faults faults.Arm armed in schema, disarmed
// or not: one evidence sequence each, which Disarm leaves in place.
// Sequences are created by DDL, which is transactional and comes back
// exactly from a crash of the server, so the count does too. An Arm that
// failed after creating its sequence counts as well.
func CountArmed(ctx context.Context, db Querier, schema string) (int, error) {
	rows, err := db.Query(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind = 'S' AND c.relname LIKE 'harmless\_fault\_%\_fired'`, schema)
	var n int64
	if err == nil {
		n, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
	}
	if err != nil {
		return 0, fmt.Errorf("count the faults armed in schema %q: %w", schema, err)
	}
	return int(n), nil
}

// PlanTable is the unqualified name of the table, in a schema where
// package faults installed its fault points, that holds the plans armed
// there: a row per fault from its Arm to its Disarm, whether or not it
// still fires.
const PlanTable = "harmless_fault_plans"

// CountPlanned reports how many database-side faults are armed in schema
// now: armed and not disarmed yet (a fault that fired its times still
// counts until it is disarmed). CountArmed counts every fault ever armed.
func CountPlanned(ctx context.Context, db Querier, schema string) (int, error) {
	rows, err := db.Query(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, PlanTable}.Sanitize())
	var n int64
	if err == nil {
		n, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
	}
	if err != nil {
		return 0, fmt.Errorf("count the faults armed now in schema %q: %w", schema, err)
	}
	return int(n), nil
}
