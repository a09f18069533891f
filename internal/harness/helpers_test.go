package harness_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/provision"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// shortTimeout is the delivery timeout of the tests that make an
// implementation hang: the driver gives up after it and a grace period of at
// most as long again.
const shortTimeout = 300 * time.Millisecond

// ampleTimeout is the delivery timeout of the tests whose implementations
// do real database work and are not meant to hang: far above what that work
// takes, even under the race detector on a loaded machine.
const ampleTimeout = 30 * time.Second

// patience bounds, generously, how long a guarded call may take with
// shortTimeout: the timeout, the grace period and ten seconds for a noisy
// machine.
const patience = 2*shortTimeout + 10*time.Second

// shortPatience is the broker's patience in the tests whose
// implementations never acknowledge: long enough for a few redeliveries
// (10, 20, 40 ms ...), short enough to keep them quick.
const shortPatience = 300 * time.Millisecond

// cleanupTimeout bounds the database work of a test's cleanups.
const cleanupTimeout = 30 * time.Second

// fake is an implementation made of functions; a nil function behaves well.
type fake struct {
	deliver func(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error)
	close   func(ctx context.Context) error
}

func (f fake) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if f.deliver == nil {
		return adapters.Applied, nil
	}
	return f.deliver(ctx, d)
}

func (f fake) Close(ctx context.Context) error {
	if f.close == nil {
		return nil
	}
	return f.close(ctx)
}

// adapterOf returns an adapter whose factory builds f.
func adapterOf(name string, f fake) adapters.Adapter {
	return adapters.Adapter{
		Name: name,
		New:  func(context.Context, adapters.Env) (adapters.Implementation, error) { return f, nil },
	}
}

// delivering returns an adapter whose instances deliver with fn.
func delivering(name string, fn func(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error)) adapters.Adapter {
	return adapterOf(name, fake{deliver: fn})
}

// hold is a gate that misbehaving implementations block on, ignoring their
// context. It opens when the test ends, so the goroutines the driver
// abandoned end too instead of piling up; the test then waits for them.
type hold struct {
	open    chan struct{}
	blocked atomic.Int64
}

func newHold(t *testing.T) *hold {
	t.Helper()
	h := &hold{open: make(chan struct{})}
	t.Cleanup(func() {
		close(h.open)
		if !poll(cleanupTimeout, func() bool { return h.blocked.Load() == 0 }) {
			t.Errorf("%d hung calls did not end within %s of being released", h.blocked.Load(), cleanupTimeout)
		}
	})
	return h
}

// block blocks until the test ends, whatever any context says.
func (h *hold) block() {
	h.blocked.Add(1)
	defer h.blocked.Add(-1)
	<-h.open
}

// cleanupContext is a fresh context for a cleanup: t.Context is already
// cancelled when cleanups run.
func cleanupContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), cleanupTimeout)
}

// atEnd calls release when the test ends and reports its error, if any, as
// failing to release what.
func atEnd(t *testing.T, what string, release func(context.Context) error) {
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		if err := release(ctx); err != nil {
			t.Errorf("release %s: %v", what, err)
		}
	})
}

// startRun starts a harness run on the test server, closed when the test
// ends.
func startRun(t *testing.T, timeout time.Duration) *harness.Run {
	t.Helper()
	return startRunOpts(t, harness.Options{DeliveryTimeout: timeout})
}

func startRunOpts(t *testing.T, opts harness.Options) *harness.Run {
	t.Helper()
	opts.Provision = provision.Options{DSN: pgtest.DSN(t)}
	r, err := harness.Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("start run: %v", err)
	}
	atEnd(t, "run "+r.ID(), r.Close)
	return r
}

// newPlay creates a play of adapter in r, closed when the test ends.
func newPlay(t *testing.T, r *harness.Run, adapter adapters.Adapter) *harness.Play {
	t.Helper()
	play, err := r.NewPlay(t.Context(), adapter)
	if err != nil {
		t.Fatalf("new play: %v", err)
	}
	atEnd(t, "play "+play.Schema(), play.Close)
	return play
}

// deliverBounded delivers ev to instance n and fails the test, without
// waiting further, if Deliver does not return within limit.
func deliverBounded(t *testing.T, play *harness.Play, n int, ev adapters.Event, limit time.Duration) harness.Attempt {
	t.Helper()
	done := make(chan harness.Attempt, 1)
	start := time.Now()
	go func() { done <- play.Deliver(t.Context(), n, ev) }()
	select {
	case a := <-done:
		t.Logf("Deliver returned after %s: %s", time.Since(start).Round(time.Millisecond), a.Result())
		return a
	case <-time.After(limit):
		t.Fatalf("Deliver did not return within %s", limit)
		return harness.Attempt{}
	}
}

func event(id string) adapters.Event {
	return adapters.Event{Namespace: "harness-test", ID: id, Payload: []byte(`{"id":"` + id + `"}`)}
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// connect opens a connection to dsn, closed when the test ends.
func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	atEnd(t, "connection", func(ctx context.Context) error {
		_ = conn.Close(ctx) // may already be dead: some tests kill it
		return nil
	})
	return conn
}

func schemaExists(t *testing.T, db *pgxpool.Pool, schema string) bool {
	t.Helper()
	var ok bool
	if err := db.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&ok); err != nil {
		t.Fatalf("look for schema %s: %v", schema, err)
	}
	return ok
}

func backendAlive(t *testing.T, db *pgxpool.Pool, pid uint32) bool {
	t.Helper()
	var ok bool
	if err := db.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, int32(pid)).Scan(&ok); err != nil {
		t.Fatalf("look for backend %d: %v", pid, err)
	}
	return ok
}

// poll checks cond every 10ms until it holds or limit has passed, and
// reports whether it held.
func poll(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// eventually fails the test if cond does not hold within limit.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(limit, cond) {
		t.Fatalf("%s: still not so after %s", what, limit)
	}
}
