package faults_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/internal/faulttest"
	"github.com/harmless-dev/harmless/internal/hooks"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

func TestSleep(t *testing.T) {
	const nap = 150 * time.Millisecond
	for _, point := range faulttest.Points {
		t.Run(string(point), func(t *testing.T) {
			fx := faulttest.Setup(t)
			d := faulttest.Delivery("ns", "42", 1)
			f := fx.Arm(t, faults.Plan{Namespace: "ns", ID: "42", Point: point, Action: faults.Sleep, Sleep: nap})

			start := time.Now()
			if at, err := faulttest.Deliver(t.Context(), fx.Pool, fx.Effect(nil), d); err != nil {
				t.Fatalf("delivery failed at %s: %v", at, err)
			}
			if took := time.Since(start); took < nap {
				t.Errorf("delivery took %s, less than the %s sleep", took, nap)
			}
			fx.WantEffects(t, d, 1)
			faulttest.WantFired(t, f, 1)
		})
	}
}

// TestFailingFaults delivers on a connection of its own: a raise leaves it
// usable, a terminate kills it.
func TestFailingFaults(t *testing.T) {
	for _, action := range []faults.Action{faults.Raise, faults.Terminate} {
		for _, point := range faulttest.Points {
			t.Run(string(action)+" at "+string(point), func(t *testing.T) {
				fx := faulttest.Setup(t)
				d := faulttest.Delivery("ns", "42", 1)
				f := fx.Arm(t, faults.Plan{Namespace: "ns", ID: "42", Attempt: 1, Point: point, Action: action})
				faulttest.WantFired(t, f, 0)
				conn := faulttest.Connect(t, "harmless-faults-test-"+faulttest.Unique(t))

				at, err := faulttest.Deliver(t.Context(), conn, fx.Effect(nil), d)
				if at != faulttest.FailedAt(point) {
					t.Fatalf("delivery failed at %q (%v), want at %q", at, err, faulttest.FailedAt(point))
				}
				t.Logf("delivery failed at %s: %v", at, err)
				if action == faults.Raise {
					if !faults.IsInjected(err) {
						t.Errorf("IsInjected(%v) = false", err)
					}
					if !strings.Contains(err.Error(), f.String()) {
						t.Errorf("error %q does not name the fault %q", err, f)
					}
					if !faulttest.Alive(t, conn) {
						t.Error("a raise fault killed the connection")
					}
				} else {
					faulttest.WantDead(t, fx.Pool, conn, conn.PgConn().PID(), err)
				}
				fx.WantEffects(t, d, 0)
				faulttest.WantFired(t, f, 1)
			})
		}
	}
}

func TestAttemptMatching(t *testing.T) {
	tests := []struct {
		planned   int
		delivered []int
		fires     []bool // per delivery
	}{
		{planned: 2, delivered: []int{1, 3, 2}, fires: []bool{false, false, true}},
		{planned: 0, delivered: []int{1, 2, 7}, fires: []bool{true, true, true}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("planned attempt %d", tt.planned), func(t *testing.T) {
			fx := faulttest.Setup(t)
			f := fx.Arm(t, faults.Plan{Namespace: "ns", ID: "42", Attempt: tt.planned, Point: faults.AtEffect, Action: faults.Raise})
			var fired, applied int
			for i, attempt := range tt.delivered {
				_, err := faulttest.Deliver(t.Context(), fx.Pool, fx.Effect(nil), faulttest.Delivery("ns", "42", attempt))
				switch {
				case tt.fires[i] && !faults.IsInjected(err):
					t.Errorf("attempt %d: got %v, want the injected fault", attempt, err)
				case !tt.fires[i] && err != nil:
					t.Errorf("attempt %d: got %v, want no fault", attempt, err)
				}
				if tt.fires[i] {
					fired++
				} else {
					applied++
				}
			}
			fx.WantEffects(t, faulttest.Delivery("ns", "42", 0), applied)
			faulttest.WantFired(t, f, int64(fired))
		})
	}
}

