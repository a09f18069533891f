package harness_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/harness"
)

// missingPatience is the broker's patience in the tests of the run-wide
// rule for missing acknowledgements: long enough that an episode cut
// short is told apart from one that waited it out on a loaded machine,
// short enough to wait out a few times.
const missingPatience = 2 * time.Second

// shortcut is what the broker says when it gives up on an event at once
// because the run has shown that acknowledgements are only missing.
const shortcut = "the event's effect was committed before this redelivery, which failed"

// applier is an instance that applies an event's effect at its first
// delivery, in a transaction of its own on a connection through the
// play's proxy, and answers Applied; every later delivery of the event
// is answered by redelivered.
type applier struct {
	pool        *pgxpool.Pool
	effect      adapters.Effect
	redelivered func(d adapters.Delivery) (adapters.Outcome, error)
}

func (a *applier) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if d.Attempt > 1 {
		return a.redelivered(d)
	}
	err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error { return a.effect.Apply(ctx, tx, d) })
	if err != nil {
		return 0, fmt.Errorf("apply %s: %w", d.Event, err)
	}
	return adapters.Applied, nil
}

func (a *applier) Close(context.Context) error {
	a.pool.Close()
	return nil
}

// crashingApplier is an applier in processes a supervisor restarts:
// crash, called by redelivered, records a crash of one of them, as an exec
// pool lists its processes' failures.
type crashingApplier struct {
	*applier
	mu      sync.Mutex
	crashes []string
}

func (c *crashingApplier) crash(d adapters.Delivery) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.crashes = append(c.crashes, fmt.Sprintf("the process died delivering %s attempt %d", d.Event, d.Attempt))
}

func (c *crashingApplier) Crashes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.crashes...)
}

// appliesOnce is an adapter of appliers whose redeliveries are answered
// by redelivered.
func appliesOnce(name string, redelivered func(d adapters.Delivery) (adapters.Outcome, error)) adapters.Adapter {
	return adapters.Adapter{Name: name, New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
		return newApplier(ctx, env, redelivered)
	}}
}

func newApplier(ctx context.Context, env adapters.Env, redelivered func(d adapters.Delivery) (adapters.Outcome, error)) (*applier, error) {
	pool, err := pgxpool.New(ctx, env.DSN)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return &applier{pool: pool, effect: env.Effect, redelivered: redelivered}, nil
}

// errsOnRedelivery is the bug of broken-redelivery-errors: every
// redelivery of an applied event fails, and nothing doubles.
func errsOnRedelivery() adapters.Adapter {
	return appliesOnce("errs-on-redelivery", func(d adapters.Delivery) (adapters.Outcome, error) {
		return 0, fmt.Errorf("record %s as processed: duplicate key value violates unique constraint", d.Event)
	})
}

// newPlayWith creates a play of adapter in r with opts, closed when the
// test ends.
func newPlayWith(t *testing.T, r *harness.Run, adapter adapters.Adapter, opts harness.PlayOptions) *harness.Play {
	t.Helper()
	play, err := r.NewPlayWith(t.Context(), adapter, opts)
	if err != nil {
		t.Fatalf("new play: %v", err)
	}
	atEnd(t, "play "+play.Schema(), play.Close)
	return play
}

// applyThenRedeliver delivers ev once, which must be Applied, then
// delivers it until terminal, and returns those attempts and how long
// they took.
func applyThenRedeliver(t *testing.T, play *harness.Play, ev adapters.Event) ([]harness.Attempt, time.Duration) {
	t.Helper()
	if a := play.Deliver(t.Context(), 1, ev); !a.Acked() || a.Outcome != adapters.Applied {
		t.Fatalf("the first delivery of %s ended %s; want Applied", ev, a.Result())
	}
	start := time.Now()
	attempts := play.DeliverUntilTerminal(t.Context(), 1, ev)
	return attempts, time.Since(start)
}

// runOutOfPatience makes a play of run give the evidence: an applied
// event whose redeliveries fail for a whole patience.
func runOutOfPatience(t *testing.T, run *harness.Run, title string) {
	t.Helper()
	play := newPlayWith(t, run, errsOnRedelivery(), harness.PlayOptions{Title: title})
	attempts, took := applyThenRedeliver(t, play, event("evidence"))
	last := attempts[len(attempts)-1]
	if took < missingPatience || !strings.Contains(last.GaveUp, "patience") {
		t.Fatalf("the first play's redeliveries took %s and ended with the broker giving up %q; want a whole patience (%s) and the patience named", took, last.GaveUp, missingPatience)
	}
}

