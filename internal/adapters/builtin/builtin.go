// Package builtin lists the adapters that ship with harmless, by name, for
// the CLI and for the harness's own tests.
package builtin

import (
	"fmt"
	"slices"
	"strings"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/advisorylock"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/databasesql"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/destinationkey"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/failfast"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/lease"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/polling"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/serializable"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/slow"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/slowrelay"
	"github.com/harmless-dev/harmless/internal/adapters/broken/alwayserrors"
	"github.com/harmless-dev/harmless/internal/adapters/broken/busyisduplicate"
	"github.com/harmless-dev/harmless/internal/adapters/broken/casefolded"
	"github.com/harmless-dev/harmless/internal/adapters/broken/checktheninsert"
	"github.com/harmless-dev/harmless/internal/adapters/broken/earlypurge"
	"github.com/harmless-dev/harmless/internal/adapters/broken/effectfirst"
	"github.com/harmless-dev/harmless/internal/adapters/broken/ignorepayload"
	"github.com/harmless-dev/harmless/internal/adapters/broken/inmemory"
	"github.com/harmless-dev/harmless/internal/adapters/broken/lossykey"
	"github.com/harmless-dev/harmless/internal/adapters/broken/markerfirst"
	"github.com/harmless-dev/harmless/internal/adapters/broken/nonamespace"
	"github.com/harmless-dev/harmless/internal/adapters/broken/nopurge"
	"github.com/harmless-dev/harmless/internal/adapters/broken/outboxdeletefirst"
	"github.com/harmless-dev/harmless/internal/adapters/broken/randomkey"
	"github.com/harmless-dev/harmless/internal/adapters/broken/sendaftercommit"
	"github.com/harmless-dev/harmless/internal/adapters/broken/sendintx"
	"github.com/harmless-dev/harmless/internal/adapters/broken/sqlsplice"
	"github.com/harmless-dev/harmless/internal/adapters/broken/timebucketed"
	"github.com/harmless-dev/harmless/internal/adapters/broken/truncatedkey"
)

// All returns every built-in adapter, sorted by name.
func All() []adapters.Adapter {
	all := []adapters.Adapter{
		advisorylock.Adapter(),
		databasesql.Adapter(),
		destinationkey.Adapter(),
		failfast.Adapter(),
		lease.Adapter(),
		polling.Adapter(),
		serializable.Adapter(),
		slow.Adapter(),
		slowrelay.Adapter(),
		alwayserrors.Adapter(),      // broken-always-errors
		busyisduplicate.Adapter(),   // broken-busy-is-duplicate
		casefolded.Adapter(),        // broken-case-folded
		checktheninsert.Adapter(),   // broken-check-then-insert
		earlypurge.Adapter(),        // broken-early-purge
		effectfirst.Adapter(),       // broken-effect-first
		ignorepayload.Adapter(),     // broken-ignore-payload
		inmemory.Adapter(),          // broken-in-memory
		lossykey.Adapter(),          // broken-lossy-key
		markerfirst.Adapter(),       // broken-marker-first
		nonamespace.Adapter(),       // broken-no-namespace
		nopurge.Adapter(),           // broken-no-purge
		outboxdeletefirst.Adapter(), // broken-outbox-delete-first
		randomkey.Adapter(),         // broken-random-key
		sendaftercommit.Adapter(),   // broken-send-after-commit
		sendintx.Adapter(),          // broken-send-in-tx
		sqlsplice.Adapter(),         // broken-sql-splice
		timebucketed.Adapter(),      // broken-time-bucketed-key
		truncatedkey.Adapter(),      // broken-truncated-key
		reference.Adapter(),
	}
	slices.SortFunc(all, func(a, b adapters.Adapter) int { return strings.Compare(a.Name, b.Name) })
	return all
}

// Names returns the names of the built-in adapters, sorted.
func Names() []string {
	var names []string
	for _, a := range All() {
		names = append(names, a.Name)
	}
	return names
}

// Lookup returns the built-in adapter called name.
func Lookup(name string) (adapters.Adapter, error) {
	for _, a := range All() {
		if a.Name == name {
			return a, nil
		}
	}
	return adapters.Adapter{}, fmt.Errorf("unknown adapter %q (known: %s)", name, strings.Join(Names(), ", "))
}
