// Package hooks fails the effect of an in-process Go implementation before
// its INSERT is sent: the harness's effect (internal/effect) runs
// [Set.Effect] first, which returns an error wrapping [ErrInjected], panics
// with an [InjectedPanic], or cancels the delivery's context (stored with
// [WithCancel]) so that the effect's Exec fails. [Fault.Fired] is the
// evidence, and a [Fault] is a faults.Armed like the database-side faults.
//
// Only the effect the harness builds runs the hooks: an implementation in
// another process, or a user's test against its own database, has no such
// hook, and fails its transactions with the database fault points of
// package faults instead. They were part of package faults until issue 23.
package hooks

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/internal/faultplan"
)

// Action is what a Go-level hook fault does when it fires.
type Action string

const (
	// Error makes the effect return an error wrapping [ErrInjected]
	// before its INSERT is sent.
	Error Action = "error"
	// Panic makes the effect panic with an [InjectedPanic].
	Panic Action = "panic"
	// Cancel cancels the delivery's context (see [WithCancel]) with
	// cause [ErrInjectedCancel]; the effect's INSERT then fails on the
	// cancelled context.
	Cancel Action = "cancel"
)

// ErrInjected is wrapped by the error an [Error] fault returns, and by the
// value a [Panic] fault panics with.
var ErrInjected = errors.New("harmless injected fault")

// ErrInjectedCancel is the cause with which a [Cancel] fault cancels a
// delivery's context; read it with context.Cause.
var ErrInjectedCancel = errors.New("harmless injected cancellation")

// InjectedPanic is the value a [Panic] fault panics with. It is an error
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

// Plan says which effect a Go-level fault fires on and what it does.
type Plan struct {
	// Namespace and ID name the event, compared exactly with the delivery's.
	Namespace, ID string
	// Attempt is the delivery attempt the fault fires on; 0 matches every
	// attempt.
	Attempt int
	// Times is how many times the fault fires, at most, on the matching
	// effects in the order they run: 1 fires on the first only; 0 on
	// every one. A one-off failure is planned with Times 1 (see
	// faults.Plan's Times).
	Times int
	// Action is what the fault does.
	Action Action
}

// String describes the plan, e.g. "panic in effect hook for ns/42 attempt 1".
func (p Plan) String() string {
	return fmt.Sprintf("%s in effect hook for %s", p.Action, faultplan.DescribeTarget(p.Namespace, p.ID, p.Attempt, p.Times))
}

// Kind is the kind of a fault armed with the plan (see [faults.Armed]): "hook:"
// action, e.g. "hook:cancel".
func (p Plan) Kind() string { return "hook:" + string(p.Action) }

func (p Plan) matches(d adapters.Delivery) bool {
	return p.Namespace == d.Namespace && p.ID == d.ID && (p.Attempt == 0 || p.Attempt == d.Attempt)
}

// Fault is one armed Go-level fault.
type Fault struct {
	plan  Plan
	fired atomic.Int64
}

// Fired reports how many times the fault fired. It reads a counter in
// memory and never fails; ctx is there to make a Fault a [faults.Armed].
func (f *Fault) Fired(context.Context) (int64, error) { return f.fired.Load(), nil }

// Kind is the kind of the fault's plan (see [Plan.Kind]).
func (f *Fault) Kind() string { return f.plan.Kind() }

// String describes the fault, e.g. "error in effect hook for ns/42 attempt 1".
func (f *Fault) String() string { return f.plan.String() }

// A Fault is counted with the other faults the harness arms.
var _ faults.Armed = (*Fault)(nil)

// Set holds the armed Go-level faults of one spec. Create it with
// [NewSet]; the harness runs [Set.Effect] in the effect it builds. It is
// safe for concurrent use.
type Set struct {
	mu     sync.Mutex
	faults []*Fault
}

// NewSet returns a Set with no fault armed.
func NewSet() *Set { return &Set{} }

// Arm arms p: from now on it fires on every matching effect. Arm panics if p
// has an unknown action, no event id or a negative attempt: that is a bug in
// the spec, not a condition to handle.
func (s *Set) Arm(p Plan) *Fault {
	switch p.Action {
	case Error, Panic, Cancel:
	default:
		panic(fmt.Sprintf("hooks: arm %s: unknown hook action %q (known: %q, %q, %q)", p, p.Action, Error, Panic, Cancel))
	}
	if err := faultplan.ValidateTarget(p.ID, p.Attempt); err != nil {
		panic(fmt.Sprintf("hooks: arm %s: %v", p, err))
	}
	if p.Times < 0 {
		panic(fmt.Sprintf("hooks: arm %s: negative times", p))
	}
	f := &Fault{plan: p}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, f)
	return f
}

// Effect is the hook the harness's effect runs before its INSERT. Every
// armed fault matching d fires, in the order they were armed, until one
// returns an error or panics: it counts the firing, then acts as its
// [Action] says.
func (s *Set) Effect(ctx context.Context, d adapters.Delivery) error {
	s.mu.Lock()
	var matching []*Fault
	for _, f := range s.faults {
		if f.plan.matches(d) {
			matching = append(matching, f)
		}
	}
	s.mu.Unlock()

	for _, f := range matching {
		if n := f.fired.Add(1); f.plan.Times > 0 && n > int64(f.plan.Times) {
			f.fired.Add(-1) // fired its times already: this one is not a firing
			continue
		}
		switch f.plan.Action {
		case Error:
			return fmt.Errorf("%s: %w", f, ErrInjected)
		case Panic:
			panic(InjectedPanic{Delivery: d})
		case Cancel:
			cancel, ok := ctx.Value(cancelKey{}).(context.CancelCauseFunc)
			if !ok {
				return fmt.Errorf("%s: the context holds no cancel func of the delivery (see hooks.WithCancel)", f)
			}
			cancel(ErrInjectedCancel)
		}
	}
	return nil
}

type cancelKey struct{}

// WithCancel returns a context carrying cancel, the func that cancels one
// delivery's context, for [Cancel] faults to call. The harness wraps
// each delivery's context with it.
func WithCancel(ctx context.Context, cancel context.CancelCauseFunc) context.Context {
	return context.WithValue(ctx, cancelKey{}, cancel)
}