// waitedOut fails the test unless attempts, which took took, are
// redeliveries the broker went on with for a whole patience.
func waitedOut(t *testing.T, what string, attempts []harness.Attempt, took time.Duration) {
	t.Helper()
	last := attempts[len(attempts)-1]
	if took < missingPatience || len(attempts) < 3 || strings.Contains(last.GaveUp, shortcut) || !strings.Contains(last.GaveUp, "patience") {
		t.Errorf("%s: %d attempts in %s, the broker gave up %q; want redeliveries for the whole patience (%s)", what, len(attempts), took.Round(time.Millisecond), last.GaveUp, missingPatience)
	}
}

// cutShort fails the test unless attempts, which took took, end with the
// broker giving up at once, on the first failed redelivery, for the run's
// evidence.
func cutShort(t *testing.T, what string, attempts []harness.Attempt, took time.Duration) {
	t.Helper()
	last := attempts[len(attempts)-1]
	if len(attempts) != 2 || took > missingPatience/2 || !strings.Contains(last.GaveUp, shortcut) {
		t.Errorf("%s: %d attempts in %s, the broker gave up %q; want the broker to give up after the first failed redelivery, saying %q", what, len(attempts), took.Round(time.Millisecond), last.GaveUp, shortcut)
	}
}

// TestMissingAcknowledgementsAreAwaitedOnce: once a play's broker ran
// out of patience on an event whose effect was committed, a later play's
// broker gives up on such an event at the first failed redelivery,
// saying why; an event whose effect is not committed is waited for as
// before.
func TestMissingAcknowledgementsAreAwaitedOnce(t *testing.T) {
	t.Parallel()
	run := brokerRun(t, missingPatience)
	// Before any evidence, an applied event is waited for a whole patience.
	runOutOfPatience(t, run, "the first")

	play := newPlay(t, run, errsOnRedelivery())
	attempts, took := applyThenRedeliver(t, play, event("applied"))
	cutShort(t, "an applied event in a later play", attempts, took)
	gaveUp := attempts[len(attempts)-1].GaveUp
	for _, want := range []string{"play s1 (the first)", event("evidence").String(), "for a whole patience (2s) without an acknowledgement", "only missing"} {
		if !strings.Contains(gaveUp, want) {
			t.Errorf("the broker gave up saying %q; want it to say %q", gaveUp, want)
		}
	}
	if r := play.Redelivery(); r.GaveUp != 0 {
		t.Errorf("the play counts %d stalls given up; want none: the broker did not run out of patience", r.GaveUp)
	}

	// No effect committed: nothing says that only the acknowledgement is
	// missing.
	never := newPlay(t, run, failing("never"))
	start := time.Now()
	attempts = never.DeliverUntilTerminal(t.Context(), 1, event("never"))
	waitedOut(t, "an event whose effect is not committed", attempts, time.Since(start))
}

// TestMissingAcknowledgementsAcrossPlaysSideBySide: the run's evidence
// is read and given by plays that run at the same time (the race
// detector watches), and each of them gives up on its own applied events
// at once.
func TestMissingAcknowledgementsAcrossPlaysSideBySide(t *testing.T) {
	t.Parallel()
	run := brokerRun(t, missingPatience)
	runOutOfPatience(t, run, "the first")
	var wg sync.WaitGroup
	for i := range 4 {
		play := newPlay(t, run, errsOnRedelivery())
		wg.Go(func() {
			ev := event(fmt.Sprintf("side-by-side-%d", i))
			if a := play.Deliver(t.Context(), 1, ev); !a.Acked() {
				t.Errorf("the first delivery of %s ended %s; want Applied", ev, a.Result())
				return
			}
			start := time.Now()
			attempts := play.DeliverUntilTerminal(t.Context(), 1, ev)
			cutShort(t, fmt.Sprintf("play %d of 4 side by side", i+1), attempts, time.Since(start))
		})
	}
	wg.Wait()
}

