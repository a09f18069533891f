package backends_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/internal/backends"
	"github.com/harmless-dev/harmless/internal/faulttest"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

// TestCancelSleepingFailsTheSleepingTransaction holds a delivery in a sleep
// fault, cancels it, and checks that it fails where it slept, rolls back,
// keeps its connection, and that nothing else was cancelled: a connection
// among the pids given that does not sleep, sleeping connections whose
// pids were not given (one with the same application_name), and one of
// another role whose pid was given.
func TestCancelSleepingFailsTheSleepingTransaction(t *testing.T) {
	for _, point := range faulttest.Points {
		t.Run(string(point), func(t *testing.T) {
			fx := faulttest.Setup(t)
			run := "harmless-faults-test-" + faulttest.Unique(t)
			d := faulttest.Delivery("ns", "42", 1)
			sleep := fx.Arm(t, faults.Plan{Namespace: "ns", ID: "42", Attempt: 1, Point: point, Action: faults.Sleep, Sleep: time.Minute})
			conn := faulttest.Connect(t, run+"-i1")
			idle := faulttest.Connect(t, run+"-i2")
			if _, err := idle.Exec(t.Context(), "BEGIN"); err != nil {
				t.Fatal(err)
			}
			// Another run's connection, one with the same name, and one of
			// another role whose pid is among those given.
			otherRole := faulttest.ConnectAs(t, pgtest.NewRole(t), run+"-i3")
			others := []*pgx.Conn{faulttest.Connect(t, "harmless-faults-test-"+faulttest.Unique(t)), faulttest.Connect(t, run+"-i1"), otherRole}
			asleep := make(chan error, len(others))
			for _, c := range others {
				go func() {
					_, err := c.Exec(t.Context(), "SELECT pg_sleep(60)")
					asleep <- err
				}()
			}

			type result struct {
				at  faulttest.Stage
				err error
			}
			done := make(chan result, 1)
			go func() {
				at, err := faulttest.Deliver(t.Context(), conn, fx.Effect(nil), d)
				done <- result{at, err}
			}()
			faulttest.WaitSleeping(t, fx.Pool, append([]*pgx.Conn{conn}, others...)...)
			given := []int{int(conn.PgConn().PID()), int(idle.PgConn().PID()), int(otherRole.PgConn().PID())}
			pids, err := backends.CancelSleeping(t.Context(), fx.Pool, given)
			if err != nil {
				t.Fatal(err)
			}
			if want := []int{int(conn.PgConn().PID())}; !slices.Equal(pids, want) {
				t.Errorf("cancelled %v; want %v, the sleeping delivery's backend", pids, want)
			}
			r := <-done
			var pgErr *pgconn.PgError
			if r.at != faulttest.FailedAt(point) || !errors.As(r.err, &pgErr) || pgErr.Code != "57014" {
				t.Errorf("the delivery failed at %q with %v; want at %q with SQLSTATE 57014", r.at, r.err, faulttest.FailedAt(point))
			}
			fx.WantEffects(t, d, 0)
			faulttest.WantFired(t, sleep, 1)
			for _, c := range []*pgx.Conn{conn, idle} {
				if !faulttest.Alive(t, c) {
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
				if _, err := fx.Pool.Exec(t.Context(), "SELECT pg_cancel_backend($1)", int32(c.PgConn().PID())); err != nil {
					t.Fatal(err)
				}
			}
			for range len(others) - ended {
				<-asleep
			}
		})
	}
}

func TestCancelSleepingOfNoPIDsCancelsNothing(t *testing.T) {
	pool := pgtest.Pool(t)
	if pids, err := backends.CancelSleeping(t.Context(), pool, nil); err != nil || len(pids) != 0 {
		t.Errorf("CancelSleeping(nil) = %v, %v; want nothing", pids, err)
	}
}