func TestPlanForAnotherEventDoesNotFire(t *testing.T) {
	fx := faulttest.Setup(t)
	f := fx.Arm(t, faults.Plan{Namespace: "ns", ID: "42", Point: faults.AtEffect, Action: faults.Raise})
	others := []struct{ name, ns, id string }{
		{"other id", "ns", "43"},
		{"other namespace", "other", "42"},
		{"id prefix", "ns", "4"},
		{"id extended", "ns", "420"},
		{"case differs", "NS", "42"},
		{"boundary moved", "ns4", "2"},
		{"empty namespace", "", "42"},
	}
	for _, o := range others {
		t.Run(o.name, func(t *testing.T) {
			d := faulttest.Delivery(o.ns, o.id, 1)
			if at, err := faulttest.Deliver(t.Context(), fx.Pool, fx.Effect(nil), d); err != nil {
				t.Errorf("%s failed at %s: %v", d.Event, at, err)
			}
			fx.WantEffects(t, d, 1)
		})
	}
	faulttest.WantFired(t, f, 0)
}

func TestFaultsOnOneInsertFireInPlanOrder(t *testing.T) {
	type armed struct {
		point  faults.Point
		action faults.Action
		fires  int64
	}
	tests := []struct {
		name  string
		plans []armed
	}{
		{"sleep then raise", []armed{{faults.AtEffect, faults.Sleep, 1}, {faults.AtEffect, faults.Raise, 1}}},
		{"raise then sleep", []armed{{faults.AtEffect, faults.Raise, 1}, {faults.AtEffect, faults.Sleep, 0}}},
		{"raise at effect stops commit", []armed{{faults.AtCommit, faults.Raise, 0}, {faults.AtEffect, faults.Raise, 1}}},
		{"sleep at effect then raise at commit", []armed{{faults.AtCommit, faults.Raise, 1}, {faults.AtEffect, faults.Sleep, 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := faulttest.Setup(t)
			var armedFaults []*faults.Fault
			for _, a := range tt.plans {
				p := faults.Plan{Namespace: "ns", ID: "42", Point: a.point, Action: a.action}
				if a.action == faults.Sleep {
					p.Sleep = time.Millisecond
				}
				armedFaults = append(armedFaults, fx.Arm(t, p))
			}
			d := faulttest.Delivery("ns", "42", 1)
			if _, err := faulttest.Deliver(t.Context(), fx.Pool, fx.Effect(nil), d); !faults.IsInjected(err) {
				t.Fatalf("got %v, want the injected fault", err)
			}
			fx.WantEffects(t, d, 0)
			for i, f := range armedFaults {
				faulttest.WantFired(t, f, tt.plans[i].fires)
			}
		})
	}
}

func TestArmRejectsInvalidPlans(t *testing.T) {
	fx := faulttest.Setup(t)
	valid := faults.Plan{Namespace: "ns", ID: "42", Attempt: 1, Point: faults.AtEffect, Action: faults.Raise}
	tests := []struct {
		name   string
		change func(*faults.Plan)
		want   string
	}{
		{"no point", func(p *faults.Plan) { p.Point = "" }, "unknown point"},
		{"unknown point", func(p *faults.Plan) { p.Point = "rollback" }, `unknown point "rollback"`},
		{"unknown action", func(p *faults.Plan) { p.Action = "explode" }, `unknown action "explode"`},
		{"negative attempt", func(p *faults.Plan) { p.Attempt = -1 }, "attempt -1 out of range"},
		{"no event id", func(p *faults.Plan) { p.ID = "" }, "no event id"},
		{"sleep without duration", func(p *faults.Plan) { p.Action = faults.Sleep }, "needs a sleep duration"},
		{"negative sleep", func(p *faults.Plan) { p.Action, p.Sleep = faults.Sleep, -time.Second }, "needs a sleep duration"},
		{"sleep under a microsecond", func(p *faults.Plan) { p.Action, p.Sleep = faults.Sleep, time.Nanosecond }, "at least 1µs"},
		{"raise with duration", func(p *faults.Plan) { p.Sleep = time.Second }, "takes no sleep duration"},
		{"terminate with duration", func(p *faults.Plan) { p.Action, p.Sleep = faults.Terminate, time.Second }, "takes no sleep duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := valid
			tt.change(&p)
			f, err := faults.Arm(t.Context(), fx.Pool, fx.Schema, p)
			if err == nil {
				t.Fatalf("Arm(%+v) armed %s, want an error", p, f)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "invalid plan") {
				t.Errorf("Arm(%+v) = %q, want an invalid plan error saying %q", p, err, tt.want)
			}
		})
	}
	// None of them was recorded: a delivery the valid plan would match
	// commits.
	d := faulttest.Delivery("ns", "42", 1)
	if at, err := faulttest.Deliver(t.Context(), fx.Pool, fx.Effect(nil), d); err != nil {
		t.Errorf("delivery failed at %s: %v", at, err)
	}
}

