package harness

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/internal/ledger"
)

// holdLockTimeout bounds the wait for the hold's own lock: an
// implementation's idle connections hold no lock on their tables, so
// anything longer means one of them sits in an open transaction.
const holdLockTimeout = 10 * time.Second

// WriteHold is a lock the harness holds, in a transaction of its own, on
// tables of a play's schema: the implementation's ([Play.HoldWrites]) or
// the ledger ([Play.HoldEffects]). Reads go on; every INSERT, UPDATE or
// DELETE there waits until the hold is released, or until the server
// crashes.
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

// HoldEffects takes an EXCLUSIVE lock on the play's ledger: every delivery
// stops at its effect, inside its transaction, with its claim made, until
// the hold is released. Unlike [Play.HoldWrites] it holds every
// implementation, since every one applies its effect there.
func (s *Play) HoldEffects(ctx context.Context) (*WriteHold, error) {
	return s.hold(ctx, []string{ledger.Table(s.schema)})
}

// hold takes an EXCLUSIVE lock on tables, quoted and schema-qualified.
func (s *Play) hold(ctx context.Context, tables []string) (_ *WriteHold, err error) {
	h := &WriteHold{play: s, tables: tables}
	if h.tx, err = s.run.admin.Begin(ctx); err != nil {
		return nil, fmt.Errorf("hold writes to %s: %w", h, err)
	}
	defer func() {
		if err != nil {
			_ = h.tx.Rollback(context.WithoutCancel(ctx))
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
	return h, nil
}

// String names the held tables.
func (h *WriteHold) String() string { return strings.Join(h.tables, ", ") }

// Waiting counts the connections of the play's implementation instances
// that wait for the hold.
func (h *WriteHold) Waiting(ctx context.Context) (int, error) {
	var n int
	err := h.play.run.admin.QueryRow(ctx, `SELECT count(DISTINCT l.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE NOT l.granted AND l.relation = ANY($1::oid[]) AND a.usename = current_user AND starts_with(a.application_name, $2)`,
		h.oids, h.play.AppNamePrefix()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the deliveries waiting for the hold on %s: %w", h, err)
	}
	return n, nil
}

// Release ends the hold. After a crash of the server the hold is gone
// already, and Release only returns its connection.
func (h *WriteHold) Release(ctx context.Context) error {
	if err := h.tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("release the hold on %s: %w", h, err)
	}
	return nil
}
