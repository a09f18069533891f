package harness_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/internal/effect"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/provision"
)

// leaky is an implementation on one connection of its own that applies the
// effect in a transaction, and whose Close leaves the connection open: the
// play must kill it.
type leaky struct {
	env     adapters.Env
	mu      sync.Mutex
	conn    *pgx.Conn
	appName string
}

// leakyAdapter returns an adapter of leaky instances, and a function that
// lists the instances built so far. Their connections are closed when the
// test ends, if nothing killed them before.
func leakyAdapter(t *testing.T) (adapters.Adapter, func() []*leaky) {
	var mu sync.Mutex
	var built []*leaky
	atEnd(t, "the leaky instances' connections", func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range built {
			_ = l.conn.Close(ctx) // most were killed
		}
		return nil
	})
	adapter := adapters.Adapter{Name: "leaky", New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
		conn, err := pgx.Connect(ctx, env.DSN)
		if err != nil {
			return nil, err
		}
		l := &leaky{env: env, conn: conn}
		if err := conn.QueryRow(ctx, `SELECT current_setting('application_name')`).Scan(&l.appName); err != nil {
			return nil, err
		}
		mu.Lock()
		built = append(built, l)
		mu.Unlock()
		return l, nil
	}}
	return adapter, func() []*leaky {
		mu.Lock()
		defer mu.Unlock()
		return append([]*leaky(nil), built...)
	}
}

func (l *leaky) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := pgx.BeginFunc(ctx, l.conn, func(tx pgx.Tx) error { return l.env.Effect.Apply(ctx, tx, d) })
	if err != nil {
		return 0, err
	}
	return adapters.Applied, nil
}

func (l *leaky) Close(context.Context) error { return nil }

func (l *leaky) pid() uint32 { return l.conn.PgConn().PID() }

