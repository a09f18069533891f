package harness_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/suite/docker"
)

func TestCrashServerRefusesAServerTheRunDoesNotOwn(t *testing.T) {
	r := startRun(t, ampleTimeout)
	if r.Server().Owned() {
		t.Fatal("a run on a DSN owns its server")
	}
	_, err := r.CrashServer(t.Context())
	if err == nil || !strings.Contains(err.Error(), "refusing to crash") {
		t.Fatalf("CrashServer on a server named by a DSN: %v; want a refusal", err)
	}
	if err := r.Admin().Ping(t.Context()); err != nil {
		t.Fatalf("the server is gone after a refused crash: %v", err)
	}
}

func TestRecoveryProblemWithoutACrash(t *testing.T) {
	start := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	crash := harness.Crash{Server: "a server", StartedBefore: start}
	for _, tc := range []struct {
		name string
		rec  harness.Recovery
		says string
	}{
		{"real", harness.Recovery{Crash: crash, StartedAfter: start.Add(time.Second), OldConnErr: errors.New("conn closed")}, ""},
		{"same start time", harness.Recovery{Crash: crash, StartedAfter: start, OldConnErr: errors.New("conn closed")}, "start time is still"},
		{"old connection alive", harness.Recovery{Crash: crash, StartedAfter: start.Add(time.Second)}, "still works"},
	} {
		got := tc.rec.Problem()
		if tc.says == "" && got != "" || !strings.Contains(got, tc.says) {
			t.Errorf("%s: Problem() = %q; want %q", tc.name, got, tc.says)
		}
	}
}

// TestCrashAndRestartServer crashes a throwaway cluster of the run's own
// and checks that the run recovers (see crashAndCheck).
func TestCrashAndRestartServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	rec := crashAndCheck(ctx, t, startClusterRun(ctx, t))
	if rec.Moved {
		t.Errorf("the cluster came back at another address: %s", rec)
	}
}

// TestCrashAndRestartAContainer crashes a container of the run's own
// (SIGKILL), which comes back on a new host port, and checks that the run
// and an implementation connected through the play's proxy recover (see
// crashAndCheck). It is skipped where no container engine or image is
// available, unless HARMLESS_REQUIRE_CONTAINER=1, as in CI.
func TestCrashAndRestartAContainer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	r, err := harness.Start(ctx, harness.Options{Provision: provision.Options{Only: provision.KindContainer, Container: provision.Engine(docker.Start)}, Logf: t.Logf})
	if errors.Is(err, provision.ErrNoDatabase) && os.Getenv("HARMLESS_REQUIRE_CONTAINER") != "1" {
		t.Skipf("no container for the run (start an engine with ci/start-docker.sh, build the image with ci/build-postgres-image.sh, source ci/env.sh): %v", err)
	}
	if err != nil {
		t.Fatalf("start a run in a container: %v", err)
	}
	atEnd(t, "run "+r.ID(), r.Close)
	if r.Server().Kind != provision.KindContainer {
		t.Fatalf("the run is on a %s; want a container", r.Server().Kind)
	}
	rec := crashAndCheck(ctx, t, r)
	t.Logf("the container came back at a new address: %t", rec.Moved)
}

// crashAndCheck crashes r's server and checks that the run recovers:
// committed data is there, a connection opened before the crash is gone,
// the keeper is back (so no other run takes the run's schemas for
// leftovers), the admin pool and the play work, and the play's proxy
// reaches the restarted server, wherever it now is, at the address the
// implementation was given before the crash.
func crashAndCheck(ctx context.Context, t *testing.T, r *harness.Run) harness.Recovery {
	t.Helper()
	if !r.Server().Owned() {
		t.Fatalf("the run does not own its %s", r.Server().Kind)
	}
	play := newPlay(t, r, delivering("crash", nil))
	proxy := play.Proxy()
	table := pgx.Identifier{play.Schema(), "survivor"}.Sanitize()
	if _, err := r.Admin().Exec(ctx, `CREATE TABLE `+table+` (v text); INSERT INTO `+table+` VALUES ('committed')`); err != nil {
		t.Fatal(err)
	}
	env, err := play.Env(1)
	if err != nil {
		t.Fatal(err)
	}
	before := connect(t, env.DSN)

	c, err := r.CrashServer(ctx)
	if err != nil {
		t.Fatalf("CrashServer: %v", err)
	}
	if err := r.Admin().Ping(ctx); err == nil {
		t.Fatal("the admin pool still reaches the server after the crash")
	}
	rec, err := r.RestartServer(ctx, c)
	if err != nil {
		t.Fatalf("RestartServer: %v", err)
	}
	t.Logf("%s", rec)
	if p := rec.Problem(); p != "" || rec.OldConnErr == nil {
		t.Errorf("recovery %+v: problem %q; want a real crash", rec, p)
	}
	if err := before.Ping(ctx); err == nil {
		t.Error("a connection opened before the crash still works")
	}

	var v string
	if err := r.Admin().QueryRow(ctx, `SELECT v FROM `+table).Scan(&v); err != nil || v != "committed" {
		t.Errorf("after the restart: %q, %v; want the committed row", v, err)
	}
	var keepers int
	if err := r.Admin().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, r.AppNamePrefix()+"keeper").Scan(&keepers); err != nil || keepers != 1 {
		t.Errorf("keeper connections after the restart: %d, %v; want 1", keepers, err)
	}
	if _, err := play.Effects(ctx, event("after-restart")); err != nil {
		t.Errorf("the play cannot read its ledger after the restart: %v", err)
	}
	if n, err := play.StateRows(ctx); err != nil || n != 1 {
		t.Errorf("the play counts %d rows of state after the restart, %v; want the 1 committed", n, err)
	}

	// The implementation's DSN, handed out before the crash, still leads to
	// the server: the proxy follows it.
	server, err := pgx.ParseConfig(r.Server().DSN())
	if err != nil {
		t.Fatal(err)
	}
	ls := proxy.Listeners(1)
	if want := net.JoinHostPort(server.Host, strconv.Itoa(int(server.Port))); len(ls) != 1 || ls[0].Upstream() != want {
		for _, l := range ls {
			t.Errorf("instance 1's listener %s leads to %s; want the restarted server at %s", l.Addr(), l.Upstream(), want)
		}
		if len(ls) != 1 {
			t.Errorf("instance 1 has %d listeners on one server; want 1", len(ls))
		}
	}
	var started time.Time
	if err := connect(t, env.DSN).QueryRow(ctx, `SELECT pg_postmaster_start_time()`).Scan(&started); err != nil {
		t.Errorf("the DSN handed out before the crash does not reach the restarted server: %v", err)
	} else if !started.Equal(rec.StartedAfter) {
		t.Errorf("the DSN handed out before the crash reaches a server started at %s; want the restarted one, started at %s", started, rec.StartedAfter)
	}

	if _, err := r.RestartServer(ctx, c); err == nil {
		t.Error("RestartServer of a running server: no error")
	}
	return rec
}

