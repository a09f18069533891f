package suite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// TestPlaysRunSideBySideAndCrashesAlone certifies the reference on a
// throwaway cluster and checks how the engine scheduled its plays, from
// the fixtures' progress: reported once each, in catalogue order; some
// fixtures played at the same time; crash-recovery's plays, which crash
// the server, beside no other fixture's, and all three of them with one
// crash of the server between them.
func TestPlaysRunSideBySideAndCrashesAlone(t *testing.T) {
	var progress []FixtureProgress
	cert, err := Certify(t.Context(), reference.Adapter(), WithProvisioning(string(provision.KindCluster)),
		WithFixtureProgress(func(p FixtureProgress) { progress = append(progress, p) }))
	if err != nil {
		skipWithoutServer(t, provision.KindCluster, err.Error())
		t.Fatal(err)
	}
	if !cert.Certified {
		t.Fatalf("the reference is not certified:\n%s", cert.Table())
	}
	var order []string
	for _, f := range fixtures.Catalog() {
		order = append(order, f.ID)
	}
	var reported []string
	spans := map[string][2]time.Time{}
	for _, p := range progress {
		reported = append(reported, p.Fixture)
		if p.Duration > 0 {
			spans[p.Fixture] = [2]time.Time{p.Started, p.Started.Add(p.Duration)}
		}
	}
	if want := slices.DeleteFunc(slices.Clone(order), func(id string) bool { return !slices.Contains(reported, id) }); !slices.Equal(reported, want) {
		t.Errorf("fixtures reported in the order %v; want the catalogue's, %v", reported, want)
	}
	overlap := func(a, b [2]time.Time) bool { return a[0].Before(b[1]) && b[0].Before(a[1]) }
	crash, ok := spans[crashRecoveryID]
	if !ok {
		t.Fatalf("crash-recovery did not play: %v", reported)
	}
	sideBySide := false
	for id, span := range spans {
		if id != crashRecoveryID && overlap(span, crash) {
			t.Errorf("%s played from %s to %s, beside crash-recovery (%s to %s), which crashes the server", id,
				span[0].Format(time.StampMilli), span[1].Format(time.StampMilli), crash[0].Format(time.StampMilli), crash[1].Format(time.StampMilli))
		}
		for other, o := range spans {
			sideBySide = sideBySide || (other != id && overlap(span, o))
		}
	}
	if !sideBySide {
		t.Errorf("no two fixtures played at the same time: %v", spans)
	}
	// The fixtures whose plays take long (takesLong) start before those
	// whose plays do not, which fill the time beside them.
	for _, long := range []string{concurrentDeliveryID, externalEffectID} {
		for _, short := range []string{doubleDeliveryID, failureAfterMarkerID, identityFidelityID, ambiguousCommitID} {
			if l, s := spans[long], spans[short]; s[0].Before(l[0]) {
				t.Errorf("%s started at %s, before %s, whose plays take long, at %s", short, s[0].Format(time.StampMilli), long, l[0].Format(time.StampMilli))
			}
		}
	}
	if n := cert.Faults["server:crash"]; n != 1 {
		t.Errorf("the server crashed %d times; want once, for crash-recovery's three plays together", n)
	}
}

// TestPlaysWaitForRoomOnTheServer takes the test server's connections
// until fewer are left than one play may open, as another run or the
// application would on a shared server, then certifies three short
// fixtures on it: they play one after another, none beside another, and
// the run says why; every rule passes all the same.
func TestPlaysWaitForRoomOnTheServer(t *testing.T) {
	if !pgtest.Owned(t) {
		t.Skip("takes nearly all the test server's connections, which it shares with others here")
	}
	dsn := pgtest.NewDatabase(t)
	db := pgtest.PoolOn(t, dsn)
	var free int
	if err := db.QueryRow(t.Context(), `SELECT current_setting('max_connections')::int
	- (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int`).Scan(&free); err != nil {
		t.Fatal(err)
	}
	// free counts db's connection as taken. The run opens its own (the
	// admin pool and the keeper) before it counts; after them a play
	// would need one more than is left.
	per := DefaultContenders + connectionsPerPlay
	taken := free - harness.OwnConnections - (per - 1)
	if taken < 1 {
		t.Skipf("the test server has %d free connections, too few to take some and leave room for one play", free)
	}
	cfg := db.Config().Copy()
	cfg.MaxConns, cfg.MinConns = int32(taken), int32(taken)
	hog, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hog.Close)
	conns := make([]*pgxpool.Conn, 0, taken)
	for range taken {
		c, err := hog.Acquire(t.Context())
		if err != nil {
			t.Fatalf("take connection %d of %d: %v", len(conns)+1, taken, err)
		}
		conns = append(conns, c)
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Release()
		}
	})

	var progress []FixtureProgress
	var log strings.Builder
	var mu sync.Mutex
	cert, err := Certify(t.Context(), reference.Adapter(), WithDSN(dsn),
		WithFixtures(doubleDeliveryID, namespaceIsolationID, identityFidelityID),
		WithFixtureProgress(func(p FixtureProgress) { progress = append(progress, p) }),
		WithLogf(func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(&log, format+"\n", args...)
		}))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range cert.Rules {
		if r.Verdict != certificate.VerdictPass && r.Verdict != certificate.VerdictSkipped {
			t.Errorf("%s: %s: %s", r.ID, r.Verdict, r.Message)
		}
	}
	for i, a := range progress {
		for _, b := range progress[i+1:] {
			if a.Started.Before(b.Started.Add(b.Duration)) && b.Started.Before(a.Started.Add(a.Duration)) {
				t.Errorf("%s (%s for %s) and %s (%s for %s) played at the same time, with %d connections free for %d a play may open",
					a.Fixture, a.Started.Format(time.StampMilli), a.Duration, b.Fixture, b.Started.Format(time.StampMilli), b.Duration, per-1, per)
			}
		}
	}
	if want := "plays wait for one another to end"; !strings.Contains(log.String(), want) {
		t.Errorf("the run's log does not say %q:\n%s", want, log.String())
	}
}

