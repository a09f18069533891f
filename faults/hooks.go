package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/harmless-dev/harmless/adapters"
)

// HookAction is what a Go-level hook fault does when it fires.
type HookAction string

const (
	// HookError makes the effect return an error wrapping [ErrInjected]
	// before its INSERT is sent.
	HookError HookAction = "error"
	// HookPanic makes the effect panic with an [InjectedPanic].
	HookPanic HookAction = "panic"
	// HookCancel cancels the delivery's context (see [WithCancel]) with
	// cause [ErrInjectedCancel]; the effect's INSERT then fails on the
	// cancelled context.
	HookCancel HookAction = "cancel"
)

// ErrInjected is wrapped by the error a [HookError] fault returns.
var ErrInjected = errors.New("harmless injected fault")

// ErrInjectedCancel is the cause with which a [HookCancel] fault cancels a
// delivery's context; read it with context.Cause.
var ErrInjectedCancel = errors.New("harmless injected cancellation")

// InjectedPanic is the value a [HookPanic] fault panics with. It is an error
// wrapping [ErrInjected], so a recovered value can be recognised with
// errors.Is.
type InjectedPanic struct {
	// Delivery is the delivery whose effect panicked.
	Delivery adapters.Delivery
}

// String describes the panic.
func (p InjectedPanic) String() string {
	return fmt.Sprintf("harmless injected panic in the effect of %s attempt %d", p.Delivery.Event, p.Delivery.Attempt)
}

// Error returns p.String(), so that an InjectedPanic is an error.
func (p InjectedPanic) Error() string { return p.String() }

// Unwrap returns [ErrInjected].
func (p InjectedPanic) Unwrap() error { return ErrInjected }

// HookPlan says which effect a Go-level fault fires on and what it does.
type HookPlan struct {
	// Namespace and ID name the event, compared exactly with the delivery's.
	Namespace, ID string
	// Attempt is the delivery attempt the fault fires on; 0 matches every
	// attempt.
	Attempt int
	// Times is how many times the fault fires, at most, on the matching
	// effects in the order they run: 1 fires on the first only; 0 on
	// every one. A one-off failure is planned with Times 1 (see
	// [Plan.Times]).
	Times int
	// Action is what the fault does.
	Action HookAction
}

// String describes the plan, e.g. "panic in effect hook for ns/42 attempt 1".
func (p HookPlan) String() string {
	return fmt.Sprintf("%s in effect hook for %s", p.Action, describe(p.Namespace, p.ID, p.Attempt, p.Times))
}

// Kind is the kind of a fault armed with the plan (see [Armed]): "hook:"
// action, e.g. "hook:cancel".
func (p HookPlan) Kind() string { return "hook:" + string(p.Action) }

func (p HookPlan) matches(d adapters.Delivery) bool {
	return p.Namespace == d.Namespace && p.ID == d.ID && (p.Attempt == 0 || p.Attempt == d.Attempt)
}

// HookFault is one armed Go-level fault.
type HookFault struct {
	plan  HookPlan
	fired atomic.Int64
}

// Fired reports how many times the fault fired. It reads a counter in
// memory and never fails; ctx is there to make a HookFault [Armed].
func (f *HookFault) Fired(context.Context) (int64, error) { return f.fired.Load(), nil }

// Kind is the kind of the fault's plan (see [HookPlan.Kind]).
func (f *HookFault) Kind() string { return f.plan.Kind() }

// String describes the fault, e.g. "error in effect hook for ns/42 attempt 1".
func (f *HookFault) String() string { return f.plan.String() }

// Hooks holds the armed Go-level faults of one spec. Create it with
// [NewHooks]; the harness runs [Hooks.Effect] in the effect it builds. It is safe for
// concurrent use.
type Hooks struct {
	mu     sync.Mutex
	faults []*HookFault
}

// NewHooks returns a Hooks with no fault armed.
func NewHooks() *Hooks { return &Hooks{} }

// Arm arms p: from now on it fires on every matching effect. Arm panics if p
// has an unknown action, no event id or a negative attempt: that is a bug in
// the spec, not a condition to handle.
func (h *Hooks) Arm(p HookPlan) *HookFault {
	switch p.Action {
	case HookError, HookPanic, HookCancel:
	default:
		panic(fmt.Sprintf("faults: arm %s: unknown hook action %q (known: %q, %q, %q)", p, p.Action, HookError, HookPanic, HookCancel))
	}
	if err := validateTarget(p.ID, p.Attempt); err != nil {
		panic(fmt.Sprintf("faults: arm %s: %v", p, err))
	}
	if p.Times < 0 {
		panic(fmt.Sprintf("faults: arm %s: negative times", p))
	}
	f := &HookFault{plan: p}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults = append(h.faults, f)
	return f
}

// Effect is the hook the harness's effect runs before its INSERT. Every
// armed fault matching d fires, in the order they were armed, until one
// returns an error or panics: it counts the firing, then acts as its
// [HookAction] says.
func (h *Hooks) Effect(ctx context.Context, d adapters.Delivery) error {
	h.mu.Lock()
	var matching []*HookFault
	for _, f := range h.faults {
		if f.plan.matches(d) {
			matching = append(matching, f)
		}
	}
	h.mu.Unlock()

	for _, f := range matching {
		if n := f.fired.Add(1); f.plan.Times > 0 && n > int64(f.plan.Times) {
			f.fired.Add(-1) // fired its times already: this one is not a firing
			continue
		}
		switch f.plan.Action {
		case HookError:
			return fmt.Errorf("%s: %w", f, ErrInjected)
		case HookPanic:
			panic(InjectedPanic{Delivery: d})
		case HookCancel:
			cancel, ok := ctx.Value(cancelKey{}).(context.CancelCauseFunc)
			if !ok {
				return fmt.Errorf("%s: the context holds no cancel func of the delivery (see faults.WithCancel)", f)
			}
			cancel(ErrInjectedCancel)
		}
	}
	return nil
}

type cancelKey struct{}

// WithCancel returns a context carrying cancel, the func that cancels one
// delivery's context, for [HookCancel] faults to call. The harness wraps
// each delivery's context with it.
func WithCancel(ctx context.Context, cancel context.CancelCauseFunc) context.Context {
	return context.WithValue(ctx, cancelKey{}, cancel)
}
