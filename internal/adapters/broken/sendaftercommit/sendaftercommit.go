// Package sendaftercommit is the `broken-send-after-commit` adapter: the
// external effect is sent after COMMIT, with a stable idempotency key but
// no outbox.
//
// # The real-world bug
//
// "Don't call the API inside the transaction" is the usual advice, and the
// usual fix is to call it right after COMMIT: in an after-commit hook, a
// transaction.on_commit callback, or the line after tx.Commit(). The key is
// even derived from the event. But nothing durable remembers that the call
// is owed: a process stopped between COMMIT and the call, or a call that
// fails after the marker committed, loses the effect for good, because the
// redelivery finds the marker and is a Duplicate.
//
// # What goes wrong
//
// The reference's transaction claims the event and applies the database
// effect; once it committed, the request goes out with [external.Key]. If
// the send fails, Deliver returns the error and the broker redelivers; the
// redelivery is a Duplicate and sends nothing. An abrupt stop between
// COMMIT and the send loses it the same way.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package sendaftercommit

import (
	"context"
	"fmt"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/external"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
)

// Name is the adapter's name.
const Name = "broken-send-after-commit"

// Adapter returns the `broken-send-after-commit` adapter. It declares
// destination-idempotency.
func Adapter() adapters.Adapter {
	return base.Declaring(base.Adapter(Name, base.KeyedColumns, base.Wrap[implementation]), adapters.DestinationIdempotency)
}

type implementation struct{ *base.Instance }

// Deliver runs the reference's transaction, then sends the effect of an
// applied event.
func (i implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	outcome, err := i.Instance.Deliver(ctx, d)
	if err != nil || outcome != adapters.Applied {
		return outcome, err
	}
	// The bug: the marker is durable now, and nothing durable says that
	// this send is still owed.
	if err := i.Send(ctx, external.Key(d.Event), d.Event); err != nil {
		return 0, fmt.Errorf("effect of %s after its marker committed: %w", d.Event, err)
	}
	return adapters.Applied, nil
}
