// Package faulttest is what the tests of the fault packages (faults,
// internal/backends, internal/hooks) share: a schema of a test's own with
// the ledger and the database fault points installed, on the shared test
// server of internal/pgtest; deliveries through the harness's effect, each
// in a transaction of its own as an implementation would make it; and
// connections tagged with an application_name, whose backends a test
// watches sleep or die.
package faulttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/internal/effect"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

// Fixture is one test's schema, with the ledger and the fault points
// installed, on a real server.
type Fixture struct {
	Pool   *pgxpool.Pool
	Schema string
}

// Unique returns 12 random hex digits, for names of a test's own.
func Unique(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// Setup creates a schema of the test's own, dropped when the test ends,
// and installs the ledger and the fault points in it.
func Setup(t testing.TB) Fixture {
	t.Helper()
	ctx := t.Context()
	fx := Fixture{Pool: pgtest.Pool(t), Schema: "harmless_test_faults_" + Unique(t)}
	quoted := pgx.Identifier{fx.Schema}.Sanitize()
	if _, err := fx.Pool.Exec(ctx, "CREATE SCHEMA "+quoted); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		// t.Context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := fx.Pool.Exec(ctx, "DROP SCHEMA "+quoted+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", fx.Schema, err)
		}
	})
	if err := ledger.Install(ctx, fx.Pool, fx.Schema); err != nil {
		t.Fatal(err)
	}
	if err := faults.Install(ctx, fx.Pool, fx.Schema); err != nil {
		t.Fatal(err)
	}
	return fx
}

// Arm arms p in the fixture's schema.
func (fx Fixture) Arm(t testing.TB, p faults.Plan) *faults.Fault {
	t.Helper()
	f, err := faults.Arm(t.Context(), fx.Pool, fx.Schema, p)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Effect is the harness's effect on the fixture's ledger, running hook
// (which may be nil) before its INSERT.
func (fx Fixture) Effect(hook effect.Hook) adapters.Effect {
	return ledger.Effect(fx.Schema, hook)
}

// WantFired checks how often a fault fired.
func WantFired(t testing.TB, f faults.Armed, want int64) {
	t.Helper()
	got, err := f.Fired(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("%s fired %d times, want %d", f, got, want)
	}
}

// WantEffects checks how many effects of d's event the ledger holds.
func (fx Fixture) WantEffects(t testing.TB, d adapters.Delivery, want int) {
	t.Helper()
	entries, err := ledger.Entries(t.Context(), fx.Pool, fx.Schema, d.Namespace, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != want {
		t.Errorf("ledger holds %d effects of %s, want %d: %+v", len(entries), d.Event, want, entries)
	}
}

// Beginner is what Deliver runs its transaction on: a pool or a
// connection.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Stage names where a delivery failed.
type Stage string

const (
	StageNone   Stage = ""
	StageBegin  Stage = "begin"
	StageApply  Stage = "apply"
	StageCommit Stage = "commit"
)

// Points are the points a database-side fault fires at.
var Points = []faults.Point{faults.AtEffect, faults.AtCommit}

// FailedAt is where a fault at point makes a delivery fail.
func FailedAt(p faults.Point) Stage {
	if p == faults.AtCommit {
		return StageCommit
	}
	return StageApply
}

// Deliver applies eff for d in a transaction of its own, as an
// implementation would (without a marker), and says where it failed.
func Deliver(ctx context.Context, db Beginner, eff adapters.Effect, d adapters.Delivery) (Stage, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return StageBegin, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := eff.Apply(ctx, tx, d); err != nil {
		return StageApply, err
	}
	if err := tx.Commit(ctx); err != nil {
		return StageCommit, fmt.Errorf("commit: %w", err)
	}
	return StageNone, nil
}

// Delivery is attempt of the event ns/id, with a payload of its own.
func Delivery(ns, id string, attempt int) adapters.Delivery {
	return adapters.Delivery{Event: adapters.Event{Namespace: ns, ID: id, Payload: []byte("payload of " + id)}, Attempt: attempt}
}

// Connect opens a connection of its own, tagged with applicationName when
// that is not empty, closed when the test ends.
func Connect(t testing.TB, applicationName string) *pgx.Conn {
	t.Helper()
	return ConnectTo(t, pgtest.DSN(t), applicationName)
}

// ConnectAs is Connect as role r.
func ConnectAs(t testing.TB, r pgtest.Role, applicationName string) *pgx.Conn {
	t.Helper()
	return ConnectTo(t, r.As(t, pgtest.DSN(t)), applicationName)
}

// ConnectTo is Connect on dsn: through a proxy, say.
func ConnectTo(t testing.TB, dsn, applicationName string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = applicationName
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatalf("connect as %q: %v", applicationName, err)
	}
	t.Cleanup(func() {
		// Bounded: a connection through a proxy that is gone may not
		// close at once.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	})
	return conn
}

// WantDead checks that err is what a terminated backend leaves, that conn
// knows it is closed, and that the backend pid is gone from the server.
func WantDead(t testing.TB, pool *pgxpool.Pool, conn *pgx.Conn, pid uint32, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if pgErr.Code != "57P01" {
			t.Errorf("error has SQLSTATE %s, want 57P01 (admin shutdown): %v", pgErr.Code, err)
		}
	} else if !conn.IsClosed() {
		t.Errorf("error is neither SQLSTATE 57P01 nor a closed connection: %v", err)
	}
	if !conn.IsClosed() {
		t.Errorf("connection of backend %d is not closed", pid)
	}
	if err := conn.Ping(t.Context()); err == nil {
		t.Errorf("connection of backend %d still answers a ping", pid)
	}
	waitBackendGone(t, pool, pid)
}

// waitBackendGone polls pg_stat_activity until pid is gone.
func waitBackendGone(t testing.TB, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	waitFor(t, 10*time.Millisecond, func(ctx context.Context) (bool, string) {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n); err != nil {
			t.Fatalf("backend %d: %v", pid, err)
		}
		return n == 0, fmt.Sprintf("backend %d is still in pg_stat_activity", pid)
	})
}

// waitFor runs look every interval until it says it is done, for at most
// 10s; then it fails the test with what the last look saw.
func waitFor(t testing.TB, every time.Duration, look func(ctx context.Context) (done bool, saw string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		done, saw := look(ctx)
		if done {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal(saw)
		case <-tick.C:
		}
	}
}

// Alive reports whether conn answers a ping.
func Alive(t testing.TB, conn *pgx.Conn) bool {
	t.Helper()
	return conn.Ping(t.Context()) == nil
}

// Sleeping reports whether backend pid sleeps in pg_sleep.
func Sleeping(t testing.TB, pool *pgxpool.Pool, pid uint32) bool {
	t.Helper()
	var asleep bool
	err := pool.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'PgSleep')", int32(pid)).Scan(&asleep)
	if err != nil {
		t.Fatalf("backend %d: %v", pid, err)
	}
	return asleep
}

// WaitSleeping waits, for at most 10s, until the backends of conns all
// sleep in pg_sleep.
func WaitSleeping(t testing.TB, pool *pgxpool.Pool, conns ...*pgx.Conn) {
	t.Helper()
	var pids []int32
	for _, c := range conns {
		pids = append(pids, int32(c.PgConn().PID()))
	}
	waitFor(t, 5*time.Millisecond, func(ctx context.Context) (bool, string) {
		var got int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND pid = ANY($1)", pids).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got == len(pids), fmt.Sprintf("%d of backends %v sleep; want all", got, pids)
	})
}
