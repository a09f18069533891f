// Package slow is the `alt-slow` adapter: the reference implementation,
// one second slower in every delivery.
//
// # Why it exists
//
// A correct implementation may be slow: it calls another service before
// it claims the event, it runs on a loaded machine, it is written in a
// language whose process takes a while to warm up. harmless must certify
// it all the same. Its budgets follow from the delivery timeout and how many
// deliveries a fixture makes, never from a fixed cap, and its fault plumbing
// never assumes that a delivery reaches the database at once. This adapter
// keeps those promises honest: the verdict matrix expects it to pass every
// fixture, as the reference does.
//
// # What it does
//
// Each delivery waits [Delay] before it does anything, then runs the
// reference's transaction (package reference). The wait honours the
// delivery's context, as a correct implementation does: a delivery the
// harness gives up on returns at once. Purges and construction are not
// delayed.
package slow

import (
	"context"
	"fmt"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
)

// Name is the adapter's name.
const Name = "alt-slow"

// Delay is how long every delivery waits before the reference handles it.
const Delay = time.Second

// Adapter returns the `alt-slow` adapter. It declares what the reference
// declares.
func Adapter() adapters.Adapter {
	ref := reference.Adapter()
	return adapters.Adapter{
		Name:     Name,
		Declares: ref.Declares,
		New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
			impl, err := ref.New(ctx, env)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", Name, err)
			}
			p, ok := impl.(purgingImplementation)
			if !ok {
				return nil, fmt.Errorf("%s: the reference's instance %T has no Purge or Drain", Name, impl)
			}
			return slow{p}, nil
		},
	}
}

// purgingImplementation is what the reference's instances are: they purge,
// and they drain their outbox.
type purgingImplementation interface {
	adapters.Implementation
	adapters.Purger
	adapters.Drainer
}

// slow is a reference instance whose deliveries wait Delay first.
type slow struct{ purgingImplementation }

func (s slow) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	wait := time.NewTimer(Delay)
	defer wait.Stop()
	select {
	case <-ctx.Done():
		return 0, fmt.Errorf("%s: delivery of %s attempt %d given up while waiting: %w", Name, d.Event, d.Attempt, context.Cause(ctx))
	case <-wait.C:
	}
	return s.purgingImplementation.Deliver(ctx, d)
}