func TestNewPlayGivesAFreshEnvironment(t *testing.T) {
	t.Parallel()
	run := startRun(t, ampleTimeout)
	adapter, built := leakyAdapter(t)
	play := newPlay(t, run, adapter)
	second := newPlay(t, run, adapter)

	for i, s := range []*harness.Play{play, second} {
		if want := fmt.Sprintf("harmless_%s_s%d", run.ID(), i+1); s.Schema() != want {
			t.Errorf("play %d has schema %q; want %q", i+1, s.Schema(), want)
		}
		var ledgerTable *string
		if err := run.Admin().QueryRow(t.Context(), `SELECT to_regclass($1)::text`, ledger.Table(s.Schema())).Scan(&ledgerTable); err != nil || ledgerTable == nil {
			t.Errorf("play %d: no ledger %s (%v)", i+1, ledger.Table(s.Schema()), err)
		}
		if want := run.AppNamePrefix() + fmt.Sprintf("s%d-", i+1); s.AppNamePrefix() != want {
			t.Errorf("play %d has application_name prefix %q; want %q", i+1, s.AppNamePrefix(), want)
		}
	}

	env, err := play.Env(2)
	if err != nil {
		t.Fatal(err)
	}
	if env.Schema != play.Schema() || env.Instance != 2 || !effectIn(env.Effect, ledger.Table(play.Schema())) || env.Clock == nil {
		t.Errorf("Env(2) = %+v", env)
	}

	ev := event("1")
	if a := play.Deliver(t.Context(), 1, ev); !a.Acked() {
		t.Fatalf("delivery ended %s", a.Result())
	}
	l := built()[0]
	if want := play.AppNamePrefix() + "i1"; l.appName != want {
		t.Errorf("instance 1 connected as %q; want %q", l.appName, want)
	}
	effects, err := play.Effects(t.Context(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(effects) != 1 || effects[0].Attempt != 1 || effects[0].PayloadDigest != adapters.PayloadDigest(ev.Payload) || effects[0].BackendPID != int(l.pid()) {
		t.Errorf("ledger of %s: %+v; want one effect by attempt 1 from backend %d", ev, effects, l.pid())
	}
	if other, err := second.Effects(t.Context(), ev); err != nil || len(other) != 0 {
		t.Errorf("the other play's ledger has %+v (%v); plays must not share state", other, err)
	}
}

// TestPlayCloseDropsItsSchemaAndKillsOnlyItsConnections: closing a play
// ends the connections its instances opened through the DSNs they were
// given (through the play's proxy), idle or busy in a statement, whatever
// they call themselves, and no other: not a connection that carries the
// play's application_name prefix but came in some other way, nor one of
// another role through the proxy.
func TestPlayCloseDropsItsSchemaAndKillsOnlyItsConnections(t *testing.T) {
	t.Parallel()
	run := startRun(t, ampleTimeout)
	adapter, built := leakyAdapter(t)
	play := newPlay(t, run, adapter)
	for n := 1; n <= 2; n++ {
		if a := play.Deliver(t.Context(), n, event(fmt.Sprint(n))); !a.Acked() {
			t.Fatalf("delivery to instance %d ended %s", n, a.Result())
		}
	}
	env, err := play.Env(1)
	if err != nil {
		t.Fatal(err)
	}
	// sleeping runs a long statement on conn, as a stray goroutine of the
	// implementation might, and returns its outcome when it ends.
	sleeping := func(conn *pgx.Conn) <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := conn.Exec(context.Background(), "SELECT pg_sleep(60)")
			done <- err
		}()
		return done
	}
	// A connection through instance 1's DSN that renames itself, busy in a
	// statement when the play closes.
	stray := connect(t, env.DSN)
	if _, err := stray.Exec(t.Context(), "SET application_name = 'my-service'"); err != nil {
		t.Fatal(err)
	}
	strayDone := sleeping(stray)
	// One of another role, through the same DSN, busy too: cut at the
	// proxy when it closes, but not terminated.
	otherRole := connect(t, pgtest.NewRole(t).As(t, env.DSN))
	otherDone := sleeping(otherRole)
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		_, _ = run.Admin().Exec(ctx, "SELECT pg_terminate_backend($1)", int32(otherRole.PgConn().PID()))
		<-otherDone
	})

	base := pgtest.DSN(t)
	tagged := func(name string) *pgx.Conn {
		dsn, err := harness.WithApplicationName(base, name)
		if err != nil {
			t.Fatal(err)
		}
		return connect(t, dsn)
	}
	// Bystanders, straight to the server: an unrelated connection, one
	// named like the play's instances and one like another play whose name
	// starts with this play's (s1 and s10). Anyone can choose an
	// application_name, so it does not make a connection the run's.
	bystanders := map[string]*pgx.Conn{
		"unrelated":             tagged("bystander-" + randomHex(t, 4)),
		"named like the play's": tagged(play.AppNamePrefix() + "i9-stray"),
		"sibling play":          tagged(strings.TrimSuffix(play.AppNamePrefix(), "-") + "0-i1"),
		"default named":         connect(t, base),
	}
	victims := map[string]uint32{"stray": stray.PgConn().PID()}
	for i, l := range built() {
		victims[fmt.Sprintf("instance %d", i+1)] = l.pid()
	}
	eventually(t, 10*time.Second, "the two sleeps", func() bool {
		var n int
		if err := run.Admin().QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND pid = ANY($1::int4[])`,
			[]int32{int32(stray.PgConn().PID()), int32(otherRole.PgConn().PID())}).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 2
	})

	if err := play.Close(t.Context()); err != nil {
		t.Fatalf("close: %v", err)
	}

	if schemaExists(t, run.Admin(), play.Schema()) {
		t.Errorf("schema %s survived Close", play.Schema())
	}
	// Close returns once its victims are gone from pg_stat_activity.
	for what, pid := range victims {
		if backendAlive(t, run.Admin(), pid) {
			t.Errorf("%s's connection (pid %d) survived Close", what, pid)
		}
	}
	if err := <-strayDone; err == nil {
		t.Errorf("the stray connection's statement ran to its end")
	}
	if !backendAlive(t, run.Admin(), otherRole.PgConn().PID()) {
		t.Errorf("the backend of another role, busy in a statement, was terminated")
	}
	for what, conn := range bystanders {
		if _, err := conn.Exec(t.Context(), "SELECT 1"); err != nil {
			t.Errorf("the %s connection died with the play: %v", what, err)
		}
	}
	var keeper bool
	if err := run.Admin().QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $1)`, run.AppNamePrefix()+"keeper").Scan(&keeper); err != nil || !keeper {
		t.Errorf("the run's keeper is gone after a play closed (%v)", err)
	}
	// The run goes on.
	if next := newPlay(t, run, adapter); next.Deliver(t.Context(), 1, event("next")).Err != nil {
		t.Errorf("a play after the closed one does not work")
	}
	if err := play.Close(t.Context()); err != nil {
		t.Errorf("closing a play twice: %v", err)
	}
}

