// Package randomkey is the `broken-random-key` adapter: the reference's
// outbox, but its relay makes a new idempotency key for every send.
//
// # The real-world bug
//
// An outbox relay that builds each HTTP request from scratch, and with it a
// fresh idempotency key (a new UUID per request, as client libraries do by
// default), instead of a key stored with the row or derived from the
// event. Every retry of the relay is then a new request to the
// destination. It works until an answer is lost: the destination processed
// the charge, the connection dropped before the response, and the relay's
// retry, with its new key, charges again.
//
// # What goes wrong
//
// Rows are written and sent as by the reference (one per applied event,
// deleted only after the destination's acknowledgement), but each send
// carries [base.RandomKey]. A 5xx costs nothing; a dropped answer after
// processing, a timeout or a stop after the destination processed the
// request makes a second effect.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package randomkey

import (
	"context"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
	"github.com/harmless-dev/harmless/internal/adapters/outbox"
)

// Name is the adapter's name.
const Name = "broken-random-key"

// Adapter returns the `broken-random-key` adapter. It declares an outbox.
func Adapter() adapters.Adapter {
	return base.OutboxAdapter(Name, func(inst *base.Instance, cfg outbox.Config) (*outbox.Outbox, base.Relay) {
		// The bug: the row's key is ignored; every send makes its own.
		cfg.Send = func(ctx context.Context, _ string, ev adapters.Event) error {
			return inst.Send(ctx, base.RandomKey(), ev)
		}
		o := outbox.New(inst.Pool, cfg)
		return o, o
	})
}