// TestInstallCreatesTheLedger installs the fault points in a schema that
// has no ledger yet, as a test outside the harness does, and fails an
// effect inserted with the statement Install documents.
func TestInstallCreatesTheLedger(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := "harmless_test_faults_" + faulttest.Unique(t)
	quoted := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(t.Context(), "CREATE SCHEMA "+quoted); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.WithoutCancel(t.Context()), "DROP SCHEMA "+quoted+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	if err := faults.Install(t.Context(), pool, schema); err != nil {
		t.Fatal(err)
	}
	f, err := faults.Arm(t.Context(), pool, schema, faults.Plan{Namespace: "ns", ID: "42", Times: 1, Point: faults.AtEffect, Action: faults.Raise})
	if err != nil {
		t.Fatal(err)
	}
	insert := "INSERT INTO " + quoted + ".harmless_effects (namespace, event_id, payload_digest, attempt) VALUES ($1, $2, $3, $4)"
	for i, want := range []bool{true, false} {
		_, err := pool.Exec(t.Context(), insert, []byte("ns"), []byte("42"), adapters.PayloadDigest([]byte("payload")), 1)
		if got := faults.IsInjected(err); got != want || (!want && err != nil) {
			t.Errorf("insert %d: %v; want injected %t", i+1, err, want)
		}
	}
	faulttest.WantFired(t, f, 1)
}

func TestArmWithoutInstall(t *testing.T) {
	fx := faulttest.Setup(t)
	_, err := faults.Arm(t.Context(), fx.Pool, fx.Schema+"_missing", faults.Plan{ID: "42", Point: faults.AtEffect, Action: faults.Raise})
	if err == nil || !strings.Contains(err.Error(), "arm fault raise at effect") {
		t.Errorf("Arm in a schema without fault points = %v, want an error naming the fault", err)
	}
}

func TestFaultString(t *testing.T) {
	fx := faulttest.Setup(t)
	tests := []struct {
		plan       faults.Plan
		want, kind string
	}{
		{faults.Plan{Namespace: "ns", ID: "42", Attempt: 1, Point: faults.AtCommit, Action: faults.Raise}, "raise at commit for ns/42 attempt 1", "db:raise@commit"},
		{faults.Plan{Namespace: "ns", ID: "42", Point: faults.AtEffect, Action: faults.Sleep, Sleep: 250 * time.Millisecond}, "sleep 250ms at effect for ns/42 every attempt", "db:sleep@effect"},
		{faults.Plan{Namespace: "a/b", ID: "x y", Attempt: 3, Point: faults.AtEffect, Action: faults.Terminate}, `terminate at effect for "a/b"/"x y" attempt 3`, "db:terminate@effect"},
	}
	for _, tt := range tests {
		f := fx.Arm(t, tt.plan)
		if got := f.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
		if got := f.Kind(); got != tt.kind {
			t.Errorf("Kind() = %q, want %q", got, tt.kind)
		}
	}
}

