package backends_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/internal/backends"
	"github.com/harmless-dev/harmless/internal/faulttest"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

func TestTerminateBackendsKillsOnlyTaggedConnections(t *testing.T) {
	pool := pgtest.Pool(t)
	run := "harmless-faults-test-" + faulttest.Unique(t)
	victim := faulttest.Connect(t, run+"-victim")
	otherRun := faulttest.Connect(t, "harmless-faults-test-"+faulttest.Unique(t))
	bystander := faulttest.Connect(t, "")

	pids, err := backends.TerminateBackends(t.Context(), pool, run)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{int(victim.PgConn().PID())}; !slices.Equal(pids, want) {
		t.Errorf("terminated %v, want %v", pids, want)
	}
	faulttest.WantDead(t, pool, victim, victim.PgConn().PID(), victim.Ping(t.Context()))
	if !faulttest.Alive(t, bystander) {
		t.Error("the untagged bystander connection died")
	}
	if !faulttest.Alive(t, otherRun) {
		t.Error("another run's connection died")
	}
}

func TestTerminateBackendsSparesItsCaller(t *testing.T) {
	run := "harmless-faults-test-" + faulttest.Unique(t)
	self := faulttest.Connect(t, run+"-self")
	pids, err := backends.TerminateBackends(t.Context(), self, run)
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) != 0 {
		t.Errorf("terminated %v, want none", pids)
	}
	if !faulttest.Alive(t, self) {
		t.Error("the caller's own connection died")
	}
}

func TestTerminateBackendsMatchesThePrefixLiterally(t *testing.T) {
	pool := pgtest.Pool(t)
	tests := []struct {
		name        string
		appName     string // after the run's tag
		prefix      string // after the run's tag
		terminating bool
	}{
		{"underscore is not a wildcard", "Ax-1", "_x", false},
		{"percent is not a wildcard", "abc", "%", false},
		{"backslash is not an escape", `_x`, `\_x`, false},
		{"underscore matches itself", "_x-1", "_x", true},
		{"percent matches itself", "%-1", "%", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := "harmless-t" + faulttest.Unique(t)
			conn := faulttest.Connect(t, run+tt.appName)
			pids, err := backends.TerminateBackends(t.Context(), pool, run+tt.prefix)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(pids) == 1; got != tt.terminating || len(pids) > 1 {
				t.Errorf("prefix %q on %q terminated %v, want terminated: %v", run+tt.prefix, run+tt.appName, pids, tt.terminating)
			}
			if got := faulttest.Alive(t, conn); got == tt.terminating {
				t.Errorf("connection %q alive: %v, want %v", run+tt.appName, got, !tt.terminating)
			}
		})
	}
}

func TestTerminateBackendsRefusesForeignPrefixes(t *testing.T) {
	pool := pgtest.Pool(t)
	tests := []struct{ prefix, want string }{
		{"", "empty prefix"},
		{"app-", `does not start with "harmless-"`},
		{"HARMLESS-x", `does not start with "harmless-"`},
		{" harmless-x", `does not start with "harmless-"`},
		{"harmless-", "every run's connections"},
		{"harmless-" + strings.Repeat("x", 60), "longer than the 63 bytes"},
	}
	for _, tt := range tests {
		pids, err := backends.TerminateBackends(t.Context(), pool, tt.prefix)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("TerminateBackends(%q) = %v, %v; want an error saying %q", tt.prefix, pids, err, tt.want)
		}
	}
}

// TestTerminateBackendsSparesOtherRoles: an application_name is whatever a
// client says it is. A connection of another role that carries the run's
// prefix is not the run's, and is not terminated, though the caller, a
// superuser, could.
func TestTerminateBackendsSparesOtherRoles(t *testing.T) {
	pool := pgtest.Pool(t)
	run := "harmless-faults-test-" + faulttest.Unique(t)
	victim := faulttest.Connect(t, run+"-w1")
	other := pgtest.NewRole(t)
	faker := faulttest.ConnectAs(t, other, run+"-w2")

	pids, err := backends.TerminateBackends(t.Context(), pool, run)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{int(victim.PgConn().PID())}; !slices.Equal(pids, want) {
		t.Errorf("terminated %v, want %v: only the connection of the caller's role", pids, want)
	}
	faulttest.WantDead(t, pool, victim, victim.PgConn().PID(), victim.Ping(t.Context()))
	if !faulttest.Alive(t, faker) {
		t.Errorf("the connection of role %s carrying the run's prefix was terminated", other.Name)
	}
}

// TestWaitGoneMatchesPIDAndStart: a backend is named by its pid and its
// start time, so a pid reused by a later backend is not waited for. A
// live backend given with another start time stands for such a newcomer.
func TestWaitGoneMatchesPIDAndStart(t *testing.T) {
	pool := pgtest.Pool(t)
	live := faulttest.Connect(t, "harmless-faults-test-"+faulttest.Unique(t))
	pid := int(live.PgConn().PID())

	// -1 is no backend's pid: it is left out.
	pinned, err := backends.Backends(t.Context(), pool, pid, -1)
	if err != nil {
		t.Fatal(err)
	}
	var start time.Time
	if err := pool.QueryRow(t.Context(), "SELECT backend_start FROM pg_stat_activity WHERE pid = $1", pid).Scan(&start); err != nil {
		t.Fatal(err)
	}
	if want := []backends.Backend{{PID: pid, Start: start}}; len(pinned) != 1 || pinned[0].PID != pid || !pinned[0].Start.Equal(start) {
		t.Fatalf("Backends(%d, -1) = %v, want %v", pid, pinned, want)
	}

	// The live backend is there: WaitGone keeps polling until its context
	// ends, here right after its first look.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	once := cancelAfterQuery{DB: pool, cancel: cancel}
	if err := backends.WaitGone(ctx, once, pinned...); err == nil || !strings.Contains(err.Error(), "1 still there") {
		t.Errorf("WaitGone on a live backend = %v, want an error saying it is still there", err)
	}

	// The same pid with another start time is another backend, gone.
	newcomer := backends.Backend{PID: pid, Start: start.Add(-time.Second)}
	if err := backends.WaitGone(t.Context(), pool, newcomer); err != nil {
		t.Errorf("WaitGone(%v) on a pid whose backend started at %s = %v, want nil", newcomer, start, err)
	}
	if !faulttest.Alive(t, live) {
		t.Error("the live connection died")
	}
}

// cancelAfterQuery runs its queries on DB and cancels a context once a
// query's rows are closed: a WaitGone given it looks once, then stops.
type cancelAfterQuery struct {
	faults.DB
	cancel context.CancelFunc
}

func (c cancelAfterQuery) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := c.DB.Query(ctx, sql, args...)
	if err != nil {
		c.cancel()
		return nil, err
	}
	return cancelOnClose{Rows: rows, cancel: c.cancel}, nil
}

type cancelOnClose struct {
	pgx.Rows
	cancel context.CancelFunc
}

func (r cancelOnClose) Close() {
	r.Rows.Close()
	r.cancel()
}
