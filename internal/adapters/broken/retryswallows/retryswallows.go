// Package retryswallows is the `broken-retry-swallows` adapter: the retry
// helper of `alt-retry-token`, which acknowledges a delivery whose
// transaction it could not commit.
//
// # The real-world bug
//
// A handler that logs an error and acknowledges the message anyway, "so
// that the queue keeps moving": a retry helper whose tries ran out, or that
// met an error it does not retry, and whose caller treats that as done.
//
// # What goes wrong
//
// Everything is the correct alternative's (package retrytoken), but for
// one detail: when the transaction fails for good, the delivery answers
// Applied. The transaction rolled back, so the effect is not committed;
// the broker has an acknowledgement, never redelivers the event, and it
// is lost.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package retryswallows

import (
	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/retrytoken"
)

// Name is the adapter's name.
const Name = "broken-retry-swallows"

// Adapter returns the `broken-retry-swallows` adapter.
func Adapter() adapters.Adapter { return retrytoken.Variant(Name, retrytoken.SwallowedErrors) }
