package faults_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

// TestCancelSleepingFailsTheSleepingTransaction holds a delivery in a sleep
// fault, cancels it, and checks that it fails where it slept, rolls back,
// keeps its connection, and that nothing else was cancelled: a tagged
// connection that does not sleep, another run's sleeping connection, an
// untagged one, and one of another role that carries the run's prefix.
func TestCancelSleepingFailsTheSleepingTransaction(t *testing.T) {
	for _, point := range points {
		t.Run(string(point), func(t *testing.T) {
			fx := setup(t)
			run := "harmless-faults-test-" + unique(t)
			d := delivery("ns", "42", 1)
			sleep := fx.arm(t, faults.Plan{Namespace: "ns", ID: "42", Attempt: 1, Point: point, Action: faults.Sleep, Sleep: time.Minute})
			conn := connect(t, run+"-w1")
			idle := connect(t, run+"-w2")
			if _, err := idle.Exec(t.Context(), "BEGIN"); err != nil {
				t.Fatal(err)
			}
			// Another run's connection, an untagged one, and one of another
			// role that carries this run's prefix: the prefix is whatever a
			// client says, so it alone does not make a connection the run's.
			others := []*pgx.Conn{connect(t, "harmless-faults-test-"+unique(t)), connect(t, ""), connectAs(t, pgtest.NewRole(t), run+"-w3")}
			asleep := make(chan error, len(others))
			for _, c := range others {
				go func() {
					_, err := c.Exec(t.Context(), "SELECT pg_sleep(60)")
					asleep <- err
				}()
			}

			type result struct {
				at  stage
				err error
			}
			done := make(chan result, 1)
			go func() {
				at, err := deliver(t.Context(), conn, fx.effect(nil), d)
				done <- result{at, err}
			}()
			waitSleeping(t, fx, append([]*pgx.Conn{conn}, others...)...)
			pids, err := faults.CancelSleeping(t.Context(), fx.pool, run)
			if err != nil {
				t.Fatal(err)
			}
			if want := []int{int(conn.PgConn().PID())}; !slices.Equal(pids, want) {
				t.Errorf("cancelled %v; want %v, the sleeping delivery's backend", pids, want)
			}
			r := <-done
			var pgErr *pgconn.PgError
			if r.at != failedAt(point) || !errors.As(r.err, &pgErr) || pgErr.Code != "57014" {
				t.Errorf("the delivery failed at %q with %v; want at %q with SQLSTATE 57014", r.at, r.err, failedAt(point))
			}
			fx.wantEffects(t, d, 0)
			fx.wantFired(t, sleep, 1)
			for _, c := range []*pgx.Conn{conn, idle} {
				if !alive(t, c) {
					t.Errorf("connection %d died", c.PgConn().PID())
				}
			}
			ended := 0
			select {
			case err := <-asleep:
				ended++
				t.Errorf("a sleep of another run, of an untagged connection or of another role ended: %v", err)
			default:
			}
			// End the other sleeps, and wait for them: their connections
			// are closed when the test ends.
			for _, c := range others {
				if _, err := fx.pool.Exec(t.Context(), "SELECT pg_cancel_backend($1)", int32(c.PgConn().PID())); err != nil {
					t.Fatal(err)
				}
			}
			for range len(others) - ended {
				<-asleep
			}
		})
	}
}

// waitSleeping waits until the backends of conns all sleep in pg_sleep.
func waitSleeping(t *testing.T, fx fixture, conns ...*pgx.Conn) {
	t.Helper()
	var pids []int32
	for _, c := range conns {
		pids = append(pids, int32(c.PgConn().PID()))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var got int
		if err := fx.pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND pid = ANY($1)", pids).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got == len(pids) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of backends %v sleep; want all", got, pids)
		case <-tick.C:
		}
	}
}

func TestCancelSleepingRefusesForeignPrefixes(t *testing.T) {
	pool := setup(t).pool
	for _, prefix := range []string{"", "app-", "harmless-"} {
		if pids, err := faults.CancelSleeping(t.Context(), pool, prefix); err == nil || !strings.Contains(err.Error(), "refusing") {
			t.Errorf("CancelSleeping(%q) = %v, %v; want a refusal", prefix, pids, err)
		}
	}
}