// TestSharedCrash checks the meeting of the plays that crash the server
// together: one crash when every member asks for it, made by the last to
// ask; a member that ends without asking lets the others have theirs; a
// play alone crashes at once.
func TestSharedCrash(t *testing.T) {
	ctx := t.Context()
	var crashes atomic.Int32
	crash := func(context.Context) (harness.Recovery, error) {
		crashes.Add(1)
		return harness.Recovery{Down: time.Duration(crashes.Load())}, nil
	}

	t.Run("every member asks", func(t *testing.T) {
		crashes.Store(0)
		var c sharedCrash
		for range 3 {
			c.join()
		}
		var wg sync.WaitGroup
		got := make([]harness.Recovery, 3)
		for i := range 3 {
			wg.Go(func() {
				rec, err := c.crash(ctx, crash)
				if err != nil {
					t.Error(err)
				}
				got[i] = rec
			})
		}
		wg.Wait()
		if n := crashes.Load(); n != 1 {
			t.Errorf("%d crashes for three members; want 1", n)
		}
		for i, rec := range got {
			if rec.Down != 1 {
				t.Errorf("member %d learnt of crash %d; want the one crash", i, rec.Down)
			}
		}
	})

	t.Run("a member leaves without asking", func(t *testing.T) {
		crashes.Store(0)
		var c sharedCrash
		c.join()
		c.join()
		done := make(chan error)
		go func() {
			_, err := c.crash(ctx, crash)
			done <- err
		}()
		select {
		case <-done:
			t.Fatal("the crash came before the other member asked or left")
		case <-time.After(50 * time.Millisecond):
		}
		c.leave(ctx, crash)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := crashes.Load(); n != 1 {
			t.Errorf("%d crashes; want 1", n)
		}
	})

	t.Run("alone", func(t *testing.T) {
		crashes.Store(0)
		var c sharedCrash
		for range 2 {
			if _, err := c.crash(ctx, crash); err != nil {
				t.Fatal(err)
			}
		}
		if n := crashes.Load(); n != 2 {
			t.Errorf("%d crashes for two plays one after another; want 2", n)
		}
	})

	t.Run("a waiting member's context ends", func(t *testing.T) {
		crashes.Store(0)
		var c sharedCrash
		c.join()
		c.join()
		wctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := c.crash(wctx, crash); !errors.Is(err, context.Canceled) {
			t.Errorf("error %v; want the context's", err)
		}
		if n := crashes.Load(); n != 0 {
			t.Errorf("%d crashes; want none", n)
		}
	})
}

// TestPlaysAtOnceIsValidated refuses a negative bound on the plays run
// side by side before anything starts.
func TestPlaysAtOnceIsValidated(t *testing.T) {
	cert, err := Certify(t.Context(), reference.Adapter(), WithPlaysAtOnce(-1), WithDSN("postgres://nobody@127.0.0.1:1/none"))
	if !errors.Is(err, ErrSetup) || cert.Error == "" {
		t.Fatalf("error %v, certificate error %q; want ErrSetup saying why", err, cert.Error)
	}
	if want := "plays at once must be at least 1, not -1"; !strings.Contains(cert.Error, want) {
		t.Errorf("certificate error %q; want it to say %q", cert.Error, want)
	}
}
