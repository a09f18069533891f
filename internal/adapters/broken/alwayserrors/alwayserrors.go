// Package alwayserrors is the `broken-always-errors` adapter: the reference
// pattern on a processed-events table that was never created, so every
// delivery fails.
//
// # The real-world bug
//
// A consumer deployed before its migration ran, or pointed at the wrong
// schema: every claim fails with "relation does not exist" (SQLSTATE
// 42P01). Nothing is ever applied and nothing is ever acknowledged; the
// broker redelivers until it gives up, and the events go to a dead-letter
// queue, or are lost where there is none.
//
// # What goes wrong
//
// Every delivery returns an error. No event is ever applied.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package alwayserrors

import (
	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
)

// Name is the adapter's name.
const Name = "broken-always-errors"

// Adapter returns the `broken-always-errors` adapter.
func Adapter() adapters.Adapter {
	// base.NoTable: the table the reference pattern claims in is never
	// created, which is the bug.
	return base.Adapter(Name, base.NoTable, func(i *base.Instance) *base.Instance { return i })
}
