package harness

import (
	"context"
	"fmt"

	"github.com/harmless-dev/harmless/internal/backends"
)

// Activity is what the connections of a play's implementation instances
// are doing at one moment, as pg_stat_activity shows it. The instances'
// connections are those open through the play's proxy, found by their
// backends' pids (whatever application_name they carry), of the run's
// role. A delivery that waits for a connection of its pool, or for a
// process to start, has no backend yet and is not seen.
type Activity struct {
	// Connections counts the instances' client backends.
	Connections int
	// LockWaits counts those that wait for a heavyweight lock
	// (wait_event_type Lock): a row, a transaction's outcome, an advisory
	// lock, a table.
	LockWaits int
	// Sleeping counts those that sleep in pg_sleep, as a sleep fault does.
	Sleeping int
}

// String describes the activity, e.g. "17 connections: 15 waiting on a
// lock, 1 in a sleep fault".
func (a Activity) String() string {
	return fmt.Sprintf("%d connections: %d waiting on a lock, %d in a sleep fault", a.Connections, a.LockWaits, a.Sleeping)
}

// Activity reads what the connections of the play's instances are doing.
func (s *Play) Activity(ctx context.Context) (Activity, error) {
	var a Activity
	err := s.run.admin.QueryRow(ctx, `SELECT count(*),
	count(*) FILTER (WHERE wait_event_type = 'Lock'),
	count(*) FILTER (WHERE wait_event = 'PgSleep')
FROM pg_stat_activity
WHERE backend_type = 'client backend' AND usename = current_user AND pid = ANY($1::int4[])`,
		s.instancePIDs()).Scan(&a.Connections, &a.LockWaits, &a.Sleeping)
	if err != nil {
		return Activity{}, fmt.Errorf("read what the connections of play %s are doing: %w", s.name, err)
	}
	return a, nil
}

// CancelSleeping cancels the statement of every connection of the play's
// instances (open through its proxy, see [Activity]) that sleeps in a
// sleep fault (see [backends.CancelSleeping]): the transaction it holds
// fails now, where it sleeps. It returns the pids of the backends it
// cancelled.
func (s *Play) CancelSleeping(ctx context.Context) ([]int, error) {
	return backends.CancelSleeping(ctx, s.run.admin, s.instancePIDs())
}
