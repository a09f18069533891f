package harness_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/hooks"
)

// TestBackoff: the pause before the k-th redelivery is 10 ms doubling up
// to 1 s, jittered between half of that and all of it.
func TestBackoff(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[time.Duration]bool{}
	for k := 1; k <= 40; k++ {
		ceiling := min(10*time.Millisecond<<min(k-1, 20), time.Second)
		for range 50 {
			d := harness.Backoff(k, rng)
			if d < ceiling/2 || d > ceiling {
				t.Fatalf("Backoff(%d) = %s; want between %s and %s", k, d, ceiling/2, ceiling)
			}
			if k == 3 {
				seen[d] = true
			}
		}
	}
	if len(seen) < 10 {
		t.Errorf("50 pauses before redelivery 3 took only %d values: no jitter", len(seen))
	}
}

// failing is an adapter whose deliveries of the ids in fail always end in
// an error, and of any other id Applied.
func failing(fail ...string) adapters.Adapter {
	return delivering("failing", func(_ context.Context, d adapters.Delivery) (adapters.Outcome, error) {
		for _, id := range fail {
			if d.ID == id {
				return 0, errors.New("not today")
			}
		}
		return adapters.Applied, nil
	})
}

func brokerRun(t *testing.T, patience time.Duration) *harness.Run {
	t.Helper()
	return startRunOpts(t, harness.Options{DeliveryTimeout: shortTimeout, RedeliveryPatience: patience})
}

// TestRedeliveriesPauseLonger: each redelivery comes after the broker's
// pause, which grows, and the history shows it.
func TestRedeliveriesPauseLonger(t *testing.T) {
	t.Parallel()
	play := newPlay(t, brokerRun(t, 500*time.Millisecond), failing("never"))
	attempts := play.DeliverUntilTerminal(t.Context(), 1, event("never"))
	if len(attempts) < 4 {
		t.Fatalf("%d attempts; want several redeliveries within the patience", len(attempts))
	}
	if attempts[0].Delay != 0 {
		t.Errorf("the first delivery has a delay of %s; want none", attempts[0].Delay)
	}
	for k, a := range attempts[1:] {
		least := min(10*time.Millisecond<<k, time.Second) / 2
		if a.Delay < least {
			t.Errorf("redelivery %d came %s after the attempt before; want at least %s", k+1, a.Delay, least)
		}
	}
	last := attempts[len(attempts)-1]
	if !strings.Contains(last.GaveUp, "patience") {
		t.Errorf("the last attempt says the broker gave up with %q; want the patience named", last.GaveUp)
	}
	described := harness.DescribeEvent(event("never"), nil, play.History(event("never")))
	for _, want := range []string{"after the attempt before", "the broker gave up after attempt"} {
		if !strings.Contains(described, want) {
			t.Errorf("the evidence does not say %q:\n%s", want, described)
		}
	}
}

// TestPatienceIsPerPlay: once a whole patience passed without progress,
// the broker redelivers nothing more in the play until one of its
// deliveries is acknowledged; then it is patient again.
func TestPatienceIsPerPlay(t *testing.T) {
	t.Parallel()
	run := brokerRun(t, 300*time.Millisecond)
	// An acknowledgement first, so that the run is known to answer.
	play := newPlay(t, run, failing("a", "b", "d"))
	if a := play.Deliver(t.Context(), 1, event("start")); !a.Acked() {
		t.Fatalf("the first delivery ended %s", a.Result())
	}
	a := play.DeliverUntilTerminal(t.Context(), 1, event("a"))
	if len(a) < 3 || a[len(a)-1].GaveUp == "" {
		t.Fatalf("event a: %d attempts, the broker gave up %q; want redeliveries until it gave up", len(a), a[len(a)-1].GaveUp)
	}
	b := play.DeliverUntilTerminal(t.Context(), 1, event("b"))
	if len(b) != 1 || b[0].GaveUp == "" {
		t.Errorf("event b, after the play ran out of patience: %d attempts, gave up %q; want one attempt and the broker giving up", len(b), b[0].GaveUp)
	}
	if c := play.DeliverUntilTerminal(t.Context(), 1, event("c")); !c[len(c)-1].Acked() {
		t.Fatalf("event c ended %s", c[len(c)-1].Result())
	}
	if d := play.DeliverUntilTerminal(t.Context(), 1, event("d")); len(d) < 3 {
		t.Errorf("event d, after an acknowledgement: %d attempts; want the broker patient again", len(d))
	}
}

