// Package retrynotoken is the `broken-retry-no-token` adapter: the retry
// helper of `alt-retry-token` without its claim token.
//
// # The real-world bug
//
// A transaction function with a retry loop that cannot tell, after a
// COMMIT whose answer was lost, whether the COMMIT landed, and takes it for
// a success: "the connection dropped at COMMIT, so the server must have
// committed". It may not have: a connection cut before the COMMIT reached
// the server leaves the transaction rolled back.
//
// # What goes wrong
//
// Everything is the correct alternative's (package retrytoken), but for
// one detail: no claim token is stored, and a COMMIT that fails without an
// answer from the server (a lost connection) is answered Applied. When the
// server rolled the transaction back, the delivery acknowledges an event
// whose effect is not committed: the broker never redelivers it, and it
// is lost.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package retrynotoken

import (
	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/retrytoken"
)

// Name is the adapter's name.
const Name = "broken-retry-no-token"

// Adapter returns the `broken-retry-no-token` adapter.
func Adapter() adapters.Adapter { return retrytoken.Variant(Name, retrytoken.NoToken) }