func TestStartDropsTheSchemasOfARunWhoseKeeperIsGone(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	gone, err := harness.Start(ctx, harness.Options{Provision: provision.Options{DSN: pgtest.DSN(t)}, DeliveryTimeout: ampleTimeout})
	if err != nil {
		t.Fatal(err)
	}
	play, err := gone.NewPlay(ctx, adapterOf("gone", fake{}))
	if err != nil {
		t.Fatal(err)
	}
	schema := play.Schema()
	pool := pgtest.Pool(t)
	atEnd(t, "schema "+schema, func(ctx context.Context) error {
		_, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		return err
	})

	// Another run started while this one lives leaves its schema alone.
	startRun(t, ampleTimeout)
	if !schemaExists(t, pool, schema) {
		t.Fatalf("schema %s of a live run was dropped", schema)
	}

	// The run dies without closing its play, as a killed process would.
	if err := gone.Close(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the closed run's keeper leaves pg_stat_activity", func() bool {
		var alive bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $1)`, gone.AppNamePrefix()+"keeper").Scan(&alive)
		return err == nil && !alive
	})
	startRun(t, ampleTimeout)
	if schemaExists(t, pool, schema) {
		t.Errorf("schema %s of a run whose keeper is gone survived Start", schema)
	}
}

func TestStartFailsWithoutADatabase(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	r, err := harness.Start(ctx, harness.Options{Provision: provision.Options{
		DSN: "postgres://nobody@127.0.0.1:1/none?connect_timeout=5", Only: provision.KindDSN,
	}})
	if err == nil {
		r.Close(context.Background())
		t.Fatal("Start succeeded against a port nothing listens on")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Start ran into the test's deadline: %v", err)
	}
}

// TestRunCloseClosesThePlaysLeftOpen: a play whose own cleanup never ran
// (an interrupt between two specs of a Ginkgo Ordered container skips it)
// is closed by Run.Close: its schema dropped, its connections ended.
func TestRunCloseClosesThePlaysLeftOpen(t *testing.T) {
	t.Parallel()
	run, err := harness.Start(t.Context(), harness.Options{DeliveryTimeout: ampleTimeout, Provision: provision.Options{DSN: pgtest.DSN(t)}})
	if err != nil {
		t.Fatalf("start run: %v", err)
	}
	adapter, built := leakyAdapter(t)
	play, err := run.NewPlay(t.Context(), adapter)
	if err != nil {
		t.Fatalf("new play: %v", err)
	}
	if a := play.Deliver(t.Context(), 1, event("1")); !a.Acked() {
		t.Fatalf("delivery ended %s", a.Result())
	}
	if err := run.Close(t.Context()); err != nil {
		t.Fatalf("close the run: %v", err)
	}
	db := pgtest.Pool(t)
	if schemaExists(t, db, play.Schema()) {
		t.Errorf("schema %s of a play left open survived Run.Close", play.Schema())
	}
	for _, l := range built() {
		if backendAlive(t, db, l.pid()) {
			t.Errorf("the connection (pid %d) of a play left open survived Run.Close", l.pid())
		}
	}
}

// effectIn reports whether e is the harness's effect inserting into table.
func effectIn(e adapters.Effect, table string) bool {
	eff, ok := effect.Of(e)
	return ok && eff.Table() == table
}

// PlayOptions: a play without history keeps none (the attempt is still
// returned and numbered), and one with the system clock hands it out even
// to an adapter that accepts the harness's.
func TestPlayOptions(t *testing.T) {
	r := startRun(t, 5*time.Second)
	adapter := delivering("clocked", func(context.Context, adapters.Delivery) (adapters.Outcome, error) { return adapters.Applied, nil })
	adapter.Declares.AcceptsClock = true

	plain := newPlay(t, r, adapter)
	if _, manual := plain.Clock(); manual == nil {
		t.Error("a default play hands an adapter that accepts the clock no manual clock")
	}
	plain.Deliver(t.Context(), 1, event("kept"))
	if n := len(plain.History(event("kept"))); n != 1 {
		t.Errorf("a default play kept %d attempts; want 1", n)
	}

	play, err := r.NewPlayWith(t.Context(), adapter, harness.PlayOptions{NoHistory: true, SystemClock: true})
	if err != nil {
		t.Fatal(err)
	}
	atEnd(t, "play "+play.Schema(), play.Close)
	if clock, manual := play.Clock(); manual != nil || clock != (harness.SystemClock{}) {
		t.Errorf("SystemClock: clock %T, manual %v", clock, manual)
	}
	first, second := play.Deliver(t.Context(), 1, event("forgotten")), play.Deliver(t.Context(), 2, event("forgotten"))
	if first.Delivery.Attempt != 1 || second.Delivery.Attempt != 2 || first.Err != nil {
		t.Errorf("attempts %d and %d (%v); want 1 and 2", first.Delivery.Attempt, second.Delivery.Attempt, first.Err)
	}
	if n := len(play.History(event("forgotten"))); n != 0 {
		t.Errorf("NoHistory: the play kept %d attempts", n)
	}
}

// TestConnectedThroughProxy: a run knows whether its instances ever
// connected through their listeners; one that ignores the DSN's host and
// port and connects straight to the server never does, though its
// deliveries are acknowledged.
func TestConnectedThroughProxy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		direct  bool
		through bool
	}{{"through the DSN", false, true}, {"around it", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			run := startRun(t, ampleTimeout)
			ref := reference.Adapter()
			adapter := ref
			adapter.New = func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
				if tc.direct {
					env.DSN = pgtest.DSN(t)
				}
				return ref.New(ctx, env)
			}
			play := newPlay(t, run, adapter)
			if a := play.Deliver(t.Context(), 1, event("1")); !a.Acked() {
				t.Fatalf("the delivery ended %s", a.Result())
			}
			proxy := play.Proxy()
			if seen := proxy.Seen(1); (seen.Opened > 0) != tc.through || (seen.Statements() > 0) != tc.through {
				t.Errorf("the proxy saw %+v of instance 1; want connections and statements: %t", seen, tc.through)
			}
			if err := play.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			if !run.Acknowledged() || !run.EffectsApplied() || run.ConnectedThroughProxy() != tc.through {
				t.Errorf("acknowledged %t, effects applied %t, connected through the proxy %t; want true, true, %t",
					run.Acknowledged(), run.EffectsApplied(), run.ConnectedThroughProxy(), tc.through)
			}
		})
	}
}
