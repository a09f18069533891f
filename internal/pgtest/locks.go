package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/internal/connstr"
)

// lockWaitDeadline bounds [WithoutLockWait]: far above what any setup
// needs, so only a hang reaches it.
const lockWaitDeadline = time.Minute

// WithoutLockWait runs fn and returns its error, but fails the test as soon
// as a backend whose application_name is app waits for a lock, naming the
// statement that waits, or when fn has not returned within a minute. It
// watches through pool, which must not belong to fn. On failure it cancels
// fn's context and waits for fn to return, so that nothing fn holds
// outlives the test.
//
// It shows that setup code does not wait behind transactions that hold a
// table (deliveries in flight), without sleeping or timing anything: a
// statement that needs a conflicting lock shows up in pg_stat_activity as
// waiting on a Lock.
func WithoutLockWait(t testing.TB, pool *pgxpool.Pool, app string, fn func(context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	stop := func(format string, args ...any) {
		t.Helper()
		cancel()
		<-done
		t.Fatalf(format, args...)
	}
	deadline := time.After(lockWaitDeadline)
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-deadline:
			stop("%s neither finished nor waited for a lock in %s", app, lockWaitDeadline)
		case <-poll.C:
		}
		var waiting string
		err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(query, ' | '), '') FROM pg_stat_activity
WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&waiting)
		if err != nil {
			stop("watch for lock waits of %s: %v", app, err)
		}
		if waiting != "" {
			stop("%s waits for a lock: %s", app, waiting)
		}
	}
}

// NamedDSN is [DSN] with application_name set to app, so that the
// connections made with it can be found in pg_stat_activity, for instance
// by [WithoutLockWait].
func NamedDSN(t testing.TB, app string) string {
	t.Helper()
	dsn, err := connstr.SetParam(DSN(t), "application_name", app)
	if err != nil {
		t.Fatalf("pgtest: name the connections %q: %v", app, err)
	}
	return dsn
}

// abandonDeadline bounds [Abandon]'s wait for the cut backends to leave.
const abandonDeadline = 30 * time.Second

// Abandon makes the connections whose application_name starts with prefix
// look like a killed process's: it terminates them through db and returns
// once none is left in pg_stat_activity. A test that simulates a harmless
// run that died (and so cleaned nothing up) closes the run's own pools
// first, so that nothing reconnects, then abandons the rest.
func Abandon(t testing.TB, db *pgxpool.Pool, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), abandonDeadline)
	defer cancel()
	if _, err := db.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE starts_with(application_name, $1)`, prefix); err != nil {
		t.Fatalf("pgtest: cut the connections of %s*: %v", prefix, err)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var left bool
		err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE starts_with(application_name, $1))`, prefix).Scan(&left)
		switch {
		case err != nil:
			t.Fatalf("pgtest: wait for the connections of %s* to leave pg_stat_activity: %v", prefix, err)
		case !left:
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pgtest: connections of %s* still in pg_stat_activity after %s", prefix, abandonDeadline)
		case <-tick.C:
		}
	}
}
