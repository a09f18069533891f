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

// pin pins the backends of conns, failing the test if one is gone.
func pin(t *testing.T, db faults.DB, conns ...*pgx.Conn) []backends.Backend {
	t.Helper()
	var pids []int
	for _, c := range conns {
		pids = append(pids, int(c.PgConn().PID()))
	}
	pinned, err := backends.Backends(t.Context(), db, pids...)
	if err != nil {
		t.Fatal(err)
	}
	if len(pinned) != len(conns) {
		t.Fatalf("pinned %v of pids %v", pinned, pids)
	}
	return pinned
}

// TestTerminateKillsOnlyItsVictims: Terminate ends the backends it is
// given, busy or idle, and waits until they are gone; a bystander carrying
// the same application_name lives on.
func TestTerminateKillsOnlyItsVictims(t *testing.T) {
	pool := pgtest.Pool(t)
	name := "harmless-faults-test-" + faulttest.Unique(t)
	idle := faulttest.Connect(t, name)
	busy := faulttest.Connect(t, "anything")
	bystander := faulttest.Connect(t, name)
	asleep := make(chan error, 1)
	go func() {
		_, err := busy.Exec(t.Context(), "SELECT pg_sleep(60)")
		asleep <- err
	}()
	faulttest.WaitSleeping(t, pool, busy)

	pids, err := backends.Terminate(t.Context(), pool, pin(t, pool, idle, busy)...)
	if err != nil {
		t.Fatal(err)
	}
	want := []int{int(idle.PgConn().PID()), int(busy.PgConn().PID())}
	slices.Sort(want)
	if !slices.Equal(pids, want) {
		t.Errorf("terminated %v, want %v", pids, want)
	}
	faulttest.WantDead(t, pool, idle, idle.PgConn().PID(), idle.Ping(t.Context()))
	if err := <-asleep; err == nil {
		t.Error("the busy connection's statement ran to its end")
	}
	if !faulttest.Alive(t, bystander) {
		t.Error("the bystander with the same application_name died")
	}
}

func TestTerminateSparesItsCaller(t *testing.T) {
	self := faulttest.Connect(t, "harmless-faults-test-"+faulttest.Unique(t))
	pids, err := backends.Terminate(t.Context(), self, pin(t, self, self)...)
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

// TestTerminateSparesAReusedPIDAndOtherRoles: a backend named by a pid with
// another start time stands for a newcomer that got a victim's pid; it is
// not terminated. Nor is a backend of another role, though the caller, a
// superuser, could.
func TestTerminateSparesAReusedPIDAndOtherRoles(t *testing.T) {
	pool := pgtest.Pool(t)
	newcomer := faulttest.Connect(t, "harmless-faults-test-"+faulttest.Unique(t))
	other := faulttest.ConnectAs(t, pgtest.NewRole(t), "harmless-faults-test-"+faulttest.Unique(t))
	victims := pin(t, pool, newcomer, other)
	for i, v := range victims {
		if v.PID == int(newcomer.PgConn().PID()) {
			victims[i].Start = v.Start.Add(-time.Second)
		}
	}
	pids, err := backends.Terminate(t.Context(), pool, victims...)
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) != 0 {
		t.Errorf("terminated %v, want none", pids)
	}
	if !faulttest.Alive(t, newcomer) {
		t.Error("the backend with a victim's pid and a later start was terminated")
	}
	if !faulttest.Alive(t, other) {
		t.Error("the backend of another role was terminated")
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
