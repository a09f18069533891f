package backends

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/faults"
)

// pollInterval is how often WaitGone looks for the backends it waits for.
const pollInterval = 10 * time.Millisecond

// Terminate terminates the client backends named by victims (pid and start
// time, see [Backends]) that are still there and whose user is db's
// current_user, except the backend running the query, and waits until
// they are gone from pg_stat_activity. It returns the pids it terminated.
//
// The caller knows its victims by pid, from the wire proxy that carries
// their connections: never by application_name, which is whatever a
// client says. A pid the system has given to another backend since the
// victim was pinned names a backend with another start time, which is left
// alone; so is a backend of another role, even when db could terminate it
// (as a superuser can). If ctx ends before the backends are gone, the pids
// are returned with an error.
func Terminate(ctx context.Context, db faults.DB, victims ...Backend) ([]int, error) {
	if len(victims) == 0 {
		return nil, nil
	}
	pids, starts := columns(victims)
	rows, err := db.Query(ctx, `SELECT a.pid, a.backend_start, pg_terminate_backend(a.pid) AS terminated
FROM pg_stat_activity a
JOIN unnest($1::int4[], $2::timestamptz[]) AS v(pid, started) ON a.pid = v.pid AND a.backend_start = v.started
WHERE a.backend_type = 'client backend'
  AND a.pid <> pg_backend_pid()
  AND a.usename = current_user
ORDER BY a.pid`, pids, starts)
	if err != nil {
		return nil, fmt.Errorf("terminate backends %v: %w", pids, err)
	}
	type victim struct {
		PID          int32
		BackendStart time.Time
		Terminated   bool
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByName[victim])
	if err != nil {
		return nil, fmt.Errorf("terminate backends %v: %w", pids, err)
	}
	var out []int
	var gone []Backend
	for _, v := range found {
		// Not terminated: the backend ended on its own meanwhile.
		if v.Terminated {
			out = append(out, int(v.PID))
			gone = append(gone, Backend{PID: int(v.PID), Start: v.BackendStart})
		}
	}
	if err := WaitGone(ctx, db, gone...); err != nil {
		return out, fmt.Errorf("terminate backends %v: %w", out, err)
	}
	return out, nil
}

// columns splits backends into their pids and start times, as arrays for
// unnest.
func columns(backends []Backend) ([]int32, []time.Time) {
	pids := make([]int32, len(backends))
	starts := make([]time.Time, len(backends))
	for i, b := range backends {
		pids[i], starts[i] = int32(b.PID), b.Start
	}
	return pids, starts
}

// Backend names one server backend: its process id and its start time.
// The operating system reuses a pid once the backend has gone; together
// with backend_start it names one backend only, so that waiting for a
// victim never waits for a newcomer that got its pid.
type Backend struct {
	PID   int
	Start time.Time
}

// Backends pins the backends now in pg_stat_activity under pids, for a
// caller that knows only their pids (the wire proxy learns nothing else
// of the connections it carries), so that [Terminate] and [WaitGone] can
// tell them from later backends with a reused pid. A pid no longer there is left out: its
// backend is gone already.
func Backends(ctx context.Context, db faults.DB, pids ...int) ([]Backend, error) {
	if len(pids) == 0 {
		return nil, nil
	}
	// Inside a transaction, pg_stat_activity is a snapshot: drop it.
	if _, err := db.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return nil, fmt.Errorf("look up backends %v: %w", pids, err)
	}
	rows, err := db.Query(ctx, `SELECT pid, backend_start AS start FROM pg_stat_activity
WHERE pid = ANY($1::int4[]) AND backend_start IS NOT NULL ORDER BY pid`, pids)
	if err != nil {
		return nil, fmt.Errorf("look up backends %v: %w", pids, err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByName[Backend])
	if err != nil {
		return nil, fmt.Errorf("look up backends %v: %w", pids, err)
	}
	return found, nil
}

// WaitGone polls pg_stat_activity through db (which must not be one of
// them) until none of backends is left, matched by pid and start time, or
// until ctx ends.
//
// A backend told to go (terminated, or its client connection cut) ends on
// its own time: it notices, rolls back, and exits. Until then it may hold
// locks, an event's marker row say, that the next delivery would wait on;
// wait before going on.
func WaitGone(ctx context.Context, db faults.DB, backends ...Backend) error {
	if len(backends) == 0 {
		return nil
	}
	pids, starts := columns(backends)
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		// Inside a transaction, pg_stat_activity is a snapshot: drop it.
		if _, err := db.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
			return fmt.Errorf("wait for backends %v to end: %w", pids, err)
		}
		rows, err := db.Query(ctx, `SELECT count(*)
FROM pg_stat_activity a
JOIN unnest($1::int4[], $2::timestamptz[]) AS v(pid, started) ON a.pid = v.pid AND a.backend_start = v.started`, pids, starts)
		var left int64
		if err == nil {
			left, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
		}
		if err != nil {
			return fmt.Errorf("wait for backends %v to end: %w", pids, err)
		}
		if left == 0 {
			return nil
		}
		// Checked first: select picks at random when the tick is due too,
		// and the next look would only fail on the ended context.
		if ctx.Err() != nil {
			return fmt.Errorf("wait for backends %v to end: %d still there: %w", pids, left, ctxErr(ctx))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for backends %v to end: %d still there: %w", pids, left, ctxErr(ctx))
		case <-ticker.C:
		}
	}
}

// ctxErr is ctx's error, with its cause when that says more.
func ctxErr(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if errors.Is(cause, err) {
		return cause
	}
	return fmt.Errorf("%w: %w", err, cause)
}
