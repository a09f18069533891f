package backends

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/faults"
)

// RunPrefix is how every application_name of the harness's connections
// begins; a run's own prefix extends it.
const RunPrefix = "harmless-"

// maxApplicationName is the most bytes PostgreSQL keeps of an
// application_name (NAMEDATALEN - 1).
const maxApplicationName = 63

// pollInterval is how often WaitGone looks for the backends it waits for.
const pollInterval = 10 * time.Millisecond

// TerminateBackends terminates every client backend whose application_name
// starts with prefix and whose user is db's current_user, except the
// backend running the query, and waits until they are gone from
// pg_stat_activity. It returns the pids it terminated.
//
// prefix is matched literally (no LIKE wildcards). It must start with
// [RunPrefix] and say more than that: the bare RunPrefix would reach other
// runs' connections. An application_name is chosen by whoever connects, so
// the prefix alone proves nothing: a backend of another role that carries
// it is not the run's and is left alone, even when db could terminate it
// (as a superuser can). If ctx ends before the backends are gone, the pids
// are returned with an error.
func TerminateBackends(ctx context.Context, db faults.DB, applicationNamePrefix string) ([]int, error) {
	prefix := applicationNamePrefix
	if err := checkPrefix(prefix); err != nil {
		return nil, fmt.Errorf("terminate backends: %w", err)
	}

	rows, err := db.Query(ctx, `SELECT pid, backend_start, pg_terminate_backend(pid) AS terminated
FROM pg_stat_activity
WHERE backend_type = 'client backend'
  AND pid <> pg_backend_pid()
  AND usename = current_user
  AND starts_with(application_name, $1::text)`, prefix)
	if err != nil {
		return nil, fmt.Errorf("terminate backends named %q*: %w", prefix, err)
	}
	type victim struct {
		PID          int32
		BackendStart time.Time
		Terminated   bool
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByName[victim])
	if err != nil {
		return nil, fmt.Errorf("terminate backends named %q*: %w", prefix, err)
	}
	var pids []int
	var victims []Backend
	for _, v := range found {
		// Not terminated: the backend ended on its own meanwhile.
		if v.Terminated {
			pids = append(pids, int(v.PID))
			victims = append(victims, Backend{PID: int(v.PID), Start: v.BackendStart})
		}
	}
	if len(pids) == 0 {
		return nil, nil
	}
	if err := WaitGone(ctx, db, victims...); err != nil {
		return pids, fmt.Errorf("terminate backends named %q*: %w", prefix, err)
	}
	return pids, nil
}

// checkPrefix refuses an application_name prefix that could reach
// connections other than one run's: empty, not starting with [RunPrefix],
// the bare RunPrefix, or longer than PostgreSQL keeps.
func checkPrefix(prefix string) error {
	switch {
	case prefix == "":
		return errors.New("refusing an empty prefix: it matches every connection")
	case !strings.HasPrefix(prefix, RunPrefix):
		return fmt.Errorf("refusing prefix %q: it does not start with %q, so the connections may not be this run's", prefix, RunPrefix)
	case prefix == RunPrefix:
		return fmt.Errorf("refusing prefix %q: it matches every run's connections, not one run's", prefix)
	case len(prefix) > maxApplicationName:
		return fmt.Errorf("prefix %q is longer than the %d bytes PostgreSQL keeps of an application_name", prefix, maxApplicationName)
	}
	return nil
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
// of the connections it cuts), so that [WaitGone] can tell them from later
// backends with a reused pid. A pid no longer there is left out: its
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
	pids := make([]int32, len(backends))
	starts := make([]time.Time, len(backends))
	for i, b := range backends {
		pids[i], starts[i] = int32(b.PID), b.Start
	}
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
