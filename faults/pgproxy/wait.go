package pgproxy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/harmless-dev/harmless/internal/ledger"
)

// goneInterval is how often WaitGone looks at pg_stat_activity.
const goneInterval = 10 * time.Millisecond

// WaitGone waits until none of the backends pids is in pg_stat_activity,
// polling through db (which must not be one of them), or until ctx ends.
//
// A cut closes the server side of the connection, but the backend ends on
// its own time: it notices its client is gone, rolls back, and exits. Until
// then it may hold locks (the marker row of the event, say) that the next
// delivery would wait on. Wait before going on.
//
// Backends are matched by pid alone. PostgreSQL's pids are the operating
// system's, which reuses one only after going through the whole pid range;
// a reused pid would make WaitGone wait on the newcomer.
func WaitGone(ctx context.Context, db ledger.DB, pids ...int) error {
	if len(pids) == 0 {
		return nil
	}
	ids := make([]int32, len(pids))
	for i, p := range pids {
		ids[i] = int32(p)
	}
	ticker := time.NewTicker(goneInterval)
	defer ticker.Stop()
	for {
		left, err := countBackends(ctx, db, ids)
		if err != nil {
			return fmt.Errorf("pgproxy: wait for backends %v to end: %w", pids, err)
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ticker.C:
		case <-ctx.Done():
			err, cause := ctx.Err(), context.Cause(ctx)
			if !errors.Is(cause, err) {
				err = fmt.Errorf("%w: %w", err, cause)
			}
			return fmt.Errorf("pgproxy: wait for backends %v to end: %d still there: %w", pids, left, err)
		}
	}
}

// countBackends counts the backends of pids in pg_stat_activity, freshly
// (inside a transaction, pg_stat_activity is a snapshot unless cleared).
func countBackends(ctx context.Context, db ledger.DB, pids []int32) (int64, error) {
	if _, err := db.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return 0, err
	}
	rows, err := db.Query(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1::int4[])", pids)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n int64
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, err
		}
	}
	return n, rows.Err()
}

// WaitGone waits until the backends of the connections the fault cut are
// gone from pg_stat_activity; see [WaitGone].
func (f *Fault) WaitGone(ctx context.Context, db ledger.DB) error {
	return WaitGone(ctx, db, f.PIDs()...)
}
