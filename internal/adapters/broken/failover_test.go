package broken_test

import (
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

// The helpers of the adapters whose bug shows only when the database
// fails over: a lost commit.

// lose deletes ev's marker and its effects behind the adapter's back, as a
// failover to a standby that lacked their commit does.
func (w *world) lose(ev adapters.Event) {
	w.t.Helper()
	pool := pgtest.Pool(w.t)
	tag, err := pool.Exec(w.t.Context(), `DELETE FROM `+kit.Table(w.schema, kit.ProcessedEventsTable)+` WHERE namespace = $1 AND event_id = $2`, ev.Namespace, ev.ID)
	if err != nil || tag.RowsAffected() != 1 {
		w.t.Fatalf("delete the marker of %s: %v, %d rows; want 1", ev, err, tag.RowsAffected())
	}
	if _, err := pool.Exec(w.t.Context(), `DELETE FROM `+ledger.Table(w.schema)+` WHERE namespace = $1 AND event_id = $2`, []byte(ev.Namespace), []byte(ev.ID)); err != nil {
		w.t.Fatalf("delete the effects of %s: %v", ev, err)
	}
}

// TestCachedClaimsExpireAsTheirMarkers: broken-cached-claims's cache
// answers no longer than the markers are kept, so that retention-expiry
// passes: Purge forgets the claims it purged, and a claim another worker
// cached expires with the window, whichever worker purged.
func TestCachedClaimsExpireAsTheirMarkers(t *testing.T) {
	ev := event("orders", "1", "x")
	t.Run("Purge forgets the claims it purged", func(t *testing.T) {
		w := newWorld(t, cachedClaims)
		w.expect(1, ev, 1, adapters.Applied)
		w.purge(1, time.Now().Add(-time.Hour), 0)
		w.expect(1, ev, 2, adapters.Duplicate)
		w.purge(1, time.Now().Add(time.Hour), 1)
		w.expect(1, ev, 3, adapters.Applied)
		w.effects(ev, 2)
	})
	t.Run("a claim another worker cached expires with the window", func(t *testing.T) {
		w := newWorld(t, cachedClaims)
		t0 := time.Now()
		clock := harness.NewManualClock(t0)
		w.clock = clock
		window, eps := reference.Adapter().Declares.RedeliveryWindow, time.Millisecond
		w.expect(1, ev, 1, adapters.Applied)
		w.expect(2, ev, 2, adapters.Duplicate) // worker 2 caches the claim
		clock.Set(t0.Add(window - eps))
		w.purge(1, clock.Now().Add(-window), 0)
		w.expect(2, ev, 3, adapters.Duplicate)
		clock.Set(t0.Add(window + eps))
		w.purge(1, clock.Now().Add(-window), 1)
		w.expect(2, ev, 4, adapters.Applied)
		w.effects(ev, 2)
	})
}