// startClusterRun starts a run on a throwaway cluster of its own, closed
// when the test ends. It skips the test where no PostgreSQL server binaries
// are found.
func startClusterRun(ctx context.Context, t *testing.T) *harness.Run {
	t.Helper()
	r, err := harness.Start(ctx, harness.Options{Provision: provision.Options{Only: provision.KindCluster}, Logf: t.Logf})
	if errors.Is(err, provision.ErrNoDatabase) && strings.HasSuffix(err.Error(), ": not found") {
		t.Skipf("no PostgreSQL server binaries for a throwaway cluster: %v", err)
	}
	if err != nil {
		t.Fatalf("start a run on a throwaway cluster: %v", err)
	}
	atEnd(t, "run "+r.ID(), r.Close)
	return r
}

func TestHoldWritesHoldsWritesNotReads(t *testing.T) {
	ctx := t.Context()
	r := startRun(t, ampleTimeout)
	play := newPlay(t, r, delivering("hold", nil))
	if h, err := play.HoldWrites(ctx); h != nil || err != nil {
		t.Fatalf("HoldWrites without tables: %v, %v; want nothing to hold", h, err)
	}
	table := pgx.Identifier{play.Schema(), "markers"}.Sanitize()
	if _, err := r.Admin().Exec(ctx, `CREATE TABLE `+table+` (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	h, err := play.HoldWrites(ctx)
	if err != nil || h == nil {
		t.Fatalf("HoldWrites: %v, %v", h, err)
	}
	if !strings.Contains(h.String(), "markers") {
		t.Errorf("the hold is on %s; want the markers table", h)
	}
	env, err := play.Env(1)
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, env.DSN)
	var read int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&read); err != nil {
		t.Fatalf("a read while writes are held: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, `INSERT INTO `+table+` VALUES ('1')`)
		done <- err
	}()
	eventually(t, patience, "the insert waits for the hold", func() bool {
		n, err := h.Waiting(ctx)
		return err == nil && n == 1
	})
	select {
	case err := <-done:
		t.Fatalf("the insert ended while writes were held: %v", err)
	default:
	}
	if err := h.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := <-done; err != nil {
		t.Errorf("the insert after the release: %v", err)
	}
}

// TestGateEffectsHoldsWithoutALock gates an event's effect: a delivery
// stops there, inside its transaction, and applies once the gate opens. It
// waits on no lock: a delivery whose lock_timeout is 10 ms is held as
// long as the gate is closed, and does not fail for it.
func TestGateEffectsHoldsWithoutALock(t *testing.T) {
	ctx := t.Context()
	r := startRun(t, ampleTimeout)
	impatient := adapters.Adapter{Name: "impatient", New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
		pool, err := pgxpool.New(ctx, env.DSN)
		if err != nil {
			return nil, err
		}
		return fake{
			deliver: func(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '10ms'"); err != nil {
						return err
					}
					return env.Effect.Apply(ctx, tx, d)
				})
				return adapters.Applied, err
			},
			close: func(context.Context) error { pool.Close(); return nil },
		}, nil
	}}
	play := newPlay(t, r, impatient)
	ev := event("gated")
	g, err := play.GateEffects(ctx, []adapters.Event{ev}, time.Minute)
	if err != nil {
		t.Fatalf("GateEffects: %v", err)
	}
	done := make(chan harness.Attempt, 1)
	go func() { done <- play.Deliver(ctx, 1, ev) }()
	eventually(t, patience, "the delivery waits at the gate", func() bool {
		n, err := g.Waiting(ctx)
		return err == nil && n == 1
	})
	if a, err := play.Activity(ctx); err != nil || a.LockWaits != 0 {
		t.Errorf("while gated: %v, %v; want no connection waiting on a lock", a, err)
	}
	select {
	case a := <-done:
		t.Fatalf("the delivery ended while its effect was gated: %s", a.Result())
	default:
	}
	if err := g.Open(ctx); err != nil {
		t.Fatalf("Open: %v", err)
	}
	if a := <-done; !a.Acked() || a.Outcome != adapters.Applied {
		t.Errorf("the delivery after the gate opened ended %s; want Applied", a.Result())
	}
	if n, err := g.Waiting(ctx); err != nil || n != 0 {
		t.Errorf("after the gate opened it holds %d, %v; want none", n, err)
	}
	if effects, err := play.Effects(ctx, ev); err != nil || len(effects) != 1 {
		t.Errorf("the ledger holds %d effects, %v; want 1", len(effects), err)
	}
}
