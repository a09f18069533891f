package backends

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/faults"
)

// CancelSleeping cancels the statement of every client backend among pids
// whose user is db's current_user and that sleeps in pg_sleep (wait_event
// PgSleep), as a faults.Sleep fault does, and returns their pids. The
// cancelled statement fails with SQLSTATE 57014 (query_canceled) and its
// transaction is rolled back: it is how the harness makes a transaction
// held by a sleep fail at the moment it chooses, rather than when the
// sleep runs out. A sleep fault at faults.AtCommit sleeps inside the
// COMMIT, which then fails.
//
// pids are the backends of connections the caller knows to be its own,
// open now (the wire proxy reports them): never found by application_name,
// which is whatever a client says. A backend of another role is left
// alone whatever its pid. Cancelling is a signal: the statements end
// shortly after CancelSleeping returns, not before.
func CancelSleeping(ctx context.Context, db faults.DB, pids []int) ([]int, error) {
	if len(pids) == 0 {
		return nil, nil
	}
	// The select list is evaluated only for the rows the WHERE clause
	// keeps, so nothing else is cancelled.
	rows, err := db.Query(ctx, `SELECT pid, pg_cancel_backend(pid) AS cancelled FROM pg_stat_activity
WHERE backend_type = 'client backend'
  AND pid <> pg_backend_pid()
  AND wait_event = 'PgSleep'
  AND usename = current_user
  AND pid = ANY($1::int4[])
ORDER BY pid`, pids)
	if err != nil {
		return nil, fmt.Errorf("cancel sleeping backends among %v: %w", pids, err)
	}
	type victim struct {
		PID       int32
		Cancelled bool
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByName[victim])
	if err != nil {
		return nil, fmt.Errorf("cancel sleeping backends among %v: %w", pids, err)
	}
	var out []int
	for _, v := range found {
		// Not cancelled: the backend ended on its own meanwhile.
		if v.Cancelled {
			out = append(out, int(v.PID))
		}
	}
	return out, nil
}
