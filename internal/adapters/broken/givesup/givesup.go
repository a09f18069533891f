// Package givesup is the `broken-gives-up` adapter: an inbox that stores
// the message, applies its effect with a few tries, and then abandons it
// while the stored message goes on answering Duplicate.
//
// # The real-world bug
//
// Inbox libraries store each incoming message (their claim, committed at
// once) and apply the handler's effect from the stored copy, with a few
// tries. One observed library tries five times and then marks the message
// abandoned; the stored row still answers every redelivery as a
// duplicate. A failure that outlasts those tries (a database outage of a
// few seconds, a dependency down) loses the event for good. With a
// failure that clears before the last try, nothing shows.
//
// # What goes wrong
//
// Transaction 1 claims the event, as the reference does, and commits.
// Then the effect is applied in transactions of its own, up to [Tries]
// times, a short pause apart. If every try fails the delivery returns an
// error, and the broker redelivers; but the marker is committed, so the
// redelivery is answered Duplicate, with no effect committed, and the
// broker stops. It is `broken-marker-first` with retries, which hide it
// from a failure that fires once.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package givesup

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// Name is the adapter's name.
const Name = "broken-gives-up"

// Tries is how often the effect is tried before the message is
// abandoned, and pause the wait after the first failure, growing by as
// much after each.
const (
	Tries = 5
	pause = 50 * time.Millisecond
)

// Adapter returns the `broken-gives-up` adapter.
func Adapter() adapters.Adapter {
	return base.Adapter(Name, base.KeyedColumns, base.Wrap[implementation])
}

type implementation struct{ *base.Instance }

// Deliver commits the claim, then tries the effect up to Tries times.
func (i implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if err := kit.Validate(d.Event); err != nil {
		return 0, err
	}
	var claimed bool
	var outcome adapters.Outcome
	err := i.InTx(ctx, func(tx pgx.Tx) (err error) {
		if claimed, err = i.Claim(ctx, tx, d); err != nil || claimed {
			return err
		}
		outcome, err = i.Compare(ctx, tx, d)
		return err
	})
	switch {
	case err != nil:
		return 0, err
	case !claimed:
		return outcome, nil // the bug shows here: an abandoned message is a Duplicate
	}
	for try := 1; ; try++ {
		err := i.InTx(ctx, func(tx pgx.Tx) error { return i.Effect.Apply(ctx, tx, d) })
		if err == nil {
			return adapters.Applied, nil
		}
		if try == Tries || ctx.Err() != nil {
			return 0, fmt.Errorf("%s: %s abandoned after %d tries at its effect: %w", Name, d.Event, try, err)
		}
		t := time.NewTimer(time.Duration(try) * pause)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}
