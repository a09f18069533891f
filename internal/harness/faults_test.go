package harness_test

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/faults/pgproxy"
	"github.com/harmless-dev/harmless/internal/faultplan"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/hooks"
)

func TestFaultKinds(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{faultplan.Kind(string(faults.Raise), string(faults.AtEffect)), "db:raise@effect"},
		{faultplan.Kind(string(faults.Terminate), string(faults.AtCommit)), "db:terminate@commit"},
		{faultplan.Kind(string(faults.Sleep), string(faults.AtEffect)), "db:sleep@effect"},
		{hooks.Plan{Action: hooks.Panic}.Kind(), "hook:panic"},
		{faultplan.ProxyKind(string(pgproxy.Cut), string(pgproxy.BeforeCommit)), "proxy:cut@before-commit"},
		{faultplan.ProxyKind(string(pgproxy.Cut), string(pgproxy.AfterCommitComplete)), "proxy:cut@after-commit-complete"},
		{faultplan.ProxyKind(string(pgproxy.Cut), string(pgproxy.AfterStatement)), "proxy:cut@after-statement"},
		{harness.ServerCrashKind, "server:crash"},
	} {
		if tc.got != tc.want {
			t.Errorf("kind %q; want %q", tc.got, tc.want)
		}
	}
}

// TestFaultsFiredCountsWhatFired arms a fault of each way of injecting one
// (database-side, Go hook, wire proxy), makes each fire a known number of
// times, and checks the run's counts once the play is closed; a fault that
// never fired is not counted.
func TestFaultsFiredCountsWhatFired(t *testing.T) {
	ctx := t.Context()
	r := startRun(t, ampleTimeout)
	play, err := r.NewPlay(ctx, reference.Adapter())
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			ctx, cancel := cleanupContext()
			defer cancel()
			_ = play.Close(ctx)
		}
	})
	proxy := play.Proxy()

	raised := event("raised")
	raise := armDB(t, play, raised, faults.AtEffect, faults.Raise)
	armDB(t, play, event("never"), faults.AtCommit, faults.Terminate)
	for range 2 {
		if a := play.Deliver(ctx, 1, raised); a.Acked() || !faults.IsInjected(a.Err) {
			t.Fatalf("a delivery with a raise fault armed ended %s; want the injected error", a.Result())
		}
	}
	if n, err := play.Fired(ctx, raise); err != nil || n != 2 {
		t.Fatalf("the raise fault fired %d times (%v); want 2", n, err)
	}

	hooked := event("hooked")
	hook := play.Hooks().Arm(hooks.Plan{Namespace: hooked.Namespace, ID: hooked.ID, Attempt: 1, Action: hooks.Error})
	if a := play.Deliver(ctx, 1, hooked); !errors.Is(a.Err, hooks.ErrInjected) || fired(t, hook) != 1 {
		t.Fatalf("a delivery with a hook armed ended %s, the hook fired %d times; want the injected error, once", a.Result(), fired(t, hook))
	}

	cut := event("cut")
	cutFault, err := proxy.Arm(pgproxy.Rule{At: pgproxy.BeforeCommit, Action: pgproxy.Cut, Times: 1})
	if err != nil {
		t.Fatal(err)
	}
	if a := play.Deliver(ctx, 1, cut); a.Acked() || fired(t, cutFault) != 1 {
		t.Fatalf("a delivery with a cut armed ended %s, the cut fired %d times; want an error, once", a.Result(), fired(t, cutFault))
	}
	if err := play.WaitCut(ctx, cutFault); err != nil {
		t.Fatal(err)
	}

	if got := r.FaultsFired(); len(got) != 0 {
		t.Errorf("faults counted before the play closed: %v; want none yet", got)
	}
	closed = true
	if err := play.Close(ctx); err != nil {
		t.Fatalf("close the play: %v", err)
	}
	want := map[string]int64{"db:raise@effect": 2, "hook:error": 1, "proxy:cut@before-commit": 1}
	if got := r.FaultsFired(); !maps.Equal(got, want) {
		t.Errorf("FaultsFired() = %v; want %v", got, want)
	}
}

