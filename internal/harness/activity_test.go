package harness_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

// TestActivitySeesTheClaimantAndItsWaiterAndCancelFailsTheClaimant holds
// a claimant of the reference, which names its connections as it pleases,
// in a sleep fault, lets a second delivery of
// the event wait on its claim, and checks that Activity sees one sleeping
// and one waiting, and that CancelSleeping fails the claimant (SQLSTATE
// 57014), so that the waiter claims the event. A connection straight to
// the server that carries the play's application_name prefix and sleeps
// too is neither seen nor cancelled: the instances' connections are those
// that came through the play's proxy.
func TestActivitySeesTheClaimantAndItsWaiterAndCancelFailsTheClaimant(t *testing.T) {
	ctx := t.Context()
	r := startRun(t, ampleTimeout)
	ref := reference.Adapter()
	named := ref
	named.New = func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
		dsn, err := harness.WithApplicationName(env.DSN, "billing-consumer")
		if err != nil {
			return nil, err
		}
		env.DSN = dsn
		return ref.New(ctx, env)
	}
	play, err := r.NewPlay(ctx, named)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		_ = play.Close(ctx)
	})
	ev := event("claimant")
	if _, err := play.Arm(ctx, faults.Plan{Namespace: ev.Namespace, ID: ev.ID, Attempt: 1, Point: faults.AtEffect, Action: faults.Sleep, Sleep: time.Minute}); err != nil {
		t.Fatal(err)
	}
	impostor, err := harness.WithApplicationName(pgtest.DSN(t), play.AppNamePrefix()+"i1")
	if err != nil {
		t.Fatal(err)
	}
	outsider := connect(t, impostor)
	outsiderDone := make(chan error, 1)
	go func() {
		_, err := outsider.Exec(context.Background(), "SELECT pg_sleep(30)")
		outsiderDone <- err
	}()
	t.Cleanup(func() {
		_, _ = r.Admin().Exec(context.Background(), "SELECT pg_cancel_backend($1)", int32(outsider.PgConn().PID()))
		<-outsiderDone
	})
	if a, err := play.Activity(ctx); err != nil || a.LockWaits != 0 || a.Sleeping != 0 {
		t.Fatalf("Activity before any delivery = %v, %v; want nothing waiting or sleeping", a, err)
	}
	claimant, waiter := make(chan harness.Attempt, 1), make(chan harness.Attempt, 1)
	go func() { claimant <- play.Deliver(ctx, 1, ev) }()
	awaitActivity(t, play, "the claimant sleeps", func(a harness.Activity) bool { return a.Sleeping == 1 })
	go func() { waiter <- play.Deliver(ctx, 2, ev) }()
	seen := awaitActivity(t, play, "the second delivery waits", func(a harness.Activity) bool { return a.LockWaits == 1 })
	if seen.Sleeping != 1 || seen.Connections < 2 {
		t.Errorf("Activity = %v; want 1 sleeping and at least 2 connections", seen)
	}

	pids, err := play.CancelSleeping(ctx)
	if err != nil || len(pids) != 1 || pids[0] == int(outsider.PgConn().PID()) {
		t.Fatalf("CancelSleeping = %v, %v; want one backend, the claimant's", pids, err)
	}
	var pgErr *pgconn.PgError
	if a := <-claimant; a.Acked() || !errors.As(a.Err, &pgErr) || pgErr.Code != "57014" {
		t.Errorf("the claimant ended %s; want an error with SQLSTATE 57014", a.Result())
	}
	if a := <-waiter; !a.Acked() || a.Outcome != adapters.Applied {
		t.Errorf("the waiter ended %s; want Applied once the claimant rolled back", a.Result())
	}
	if a, err := play.Activity(ctx); err != nil || a.LockWaits != 0 || a.Sleeping != 0 {
		t.Errorf("Activity at the end = %v, %v; want nothing waiting or sleeping", a, err)
	}
	select {
	case err := <-outsiderDone:
		t.Errorf("the outsider's sleep ended: %v", err)
	default:
	}
}

// awaitActivity polls the play's activity until ok holds, for at most ten
// seconds, and returns it.
func awaitActivity(t *testing.T, play *harness.Play, what string, ok func(harness.Activity) bool) harness.Activity {
	t.Helper()
	var a harness.Activity
	eventually(t, 10*time.Second, what, func() bool {
		var err error
		if a, err = play.Activity(t.Context()); err != nil {
			t.Fatal(err)
		}
		return ok(a)
	})
	return a
}
