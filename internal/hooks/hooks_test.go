package hooks_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/faulttest"
	"github.com/harmless-dev/harmless/internal/hooks"
)

func TestHookError(t *testing.T) {
	fx := faulttest.Setup(t)
	h := hooks.NewSet()
	f := h.Arm(hooks.Plan{Namespace: "ns", ID: "42", Attempt: 1, Action: hooks.Error})
	d := faulttest.Delivery("ns", "42", 1)

	at, err := faulttest.Deliver(t.Context(), fx.Pool, fx.Effect(h.Effect), d)
	if at != faulttest.StageApply || !errors.Is(err, hooks.ErrInjected) {
		t.Fatalf("delivery failed at %q with %v, want at apply with ErrInjected", at, err)
	}
	if !strings.Contains(err.Error(), "error in effect hook for ns/42 attempt 1") {
		t.Errorf("error %q does not name the fault", err)
	}
	faulttest.WantFired(t, f, 1)
	fx.WantEffects(t, d, 0)
}

func TestHookPanic(t *testing.T) {
	fx := faulttest.Setup(t)
	h := hooks.NewSet()
	f := h.Arm(hooks.Plan{Namespace: "ns", ID: "42", Action: hooks.Panic})
	d := faulttest.Delivery("ns", "42", 3)

	recovered := func() (r any) {
		defer func() { r = recover() }()
		_, _ = faulttest.Deliver(t.Context(), fx.Pool, fx.Effect(h.Effect), d)
		return nil
	}()
	p, ok := recovered.(hooks.InjectedPanic)
	if !ok {
		t.Fatalf("recovered %#v (%T), want a hooks.InjectedPanic", recovered, recovered)
	}
	if !reflect.DeepEqual(p.Delivery, d) {
		t.Errorf("panic names delivery %+v, want %+v", p.Delivery, d)
	}
	if !errors.Is(p, hooks.ErrInjected) {
		t.Errorf("panic value %v does not wrap ErrInjected", p)
	}
	if want := "harmless injected panic in the effect of ns/42 attempt 3"; p.String() != want || p.Error() != want {
		t.Errorf("panic value says %q / %q, want %q", p.String(), p.Error(), want)
	}
	faulttest.WantFired(t, f, 1)
	fx.WantEffects(t, d, 0)
}

func TestHookCancel(t *testing.T) {
	fx := faulttest.Setup(t)
	h := hooks.NewSet()
	f := h.Arm(hooks.Plan{Namespace: "ns", ID: "42", Action: hooks.Cancel})
	d := faulttest.Delivery("ns", "42", 1)

	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	tx, err := fx.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(t.Context()) }()

	err = fx.Effect(h.Effect).Apply(hooks.WithCancel(ctx, cancel), tx, d)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Apply = %v, want the INSERT to fail with context canceled", err)
	}
	if cause := context.Cause(ctx); !errors.Is(cause, hooks.ErrInjectedCancel) {
		t.Errorf("context cause = %v, want ErrInjectedCancel", cause)
	}
	faulttest.WantFired(t, f, 1)
	if err := tx.Rollback(t.Context()); err != nil {
		t.Errorf("rollback after the cancelled INSERT: %v", err)
	}
	fx.WantEffects(t, d, 0)
}

func TestHookCancelNeedsCancelFunc(t *testing.T) {
	h := hooks.NewSet()
	f := h.Arm(hooks.Plan{Namespace: "ns", ID: "42", Action: hooks.Cancel})
	err := h.Effect(t.Context(), faulttest.Delivery("ns", "42", 1))
	if err == nil || !strings.Contains(err.Error(), "no cancel func") {
		t.Errorf("Effect without a cancel func in ctx = %v, want an error saying so", err)
	}
	faulttest.WantFired(t, f, 1)
}

