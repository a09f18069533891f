package harness_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/hooks"
)

// TestBudgetEndsCallsButNotTheEvidence: once a play's budget runs out, the
// delivery in flight is cancelled and reported as cut short by the budget,
// no new delivery reaches the implementation, and the play still tells
// what it did: deliveries made and pending, faults fired.
func TestBudgetEndsCallsButNotTheEvidence(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 1)
	var calls atomic.Int64
	adapter := delivering("waits", func(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
		calls.Add(1)
		if d.ID == "quick" {
			return adapters.Applied, nil
		}
		entered <- struct{}{}
		<-ctx.Done() // honours its context, as a correct implementation does
		return 0, ctx.Err()
	})
	play := newPlay(t, startRun(t, ampleTimeout), adapter)
	hook := play.Hooks().Arm(hooks.Plan{Namespace: "harness-test", ID: "quick", Action: hooks.Error})
	_ = hook // never fires: the fake does not call the effect; it is counted as armed

	if a := deliverBounded(t, play, 1, event("quick"), patience); !a.Acked() {
		t.Fatalf("a delivery before the budget ended %s", a.Result())
	}
	play.StartBudget(200 * time.Millisecond)
	done := make(chan harness.Attempt, 1)
	go func() { done <- play.Deliver(t.Context(), 1, event("waits")) }()
	<-entered
	var cut harness.Attempt
	select {
	case cut = <-done:
	case <-time.After(patience):
		t.Fatalf("the delivery in flight was not cut short within %s of a budget of 200ms", patience)
	}
	if !errors.Is(cut.Err, harness.ErrBudgetExpired) || !errors.Is(cut.Err, context.Canceled) {
		t.Errorf("the delivery in flight ended %v; want it cancelled by the budget", cut.Err)
	}

	progress, expired := play.BudgetExpired()
	if !expired || progress == nil {
		t.Fatalf("BudgetExpired() = %v, %t; want the progress at expiry", progress, expired)
	}
	if progress.Deliveries != 1 || progress.Pending != 1 || progress.Budget != 200*time.Millisecond || progress.FaultsErr != nil {
		t.Errorf("progress at expiry %+v; want 1 delivery made, 1 pending, the budget, faults counted", *progress)
	}
	if s := progress.String(); !strings.Contains(s, "1 deliveries made, 1 pending; faults fired: none") {
		t.Errorf("progress reads %q", s)
	}

	before := calls.Load()
	after := play.Deliver(t.Context(), 1, event("quick-2"))
	if !errors.Is(after.Err, harness.ErrBudgetExpired) || after.Delivery.Attempt != 0 || calls.Load() != before {
		t.Errorf("a delivery after the budget: attempt %d, %v, %d new calls; want none made, ErrBudgetExpired", after.Delivery.Attempt, after.Err, calls.Load()-before)
	}
	if tries := play.DeliverUntilTerminal(t.Context(), 1, event("quick-3")); len(tries) != 1 {
		t.Errorf("DeliverUntilTerminal after the budget made %d attempts; want it to stop at once", len(tries))
	}
	if _, err := play.Purge(t.Context(), 1, time.Now()); !errors.Is(err, harness.ErrBudgetExpired) {
		t.Errorf("Purge after the budget: %v; want ErrBudgetExpired", err)
	}
	if _, err := play.Instance(t.Context(), 2); !errors.Is(err, harness.ErrBudgetExpired) {
		t.Errorf("building an instance after the budget: %v; want ErrBudgetExpired", err)
	}
	// The harness's own reads go on.
	if _, err := play.Effects(t.Context(), event("quick")); err != nil {
		t.Errorf("reading the ledger after the budget: %v", err)
	}
	if got := len(play.History(event("waits"))); got != 1 {
		t.Errorf("history of the cut delivery has %d attempts; want 1", got)
	}
}

// TestNoBudgetNoExpiry: a play without a budget never reports one run out,
// and a restarted budget forgets the old one.
func TestNoBudgetNoExpiry(t *testing.T) {
	t.Parallel()
	play := newPlay(t, startRun(t, ampleTimeout), delivering("fine", nil))
	if p, expired := play.BudgetExpired(); expired || p != nil {
		t.Errorf("BudgetExpired() without a budget = %v, %t", p, expired)
	}
	play.StartBudget(time.Nanosecond)
	eventually(t, patience, "a budget of 1ns runs out", func() bool { _, expired := play.BudgetExpired(); return expired })
	play.StartBudget(time.Hour)
	if _, expired := play.BudgetExpired(); expired {
		t.Error("a restarted budget still reports the old one run out")
	}
	if a := deliverBounded(t, play, 1, event("fine"), patience); !a.Acked() {
		t.Errorf("a delivery within the restarted budget ended %s", a.Result())
	}
}