func TestIsInjected(t *testing.T) {
	injected := &pgconn.PgError{Code: "HF001"} // the SQLSTATE the package documents
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain error", errors.New("boom"), false},
		{"other SQLSTATE", &pgconn.PgError{Code: "23505"}, false},
		{"injected", injected, true},
		{"injected, wrapped", fmt.Errorf("deliver: %w", injected), true},
		{"hook error", fmt.Errorf("x: %w", hooks.ErrInjected), false},
	}
	for _, tt := range tests {
		if got := faults.IsInjected(tt.err); got != tt.want {
			t.Errorf("%s: IsInjected(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

// TestDisarm checks that a disarmed fault never fires again, that the
// firings before it are still counted, and that only the disarmed fault
// stops.
func TestDisarm(t *testing.T) {
	fx := faulttest.Setup(t)
	disarmed := fx.Arm(t, faults.Plan{Namespace: "ns", ID: "42", Point: faults.AtEffect, Action: faults.Raise})
	other := fx.Arm(t, faults.Plan{Namespace: "ns", ID: "43", Point: faults.AtCommit, Action: faults.Raise})

	if _, err := faulttest.Deliver(t.Context(), fx.Pool, fx.Effect(nil), faulttest.Delivery("ns", "42", 1)); !faults.IsInjected(err) {
		t.Fatalf("before Disarm: got %v, want the injected fault", err)
	}
	if err := disarmed.Disarm(t.Context()); err != nil {
		t.Fatalf("Disarm: %v", err)
	}
	d := faulttest.Delivery("ns", "42", 2)
	if at, err := faulttest.Deliver(t.Context(), fx.Pool, fx.Effect(nil), d); err != nil {
		t.Errorf("after Disarm the delivery failed at %s: %v", at, err)
	}
	fx.WantEffects(t, d, 1)
	faulttest.WantFired(t, disarmed, 1)

	if err := disarmed.Disarm(t.Context()); err != nil {
		t.Errorf("Disarm of a disarmed fault: %v", err)
	}
	if _, err := faulttest.Deliver(t.Context(), fx.Pool, fx.Effect(nil), faulttest.Delivery("ns", "43", 1)); !faults.IsInjected(err) {
		t.Errorf("a fault that was not disarmed: got %v, want the injected fault", err)
	}
	faulttest.WantFired(t, other, 1)
}

// TestDisarmLeavesASleepingTransactionAsleep disarms a sleep fault while a
// transaction sleeps in it: the transaction sleeps on, and the next
// delivery is not held.
func TestDisarmLeavesASleepingTransactionAsleep(t *testing.T) {
	fx := faulttest.Setup(t)
	f := fx.Arm(t, faults.Plan{Namespace: "ns", ID: "42", Point: faults.AtEffect, Action: faults.Sleep, Sleep: time.Hour})
	conn := faulttest.Connect(t, "harmless-faults-test-"+faulttest.Unique(t))
	pid := conn.PgConn().PID()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := faulttest.Deliver(ctx, conn, fx.Effect(nil), faulttest.Delivery("ns", "42", 1))
		done <- err
	}()
	defer func() {
		cancel() // pgx cancels the sleep on the server
		if err := <-done; err == nil {
			t.Error("the delivery held by an hour's sleep committed")
		}
	}()
	faulttest.WaitSleeping(t, fx.Pool, conn)
	if err := f.Disarm(t.Context()); err != nil {
		t.Fatalf("Disarm: %v", err)
	}
	if !faulttest.Sleeping(t, fx.Pool, pid) {
		t.Error("the transaction inside the fault stopped sleeping when the fault was disarmed")
	}
	// Bounded, so that a fault still armed fails the test instead of
	// holding it for an hour.
	bounded, stop := context.WithTimeout(t.Context(), 30*time.Second)
	defer stop()
	d := faulttest.Delivery("ns", "42", 2)
	if at, err := faulttest.Deliver(bounded, fx.Pool, fx.Effect(nil), d); err != nil {
		t.Errorf("after Disarm the delivery failed at %s: %v", at, err)
	}
	fx.WantEffects(t, d, 1)
	faulttest.WantFired(t, f, 1)
}

// TestTimesFiresOncePerEvent: a fault planned to fire once fails the first
// delivery to reach its point, and none after it, whatever attempt number
// they carry (an inbox retries its stored copy with the same one).
func TestTimesFiresOncePerEvent(t *testing.T) {
	for _, point := range faulttest.Points {
		t.Run(string(point), func(t *testing.T) {
			fx := faulttest.Setup(t)
			f := fx.Arm(t, faults.Plan{Namespace: "ns", ID: "42", Times: 1, Point: point, Action: faults.Raise})
			if !strings.Contains(f.String(), "once") {
				t.Errorf("the fault reads %q; want it to say it fires once", f)
			}
			for i, want := range []bool{true, false, false} {
				// The same attempt number every time, as an inbox's retries.
				at, err := faulttest.Deliver(t.Context(), fx.Pool, fx.Effect(nil), faulttest.Delivery("ns", "42", 1))
				if failed := err != nil; failed != want {
					t.Fatalf("delivery %d failed at %q (%v); want failed=%t", i+1, at, err, want)
				}
			}
			faulttest.WantFired(t, f, 1)
			fx.WantEffects(t, faulttest.Delivery("ns", "42", 1), 2)
		})
	}
}

// TestSleepThenRaise holds the transaction, then fails it.
func TestSleepThenRaise(t *testing.T) {
	const nap = 100 * time.Millisecond
	fx := faulttest.Setup(t)
	f := fx.Arm(t, faults.Plan{Namespace: "ns", ID: "42", Times: 1, Point: faults.AtEffect, Action: faults.SleepThenRaise, Sleep: nap})
	start := time.Now()
	at, err := faulttest.Deliver(t.Context(), fx.Pool, fx.Effect(nil), faulttest.Delivery("ns", "42", 1))
	if at != faulttest.StageApply || !faults.IsInjected(err) {
		t.Fatalf("the delivery failed at %q with %v; want the injected error at the effect", at, err)
	}
	if took := time.Since(start); took < nap {
		t.Errorf("the delivery failed after %s, before the sleep of %s ended", took, nap)
	}
	faulttest.WantFired(t, f, 1)
	fx.WantEffects(t, faulttest.Delivery("ns", "42", 1), 0)
}

// TestGate holds deliveries at the point until it is opened, in any
// isolation level, and counts those it holds.
func TestGate(t *testing.T) {
	fx := faulttest.Setup(t)
	f := fx.Arm(t, faults.Plan{Namespace: "ns", ID: "42", Point: faults.AtEffect, Action: faults.Gate, Sleep: time.Minute})
	ctx := t.Context()
	done := make(chan error, 2)
	for _, iso := range []string{"READ COMMITTED", "SERIALIZABLE"} {
		go func() {
			done <- pgx.BeginFunc(ctx, fx.Pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL "+iso); err != nil {
					return err
				}
				return fx.Effect(nil).Apply(ctx, tx, faulttest.Delivery("ns", "42", 1))
			})
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := f.Held(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gate holds %d deliveries; want 2", n)
		}
		select {
		case err := <-done:
			t.Fatalf("a delivery went through the closed gate: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := f.Open(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("a delivery through the opened gate: %v", err)
		}
	}
	if n, err := f.Held(ctx); err != nil || n != 0 {
		t.Errorf("after the gate opened it holds %d, %v; want 0", n, err)
	}
	faulttest.WantFired(t, f, 2)
}