func TestHookMatching(t *testing.T) {
	tests := []struct {
		name  string
		plan  hooks.Plan
		fires bool
	}{
		{"same attempt", hooks.Plan{Namespace: "ns", ID: "42", Attempt: 2}, true},
		{"any attempt", hooks.Plan{Namespace: "ns", ID: "42"}, true},
		{"other attempt", hooks.Plan{Namespace: "ns", ID: "42", Attempt: 1}, false},
		{"other id", hooks.Plan{Namespace: "ns", ID: "43"}, false},
		{"other namespace", hooks.Plan{Namespace: "other", ID: "42"}, false},
	}
	d := faulttest.Delivery("ns", "42", 2)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := hooks.NewSet()
			tt.plan.Action = hooks.Error
			f := h.Arm(tt.plan)
			err := h.Effect(t.Context(), d)
			if got := errors.Is(err, hooks.ErrInjected); got != tt.fires {
				t.Errorf("%s on %s attempt %d: Effect = %v, want fired %v", f, d.Event, d.Attempt, err, tt.fires)
			}
			faulttest.WantFired(t, f, map[bool]int64{true: 1}[tt.fires])
		})
	}
}

func TestHooksFireInArmOrderUntilOneFails(t *testing.T) {
	h := hooks.NewSet()
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	cancelled := h.Arm(hooks.Plan{Namespace: "ns", ID: "42", Action: hooks.Cancel})
	failed := h.Arm(hooks.Plan{Namespace: "ns", ID: "42", Action: hooks.Error})
	panicked := h.Arm(hooks.Plan{Namespace: "ns", ID: "42", Action: hooks.Panic})

	if err := h.Effect(hooks.WithCancel(ctx, cancel), faulttest.Delivery("ns", "42", 1)); !errors.Is(err, hooks.ErrInjected) {
		t.Errorf("Effect = %v, want ErrInjected", err)
	}
	faulttest.WantFired(t, cancelled, 1)
	faulttest.WantFired(t, failed, 1)
	faulttest.WantFired(t, panicked, 0)
}

func TestHooksArmPanicsOnInvalidPlan(t *testing.T) {
	tests := []struct {
		name string
		plan hooks.Plan
		want string
	}{
		{"unknown action", hooks.Plan{ID: "42", Action: "explode"}, `unknown hook action "explode"`},
		{"no action", hooks.Plan{ID: "42"}, "unknown hook action"},
		{"no event id", hooks.Plan{Action: hooks.Error}, "no event id"},
		{"negative attempt", hooks.Plan{ID: "42", Attempt: -2, Action: hooks.Error}, "attempt -2 out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if msg := fmt.Sprint(r); r == nil || !strings.Contains(msg, tt.want) {
					t.Errorf("Arm(%+v) panicked with %v, want a panic saying %q", tt.plan, r, tt.want)
				}
			}()
			hooks.NewSet().Arm(tt.plan)
		})
	}
}

func TestHooksConcurrentUse(t *testing.T) {
	const goroutines, deliveries = 8, 200
	h := hooks.NewSet()
	var wg sync.WaitGroup
	armed := make([]*hooks.Fault, goroutines)
	for w := range goroutines {
		wg.Go(func() {
			id := fmt.Sprint(w)
			armed[w] = h.Arm(hooks.Plan{Namespace: "ns", ID: id, Action: hooks.Error})
			for attempt := 1; attempt <= deliveries; attempt++ {
				// Every goroutine also delivers an event nobody planned for.
				if err := h.Effect(t.Context(), adapters.Delivery{Event: adapters.Event{Namespace: "ns", ID: "unplanned"}, Attempt: attempt}); err != nil {
					t.Errorf("unplanned event: %v", err)
				}
				if err := h.Effect(t.Context(), adapters.Delivery{Event: adapters.Event{Namespace: "ns", ID: id}, Attempt: attempt}); !errors.Is(err, hooks.ErrInjected) {
					t.Errorf("goroutine %d attempt %d: %v, want ErrInjected", w, attempt, err)
				}
			}
		})
	}
	wg.Wait()
	for _, f := range armed {
		faulttest.WantFired(t, f, deliveries)
	}
}

// TestHookTimes: a hook planned to fire once fires on the first matching
// effect only, whatever attempt the later ones carry.
func TestHookTimes(t *testing.T) {
	h := hooks.NewSet()
	f := h.Arm(hooks.Plan{Namespace: "ns", ID: "42", Times: 1, Action: hooks.Error})
	for i, want := range []bool{true, false, false} {
		err := h.Effect(t.Context(), faulttest.Delivery("ns", "42", 1))
		if got := errors.Is(err, hooks.ErrInjected); got != want {
			t.Errorf("effect %d: %v; want fired %t", i+1, err, want)
		}
	}
	faulttest.WantFired(t, f, 1)
}
