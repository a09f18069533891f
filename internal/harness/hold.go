package harness

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults"
)

// holdLockTimeout bounds the wait for the hold's own lock: an
// implementation's idle connections hold no lock on their tables, so
// anything longer means one of them sits in an open transaction.
const holdLockTimeout = 10 * time.Second

// WriteHold is a lock the harness holds, in a transaction of its own, on
// the implementation's tables in a play's schema ([Play.HoldWrites]).
// Reads go on; every INSERT, UPDATE or DELETE there waits until the hold
// is released, or until the server crashes.
type WriteHold struct {
	play   *Play
	tx     pgx.Tx
	tables []string
	oids   []uint32
}

// HoldWrites takes an EXCLUSIVE lock on every table of [Play.StateTables].
// With it, a delivery stops at its first write to the implementation's
// state, after whatever it committed before that write. It returns nil and
// no error when the implementation keeps no table in the schema.
func (s *Play) HoldWrites(ctx context.Context) (*WriteHold, error) {
	tables, err := s.StateTables(ctx)
	if err != nil || len(tables) == 0 {
		return nil, err
	}
	return s.hold(ctx, tables)
}

// EffectGate holds deliveries of some events at their effects, inside
// their transactions with their claims made, until it is opened: a
// [faults.Gate] fault per event. It takes no lock, so an implementation
// whose statements give up on a lock quickly (a short lock_timeout) is
// held like any other, rather than failed by the harness's own hold.
type EffectGate struct {
	play  *Play
	gates []*faults.Fault
}

// GateEffects holds the deliveries of events at their effects until the
// gate is opened, or at most limit.
func (s *Play) GateEffects(ctx context.Context, events []adapters.Event, limit time.Duration) (*EffectGate, error) {
	g := &EffectGate{play: s}
	for _, ev := range events {
		f, err := s.Arm(ctx, faults.Plan{Namespace: ev.Namespace, ID: ev.ID, Point: faults.AtEffect, Action: faults.Gate, Sleep: limit})
		if err != nil {
			return nil, fmt.Errorf("gate the effects: %w", err)
		}
		g.gates = append(g.gates, f)
	}
	return g, nil
}

// Waiting counts the deliveries the gate holds now.
func (g *EffectGate) Waiting(ctx context.Context) (int, error) {
	total := 0
	for _, f := range g.gates {
		n, err := f.Held(ctx)
		if err != nil {
			return 0, err
		}
		total += int(n)
	}
	return total, nil
}

// Open lets the held deliveries go on, and later ones through at once; the
// gates are disarmed.
func (g *EffectGate) Open(ctx context.Context) error {
	var errs []error
	for _, f := range g.gates {
		if err := f.Open(ctx); err != nil {
			errs = append(errs, err)
		}
		if err := g.play.Disarm(ctx, f); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// hold takes an EXCLUSIVE lock on tables, quoted and schema-qualified.
func (s *Play) hold(ctx context.Context, tables []string) (_ *WriteHold, err error) {
	h := &WriteHold{play: s, tables: tables}
	if h.tx, err = s.run.admin.Begin(ctx); err != nil {
		return nil, fmt.Errorf("hold writes to %s: %w", h, err)
	}
	defer func() {
		if err != nil {
			_ = h.rollback(ctx)
		}
	}()
	if _, err := h.tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", holdLockTimeout.Milliseconds())); err != nil {
		return nil, fmt.Errorf("hold writes to %s: %w", h, err)
	}
	if _, err := h.tx.Exec(ctx, "LOCK TABLE "+strings.Join(tables, ", ")+" IN EXCLUSIVE MODE"); err != nil {
		return nil, fmt.Errorf("hold writes to %s: %w", h, err)
	}
	err = h.tx.QueryRow(ctx, `SELECT array_agg(t::regclass::oid) FROM unnest($1::text[]) AS t`, tables).Scan(&h.oids)
	if err != nil {
		return nil, fmt.Errorf("hold writes to %s: %w", h, err)
	}
	s.mu.Lock()
	if s.holds == nil {
		s.holds = make(map[*WriteHold]struct{})
	}
	s.holds[h] = struct{}{}
	s.mu.Unlock()
	return h, nil
}

// String names the held tables.
func (h *WriteHold) String() string { return strings.Join(h.tables, ", ") }

// Waiting counts the connections of the play's implementation instances
// (open through its proxy, see [Activity]) that wait for the hold.
func (h *WriteHold) Waiting(ctx context.Context) (int, error) {
	var n int
	err := h.play.run.admin.QueryRow(ctx, `SELECT count(DISTINCT l.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE NOT l.granted AND l.relation = ANY($1::oid[]) AND a.usename = current_user AND a.pid = ANY($2::int4[])`,
		h.oids, h.play.instancePIDs()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the deliveries waiting for the hold on %s: %w", h, err)
	}
	return n, nil
}

// Release ends the hold. After a crash of the server the hold is gone
// already, and Release only returns its connection. It may be called more
// than once; [Play.Close] calls it for a hold still taken.
//
// The rollback does not wait for ctx: an interrupted run cancels the
// context its play was given, and a hold left in place keeps the
// harness's connection idle in its transaction, out of the pool, and the
// play's DROP SCHEMA waiting behind its lock. It is bounded by
// releaseTimeout instead; when the rollback cannot be sent in time, pgx
// closes the connection, which ends the transaction on the server.
func (h *WriteHold) Release(ctx context.Context) error {
	h.play.mu.Lock()
	delete(h.play.holds, h)
	h.play.mu.Unlock()
	if err := h.rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("release the hold on %s: %w", h, err)
	}
	return nil
}

// releaseTimeout bounds the rollback that ends a hold.
const releaseTimeout = 5 * time.Second

func (h *WriteHold) rollback(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	return h.tx.Rollback(ctx)
}
