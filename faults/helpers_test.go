package faults_test

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

// fixture is one test's schema, with the ledger and the fault points
// installed, on a real server.
type fixture struct {
	pool   *pgxpool.Pool
	schema string
}

func unique(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func setup(t *testing.T) fixture {
	t.Helper()
	ctx := t.Context()
	fx := fixture{pool: pgtest.Pool(t), schema: "harmless_test_faults_" + unique(t)}
	quoted := pgx.Identifier{fx.schema}.Sanitize()
	if _, err := fx.pool.Exec(ctx, "CREATE SCHEMA "+quoted); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		// t.Context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := fx.pool.Exec(ctx, "DROP SCHEMA "+quoted+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", fx.schema, err)
		}
	})
	if err := ledger.Install(ctx, fx.pool, fx.schema); err != nil {
		t.Fatal(err)
	}
	if err := faults.Install(ctx, fx.pool, fx.schema); err != nil {
		t.Fatal(err)
	}
	return fx
}

func (fx fixture) arm(t *testing.T, p faults.Plan) *faults.Fault {
	t.Helper()
	f, err := faults.Arm(t.Context(), fx.pool, fx.schema, p)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (fx fixture) effect(hook effect.Hook) adapters.Effect {
	return ledger.Effect(fx.schema, hook)
}

// wantFired checks how often a database-side fault fired.
func (fx fixture) wantFired(t *testing.T, f *faults.Fault, want int64) {
	t.Helper()
	got, err := f.Fired(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("%s fired %d times, want %d", f, got, want)
	}
}

// wantEffects checks how many effects of d's event the ledger holds.
func (fx fixture) wantEffects(t *testing.T, d adapters.Delivery, want int) {
	t.Helper()
	entries, err := ledger.Entries(t.Context(), fx.pool, fx.schema, d.Namespace, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != want {
		t.Errorf("ledger holds %d effects of %s, want %d: %+v", len(entries), d.Event, want, entries)
	}
}

type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// stage names where a delivery failed.
type stage string

const (
	stageNone   stage = ""
	stageApply  stage = "apply"
	stageCommit stage = "commit"
)

// deliver applies eff for d in a transaction of its own, as an
// implementation would (without a marker), and says where it failed.
func deliver(ctx context.Context, db beginner, eff adapters.Effect, d adapters.Delivery) (stage, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return "begin", err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := eff.Apply(ctx, tx, d); err != nil {
		return stageApply, err
	}
	if err := tx.Commit(ctx); err != nil {
		return stageCommit, fmt.Errorf("commit: %w", err)
	}
	return stageNone, nil
}

func delivery(ns, id string, attempt int) adapters.Delivery {
	return adapters.Delivery{Event: adapters.Event{Namespace: ns, ID: id, Payload: []byte("payload of " + id)}, Attempt: attempt}
}

// connect opens a connection of its own, tagged with applicationName when
// that is not empty.
func connect(t *testing.T, applicationName string) *pgx.Conn {
	t.Helper()
	return connectTo(t, pgtest.DSN(t), applicationName)
}

// connectAs is connect as role r.
func connectAs(t *testing.T, r pgtest.Role, applicationName string) *pgx.Conn {
	t.Helper()
	return connectTo(t, r.As(t, pgtest.DSN(t)), applicationName)
}

func connectTo(t *testing.T, dsn, applicationName string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = applicationName
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// wantDead checks that err is what a terminated backend leaves, that conn
// knows it is closed, and that the backend pid is gone from the server.
func wantDead(t *testing.T, pool *pgxpool.Pool, conn *pgx.Conn, pid uint32, err error) {
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

// waitBackendGone polls pg_stat_activity until pid is gone, for at most 10s.
func waitBackendGone(t *testing.T, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n); err != nil {
			t.Fatalf("backend %d: %v", pid, err)
		}
		if n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("backend %d is still in pg_stat_activity", pid)
		case <-tick.C:
		}
	}
}

func alive(t *testing.T, conn *pgx.Conn) bool {
	t.Helper()
	return conn.Ping(t.Context()) == nil
}

// sleeping reports whether backend pid sleeps in pg_sleep.
func sleeping(t *testing.T, pool *pgxpool.Pool, pid uint32) bool {
	t.Helper()
	var asleep bool
	err := pool.QueryRow(t.Context(), "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'PgSleep')", int32(pid)).Scan(&asleep)
	if err != nil {
		t.Fatalf("backend %d: %v", pid, err)
	}
	return asleep
}