// TestPatienceIsSharedSideBySide: events redelivered at the same time
// share the play's patience: one that started failing later gives up with
// the first, not a patience after it.
func TestPatienceIsSharedSideBySide(t *testing.T) {
	t.Parallel()
	const patience = 2 * time.Second
	var aTries atomic.Int64
	play := newPlay(t, brokerRun(t, patience), delivering("failing", func(_ context.Context, d adapters.Delivery) (adapters.Outcome, error) {
		if d.ID == "a" {
			aTries.Add(1)
		}
		if d.ID == "start" {
			return adapters.Applied, nil
		}
		return 0, errors.New("not today")
	}))
	play.Deliver(t.Context(), 1, event("start"))
	aDone := make(chan time.Time, 1)
	go func() {
		play.DeliverUntilTerminal(t.Context(), 1, event("a"))
		aDone <- time.Now()
	}()
	// b starts failing once a has been redelivered for a while: 7
	// redeliveries take at least 5+10+...+320 ms = 635 ms.
	if !poll(patience, func() bool { return aTries.Load() >= 8 }) {
		t.Fatal("event a was not redelivered 7 times within the patience")
	}
	b := play.DeliverUntilTerminal(t.Context(), 1, event("b"))
	bDone := time.Now()
	aAt := <-aDone
	if b[len(b)-1].GaveUp == "" {
		t.Fatalf("event b ended without the broker giving up: %+v", b[len(b)-1])
	}
	if gap := bDone.Sub(aAt); gap > patience/2 {
		t.Errorf("event b gave up %s after event a; want together: the play's patience is one for both", gap)
	}
}

// TestARunThatAnswersNothingIsNotWaitedFor: once a play ran out of
// patience in a run that has had no terminal attempt, later plays do not
// wait for redeliveries, until a delivery is answered.
func TestARunThatAnswersNothingIsNotWaitedFor(t *testing.T) {
	t.Parallel()
	run := brokerRun(t, 300*time.Millisecond)
	first := newPlay(t, run, failing("x"))
	if x := first.DeliverUntilTerminal(t.Context(), 1, event("x")); len(x) < 3 {
		t.Fatalf("the first play's event: %d attempts; want redeliveries until the patience ran out", len(x))
	}
	second := newPlay(t, run, failing("x", "y"))
	y := second.DeliverUntilTerminal(t.Context(), 1, event("y"))
	if len(y) != 1 || !strings.Contains(y[0].GaveUp, "no delivery of the run") {
		t.Errorf("the second play's event: %d attempts, gave up %q; want one attempt, the broker saying the run answered nothing", len(y), y[0].GaveUp)
	}
	if ok := second.Deliver(t.Context(), 1, event("ok")); !ok.Acked() {
		t.Fatalf("an ordinary event ended %s", ok.Result())
	}
	third := newPlay(t, run, failing("z"))
	if z := third.DeliverUntilTerminal(t.Context(), 1, event("z")); len(z) < 3 {
		t.Errorf("after the run answered, a play's event got %d attempts; want the broker patient again", len(z))
	}
}

// TestCrashesOf: a delivery that panics is a crash of an in-process
// implementation, as it would be of a real service's process; a panic the
// harness injected into the effect is not.
func TestCrashesOf(t *testing.T) {
	t.Parallel()
	// No implementation here hangs, and the reference does real database
	// work (its tables, in building an instance): shortTimeout was once
	// too short for that on a loaded machine.
	run := startRunOpts(t, harness.Options{DeliveryTimeout: ampleTimeout, RedeliveryPatience: shortPatience})
	own := newPlay(t, run, delivering("panics", func(context.Context, adapters.Delivery) (adapters.Outcome, error) {
		panic("the implementation's own bug")
	}))
	own.Deliver(t.Context(), 1, event("own"))
	if c := own.CrashesOf(1); len(c) != 1 || !strings.Contains(c[0], "panicked") {
		t.Errorf("CrashesOf(1) after the implementation's own panic = %q; want one crash, the panic", c)
	}
	if c := own.CrashesOf(2); len(c) != 0 {
		t.Errorf("CrashesOf(2), an instance never used = %q; want none", c)
	}

	injected := newPlay(t, run, reference.Adapter())
	ev := event("injected")
	injected.Hooks().Arm(hooks.Plan{Namespace: ev.Namespace, ID: ev.ID, Times: 1, Action: hooks.Panic})
	if a := injected.Deliver(t.Context(), 1, ev); !errors.Is(a.Err, harness.ErrPanicked) || !errors.Is(a.Err, hooks.ErrInjected) {
		t.Fatalf("the delivery with an injected panic ended %v; want ErrPanicked and hooks.ErrInjected", a.Err)
	}
	if c := injected.CrashesOf(1); len(c) != 0 {
		t.Errorf("CrashesOf(1) after a panic the harness injected = %q; want none", c)
	}
}
