// Package inmemory is the `broken-in-memory` adapter: the deduplication set
// lives in each instance's memory, not in the database.
//
// # The real-world bug
//
// A "seen" set in process memory: a map, an LRU cache, a library's
// in-memory store (watermill's Deduplicator ships one as its default). It
// works on a developer's machine with one consumer. In production there are
// several instances, and a broker hands a redelivery to whichever instance
// is free; each instance knows only the events it processed itself, and a
// restart forgets everything.
//
// # What goes wrong
//
// The map is keyed by (namespace, id) and holds each claim's payload digest,
// its time on the harness's clock and its state: in progress or done. A
// delivery found in the map is Duplicate (in progress) or compared by digest
// (done); otherwise it is marked in progress, its effect is applied and
// committed in a transaction, and it is marked done. Any failure, a panic
// included, removes the entry so the redelivery can apply. Purge removes the
// done entries claimed before the cutoff. Within one instance all of that is
// correct. But a second instance has its own map: a
// redelivery to it, or a concurrent delivery to both, applies the event
// again.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package inmemory

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// Name is the adapter's name.
const Name = "broken-in-memory"

// Adapter returns the `broken-in-memory` adapter.
func Adapter() adapters.Adapter {
	return base.Adapter(Name, base.NoTable, func(i *base.Instance) *implementation {
		return &implementation{Instance: i, seen: map[key]*entry{}}
	})
}

type key struct{ namespace, id string }

// entry is one claim. Its fields are guarded by the implementation's mutex.
type entry struct {
	digest  []byte
	claimed time.Time
	done    bool
}

type implementation struct {
	*base.Instance
	mu   sync.Mutex
	seen map[key]*entry
}

// Deliver claims the event in the instance's map, then applies its effect.
func (i *implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if err := kit.Validate(d.Event); err != nil {
		return 0, err
	}
	k := key{d.Namespace, d.ID}
	e, outcome := i.claim(k, kit.Digest(d.Payload))
	if e == nil {
		return outcome, nil
	}
	applied := false
	// Runs on every path, a panic in the effect included.
	defer func() {
		i.mu.Lock()
		defer i.mu.Unlock()
		switch {
		case applied:
			e.done = true
		case i.seen[k] == e:
			delete(i.seen, k)
		}
	}()
	if err := i.InTx(ctx, func(tx pgx.Tx) error { return i.Effect.Apply(ctx, tx, d) }); err != nil {
		return 0, err
	}
	applied = true
	return adapters.Applied, nil
}

// claim records an in-progress entry for k and returns it, or, when k is
// already in the map, returns nil and the delivery's outcome.
func (i *implementation) claim(k key, digest []byte) (*entry, adapters.Outcome) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if e, ok := i.seen[k]; ok {
		if !e.done {
			return nil, adapters.Duplicate
		}
		return nil, kit.Classify(e.digest, digest)
	}
	e := &entry{digest: digest, claimed: i.Now()}
	i.seen[k] = e
	return e, 0
}

// Purge removes the done entries claimed before cutoff.
func (i *implementation) Purge(_ context.Context, cutoff time.Time) (int64, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	var removed int64
	for k, e := range i.seen {
		if e.done && e.claimed.Before(cutoff) {
			delete(i.seen, k)
			removed++
		}
	}
	return removed, nil
}