// TestFaultsFiredAcrossACrash arms a database-side fault on every attempt
// of an event, lets it fire once, and crashes the server: the crash
// disarms it, so the deliveries after the restart apply the event, and the
// count stays at the one firing before the crash, although PostgreSQL's
// crash recovery moves the fault's evidence sequence ahead.
func TestFaultsFiredAcrossACrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	r := startClusterRun(ctx, t)
	play, err := r.NewPlay(ctx, reference.Adapter())
	if err != nil {
		t.Fatal(err)
	}
	ev := event("crash")
	f := armDB(t, play, ev, faults.AtCommit, faults.Raise)
	if a := play.Deliver(ctx, 1, ev); a.Acked() {
		t.Fatalf("the delivery before the crash ended %s; want the injected error", a.Result())
	}
	c, err := r.CrashServer(ctx)
	if err != nil {
		t.Fatalf("CrashServer: %v", err)
	}
	if _, err := r.RestartServer(ctx, c); err != nil {
		t.Fatalf("RestartServer: %v", err)
	}
	// The reference's pool reconnects by itself; a failed attempt or two on
	// a dead connection reach no fault.
	after := play.DeliverUntilTerminal(ctx, 1, ev)
	if last := after[len(after)-1]; !last.Acked() || last.Outcome != adapters.Applied {
		t.Errorf("after the restart the deliveries ended %s (the last of %d); want Applied: the fault planned before the crash must not fire after it", last.Result(), len(after))
	}
	fired, err := play.Fired(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := f.Fired(ctx)
	t.Logf("the fault's evidence sequence says %d (%v); the play counts %d", raw, err, fired)
	if fired != 1 {
		t.Errorf("Fired after the restart: %d; want 1 (once before the crash, never after)", fired)
	}
	if err := play.Close(ctx); err != nil {
		t.Fatalf("close the play: %v", err)
	}
	want := map[string]int64{"db:raise@commit": 1, harness.ServerCrashKind: 1}
	if got := r.FaultsFired(); !maps.Equal(got, want) {
		t.Errorf("FaultsFired() = %v; want %v", got, want)
	}
}

// armDB arms a database-side fault on every attempt of ev.
func armDB(t *testing.T, play *harness.Play, ev adapters.Event, point faults.Point, action faults.Action) *faults.Fault {
	t.Helper()
	f, err := play.Arm(t.Context(), faults.Plan{Namespace: ev.Namespace, ID: ev.ID, Point: point, Action: action})
	if err != nil {
		t.Fatalf("arm %s %s: %v", action, point, err)
	}
	return f
}

// fired is how often f fired.
func fired(t *testing.T, f faults.Armed) int64 {
	t.Helper()
	n, err := f.Fired(t.Context())
	if err != nil {
		t.Fatalf("count the firings of %s: %v", f.Kind(), err)
	}
	return n
}

// TestNoArmingAroundTheCount: a play's hooks and proxy arm faults only
// through methods that record them for Run.FaultsFired. Neither has a
// method (a promoted one of the type it wraps, say) that arms without
// recording or hands out the type it wraps (a pgproxy.Listener arms
// nothing, and leads to no proxy).
func TestNoArmingAroundTheCount(t *testing.T) {
	for typ, want := range map[reflect.Type][]string{
		reflect.TypeFor[*harness.Hooks](): {"Arm", "Effect"},
		reflect.TypeFor[*harness.Proxy](): {"Arm", "Listeners", "Seen"},
	} {
		var got []string
		for m := range typ.Methods() {
			got = append(got, m.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s has methods %v; want only %v", typ, got, want)
		}
		for f := range typ.Elem().Fields() {
			if f.IsExported() {
				t.Errorf("%s has exported field %s", typ, f.Name)
			}
		}
	}
}

// TestArmingAroundPlayArmFailsClose: a database-side fault armed with
// faults.Arm directly in the play's schema would fire uncounted, so the
// play's Close says so rather than report a tally without it.
func TestArmingAroundPlayArmFailsClose(t *testing.T) {
	ctx := t.Context()
	r := startRun(t, ampleTimeout)
	play, err := r.NewPlay(ctx, reference.Adapter())
	if err != nil {
		t.Fatal(err)
	}
	ev := event("around")
	armDB(t, play, ev, faults.AtEffect, faults.Raise)
	if _, err := faults.Arm(ctx, r.Admin(), play.Schema(), faults.Plan{Namespace: ev.Namespace, ID: ev.ID, Point: faults.AtCommit, Action: faults.Raise}); err != nil {
		t.Fatal(err)
	}
	if err := play.Close(ctx); err == nil || !strings.Contains(err.Error(), "2 database-side faults, but 1 were armed through Play.Arm") {
		t.Errorf("Close of a play with a fault armed around Play.Arm: %v; want an error saying so", err)
	}
}