// TestACrashIsNotAMissingAcknowledgement: a redelivery that fails because
// the implementation's process crashed (a panic of its own in process,
// a process its supervisor restarts) is waited out as before, even once
// the run has the evidence: the restarted process may answer the next.
func TestACrashIsNotAMissingAcknowledgement(t *testing.T) {
	t.Parallel()
	run := brokerRun(t, missingPatience)
	runOutOfPatience(t, run, "the first")

	panics := newPlay(t, run, appliesOnce("panics-on-redelivery", func(adapters.Delivery) (adapters.Outcome, error) {
		panic("the implementation's own bug")
	}))
	attempts, took := applyThenRedeliver(t, panics, event("panics"))
	waitedOut(t, "redeliveries that panic", attempts, took)

	supervised := newPlay(t, run, adapters.Adapter{Name: "crashes-on-redelivery", New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
		c := &crashingApplier{}
		a, err := newApplier(ctx, env, func(d adapters.Delivery) (adapters.Outcome, error) {
			c.crash(d)
			return 0, fmt.Errorf("delivering %s: implementation process failed: exit status 3", d.Event)
		})
		if err != nil {
			return nil, err
		}
		c.applier = a
		return c, nil
	}})
	attempts, took = applyThenRedeliver(t, supervised, event("crashes"))
	waitedOut(t, "redeliveries whose process crashes", attempts, took)
	if n := len(supervised.CrashesOf(1)); n < 2 {
		t.Errorf("instance 1 reports %d crashes; want one per redelivery", n)
	}
}

// TestAPlayThatDisruptsTheServerKeepsItsPatience: a play that crashes or
// fails over the server neither gives the evidence nor is cut short by
// it, and neither is a play while one is open: a correct implementation's
// redeliveries fail while it reconnects.
func TestAPlayThatDisruptsTheServerKeepsItsPatience(t *testing.T) {
	t.Parallel()
	disrupts := harness.PlayOptions{Title: "a crash", DisruptsServer: true}

	t.Run("gives no evidence", func(t *testing.T) {
		t.Parallel()
		run := brokerRun(t, missingPatience)
		crash := newPlayWith(t, run, errsOnRedelivery(), disrupts)
		attempts, took := applyThenRedeliver(t, crash, event("crash"))
		waitedOut(t, "the play that disrupts the server", attempts, took)
		later := newPlay(t, run, errsOnRedelivery())
		attempts, took = applyThenRedeliver(t, later, event("later"))
		waitedOut(t, "a later play, with no evidence from the play that disrupted the server", attempts, took)
	})

	t.Run("is not cut short", func(t *testing.T) {
		t.Parallel()
		run := brokerRun(t, missingPatience)
		runOutOfPatience(t, run, "the first")
		crash := newPlayWith(t, run, errsOnRedelivery(), disrupts)
		attempts, took := applyThenRedeliver(t, crash, event("crash"))
		waitedOut(t, "the play that disrupts the server, after the evidence", attempts, took)
	})

	t.Run("nor is a play beside it", func(t *testing.T) {
		t.Parallel()
		run := brokerRun(t, missingPatience)
		runOutOfPatience(t, run, "the first")
		crash, err := run.NewPlayWith(t.Context(), errsOnRedelivery(), disrupts)
		if err != nil {
			t.Fatalf("new play: %v", err)
		}
		beside := newPlay(t, run, errsOnRedelivery())
		attempts, took := applyThenRedeliver(t, beside, event("beside"))
		waitedOut(t, "a play while one that disrupts the server is open", attempts, took)
		ctx, cancel := cleanupContext()
		defer cancel()
		if err := crash.Close(ctx); err != nil {
			t.Fatalf("close the play that disrupts the server: %v", err)
		}
		attempts, took = applyThenRedeliver(t, beside, event("after"))
		cutShort(t, "the same play once the one that disrupts the server closed", attempts, took)
	})
}

// TestACorrectImplementationIsRedeliveredUntilDuplicate: an
// implementation whose redeliveries fail for a while, then answer
// Duplicate, as a correct one that reconnects does, gives no evidence:
// play after play it is redelivered until it answers.
func TestACorrectImplementationIsRedeliveredUntilDuplicate(t *testing.T) {
	t.Parallel()
	run := brokerRun(t, missingPatience)
	flaky := appliesOnce("flaky", func(d adapters.Delivery) (adapters.Outcome, error) {
		if d.Attempt < 5 {
			return 0, errors.New("connection reset by peer")
		}
		return adapters.Duplicate, nil
	})
	for i := range 3 {
		play := newPlay(t, run, flaky)
		attempts, _ := applyThenRedeliver(t, play, event("flaky"))
		last := attempts[len(attempts)-1]
		if !last.Acked() || last.Outcome != adapters.Duplicate || last.GaveUp != "" {
			t.Errorf("play %d: the redeliveries ended %s after %d attempts, the broker giving up %q; want Duplicate at attempt 5", i+1, last.Result(), len(attempts), last.GaveUp)
		}
	}
}
