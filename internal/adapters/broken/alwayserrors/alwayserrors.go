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
// # The fixtures that must catch it
//
// Every fixture but external-effect, which does not apply (it declares no
// external effects). It is also how the harness proves that a consumer that
// acknowledges nothing is judged quickly: the broker's patience bounds what
// each play waits for it.
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
