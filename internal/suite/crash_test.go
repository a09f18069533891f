package suite

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/suite/certificate"
	"github.com/harmless-dev/harmless/suite/docker"
)

// crashChildEnv names, in a child process of TestCrashRecovery, the case of
// crashCases to run the crash-recovery fixture against.
const crashChildEnv = "HARMLESS_TEST_CRASH"

// expect is the verdict a rule must get and, unless it passes, what its
// message must mention.
type expect struct {
	verdict certificate.Verdict
	says    string
}

// crashCase is an adapter the crash-recovery fixture runs against, on a
// throwaway cluster, and the verdict each of its rules must get.
type crashCase struct {
	adapter adapters.Adapter
	want    map[string]expect
}

var (
	pass        = expect{verdict: certificate.VerdictPass}
	lostEffects = expect{certificate.VerdictFail, "was acknowledged while the ledger held no effect of it: "}
	twoEffects  = expect{certificate.VerdictFail, "has 2 effects (expected 1)"}
)

// crashCases are the built-in adapters whose verdict on crash-recovery the
// registry states and that show each way of passing or failing it, and two
// bugs that only this fixture catches.
var crashCases = map[string]crashCase{
	"reference":           builtinCase("reference", pass, pass),
	"broken-marker-first": builtinCase("broken-marker-first", pass, lostEffects),
	"broken-effect-first": builtinCase("broken-effect-first", pass, twoEffects),
	// No tables: the write hold has nothing to hold, the sleep does.
	"broken-in-memory": builtinCase("broken-in-memory", pass, pass),
	// It reconnects, and errs on the redelivery all the same: the message
	// says so, not that it did not reconnect.
	"broken-redelivery-errors": builtinCase("broken-redelivery-errors", expect{certificate.VerdictFail, "it reconnected (the server completed"}, pass),
	// The reference Store on an UNLOGGED table: crash recovery empties it.
	"unlogged": {
		adapter: unloggedAdapter(),
		want: map[string]expect{
			catalogid.CrashRecoveryAppliedSurvives:     {certificate.VerdictFail, "after the restart the redelivery to instance 1 ended Applied (expected Duplicate)"},
			catalogid.CrashRecoveryInFlightExactlyOnce: pass,
		},
	},
	// Single-threaded processes that start slowly: correct, certified, and
	// every in-flight delivery is held when the server crashes, since the
	// warm-up started every process the in-flight deliveries need.
	// Without the warm-up, most first attempts reached the server only
	// after the restart, where the sleep planned for them held them.
	"slow-process-start": {
		adapter: adapters.Adapter{Name: "slow-process-start", Declares: reference.Adapter().Declares, New: newProcesses},
		want: map[string]expect{
			catalogid.CrashRecoveryAppliedSurvives:     pass,
			catalogid.CrashRecoveryInFlightExactlyOnce: {certificate.VerdictPass, "16 of 16 in-flight deliveries were held by a sleep"},
		},
	},
	// One connection, opened by the factory and kept for ever.
	"no-reconnect": {
		adapter: adapters.Adapter{Name: "no-reconnect", Declares: reference.Adapter().Declares, New: newOneConn},
		want: map[string]expect{
			catalogid.CrashRecoveryAppliedSurvives:     {certificate.VerdictFail, "it did not reconnect by itself"},
			catalogid.CrashRecoveryInFlightExactlyOnce: {certificate.VerdictFail, "was never acknowledged after the restart"},
		},
	},
}

func builtinCase(name string, applied, inFlight expect) crashCase {
	a, err := builtin.Lookup(name)
	if err != nil {
		panic(err)
	}
	return crashCase{adapter: a, want: map[string]expect{
		catalogid.CrashRecoveryAppliedSurvives:     applied,
		catalogid.CrashRecoveryInFlightExactlyOnce: inFlight,
	}}
}

// unloggedAdapter is the reference Store whose processed-events table is
// UNLOGGED: faster, and emptied by crash recovery.
func unloggedAdapter() adapters.Adapter {
	return adapters.Adapter{
		Name:     "unlogged",
		Declares: reference.Adapter().Declares,
		New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
			pool, err := pgxpool.New(ctx, env.DSN)
			if err != nil {
				return nil, err
			}
			table := pgx.Identifier{env.Schema, kit.ProcessedEventsTable}.Sanitize()
			if _, err := pool.Exec(ctx, `CREATE UNLOGGED TABLE IF NOT EXISTS `+table+` (
	namespace text NOT NULL, event_id text NOT NULL, payload_digest bytea NOT NULL, processed_at timestamptz NOT NULL,
	PRIMARY KEY (namespace, event_id))`); err != nil {
				pool.Close()
				return nil, err
			}
			store := reference.NewStore(pool, reference.Config{Schema: env.Schema, Now: env.Clock.Now})
			if err := store.Migrate(ctx); err != nil { // creates nothing: the table is there
				pool.Close()
				return nil, err
			}
			return storeImpl{pool: pool, store: store, effect: env.Effect}, nil
		},
	}
}

// processStart is how long a process of the slow-process-start case takes
// to come up: what a loaded machine took for a Node.js child to start.
const processStart = 2 * time.Second

// processes is the reference Store behind single-threaded processes, as a
// child over the exec protocol that declares max_in_flight 1 and the pool
// of processes that runs it: a delivery goes to a free process, or starts
// another, which takes processStart to reach the database; once up, a
// process stays. A process does not hear that the harness gave up on a
// delivery: it goes on with it, while the pool counts it free again, so
// the next delivery it gets waits until it is done, as a request queued on
// a child's stdin does.
type processes struct {
	store adapters.Implementation
	mu    sync.Mutex
	free  []*process
}

// process is one single-threaded process: it works on one delivery at a
// time.
type process struct{ working sync.Mutex }

func newProcesses(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
	store, err := smallPoolAdapter(4*crashInFlight).New(ctx, env) // a connection for each process there may be
	if err != nil {
		return nil, err
	}
	return &processes{store: store, free: []*process{{}}}, nil
}

func (p *processes) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	p.mu.Lock()
	var proc *process
	if n := len(p.free); n > 0 {
		proc, p.free = p.free[n-1], p.free[:n-1]
	}
	p.mu.Unlock()
	defer func() { // free again once the harness stops waiting
		p.mu.Lock()
		p.free = append(p.free, proc)
		p.mu.Unlock()
	}()
	if proc == nil {
		select { // the start of a new process
		case <-time.After(processStart):
			proc = &process{}
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
	}
	type result struct {
		outcome adapters.Outcome
		err     error
	}
	done := make(chan result, 1)
	go func() {
		proc.working.Lock()
		defer proc.working.Unlock()
		// Bounded only so that the test leaves nothing behind.
		work, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		outcome, err := p.store.Deliver(work, d)
		done <- result{outcome, err}
	}()
	select {
	case r := <-done:
		return r.outcome, r.err
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
}

func (p *processes) Close(ctx context.Context) error { return p.store.Close(ctx) }

// oneConn is the reference pattern on a single connection, opened by the
// factory and never replaced: once the server is gone, so is the instance.
type oneConn struct {
	mu     sync.Mutex
	conn   *pgx.Conn
	table  string
	effect adapters.Effect
}

func newOneConn(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
	conn, err := pgx.Connect(ctx, env.DSN)
	if err != nil {
		return nil, err
	}
	c := &oneConn{conn: conn, table: pgx.Identifier{env.Schema, "one_conn_markers"}.Sanitize(), effect: env.Effect}
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+c.table+` (namespace text, event_id text, PRIMARY KEY (namespace, event_id))`); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	return c, nil
}

func (c *oneConn) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	outcome := adapters.Duplicate
	err := pgx.BeginFunc(ctx, c.conn, func(tx pgx.Tx) error {
		var claimed bool
		err := tx.QueryRow(ctx, `INSERT INTO `+c.table+` VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING true`, d.Namespace, d.ID).Scan(&claimed)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		outcome = adapters.Applied
		return c.effect.Apply(ctx, tx, d)
	})
	if err != nil {
		return 0, err
	}
	return outcome, nil
}

func (c *oneConn) Close(ctx context.Context) error { return c.conn.Close(ctx) }

// TestCrashChild runs the suite against the adapter named by crashChildEnv
// and writes the certificate to childCertEnv. It runs only in a child
// process started by TestCrashRecovery, which selects the crash-recovery
// fixture with a label filter and a throwaway cluster with
// HARMLESS_PROVISION.
func TestCrashChild(t *testing.T) {
	runChildSuite(t, crashChildEnv, "TestCrashRecovery", func(name string) (adapters.Adapter, []Option, bool) {
		c, ok := crashCases[name]
		// The suite links no container engine: a test that wants one
		// passes it, as a user's would.
		return c.adapter, []Option{WithContainers(docker.Start)}, ok
	})
}

// TestCrashRecovery runs the crash-recovery fixture for real, on a
// throwaway cluster of its own, in a child process each: the reference
// passes, the adapters that commit the marker and the effect apart, or
// err on a redelivery, fail as the verdict matrix says, and so do an
// UNLOGGED marker table and an implementation that never reconnects;
// single-threaded processes that start slowly pass. It is skipped only where no PostgreSQL server
// binaries are found.
func TestCrashRecovery(t *testing.T) {
	for name, c := range crashCases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if entry, err := builtin.EntryOf(name); err == nil {
				checkAgainstRegistry(t, entry, c)
			}
			runCrashCase(t, name, c, provision.KindCluster)
		})
	}
}

// TestCrashRecoveryInAContainer runs the crash-recovery fixture in a
// container of its own, which comes back from each crash on a new host
// port: the reference passes, broken-marker-first loses effects. It is
// skipped where no container engine or image is available, unless
// HARMLESS_REQUIRE_CONTAINER=1, as in CI.
func TestCrashRecoveryInAContainer(t *testing.T) {
	for _, name := range []string{"reference", "broken-marker-first"} {
		t.Run(name, func(t *testing.T) {
			runCrashCase(t, name, crashCases[name], provision.KindContainer)
		})
	}
}

// runCrashCase runs the crash-recovery fixture against c's adapter in a
// child process, on a server of kind, and checks every verdict and the
// evidence that the server really crashed and came back. It skips the test
// when the run finds no server of that kind (see skipWithoutServer).
func runCrashCase(t *testing.T, name string, c crashCase, kind provision.Kind) {
	t.Helper()
	// The forced way passes over any DSN in the environment; one set but
	// empty would be refused were it read, so none is emptied here.
	cert, output, elapsed := runTestChild(t, "TestCrashChild", []string{runFixtures("TestCrashChild", catalogid.CrashRecovery)},
		[]string{"HARMLESS_PROVISION=" + string(kind), crashChildEnv + "=" + name}, 0, 1)
	skipWithoutServer(t, kind, cert.Error)
	t.Logf("the crash-recovery fixture against %s on a %s took %s (the child process %s)",
		name, kind, time.Duration(cert.Duration*float64(time.Second)).Round(time.Millisecond), elapsed.Round(time.Millisecond))
	if cert.Error != "" || cert.DatabaseKind != string(kind) {
		t.Fatalf("the run did not start on a %s (%q): %s\n%s", kind, cert.DatabaseKind, cert.Error, tail(output, 60))
	}
	for _, r := range cert.Rules {
		want, ok := c.want[r.ID]
		switch {
		case !ok:
			if r.Verdict != certificate.VerdictSkipped {
				t.Errorf("rule %s of another fixture ran (%s): the label filter did not hold", r.ID, r.Verdict)
			}
		case r.Verdict != want.verdict:
			t.Errorf("rule %s: verdict %s; want %s\n%s", r.ID, r.Verdict, want.verdict, r.Message)
		case !strings.Contains(r.Message, want.says):
			t.Errorf("rule %s is %s without saying %q:\n%s", r.ID, r.Verdict, want.says, r.Message)
		case !strings.Contains(r.Message, "crashed and restarted") || !strings.Contains(r.Message, "connections opened before the crash gone"):
			t.Errorf("rule %s is %s without the evidence of the crash:\n%s", r.ID, r.Verdict, r.Message)
		}
	}
	// The variants run side by side and share one crash of the server
	// (each rule's evidence says it saw it, above); the sleep stall holds
	// at least one delivery.
	if cert.Faults["server:crash"] != 1 || cert.Faults["db:sleep@effect"] < 1 {
		t.Errorf("faults fired: %v; want one server crash, shared by the plays, and a sleep", cert.Faults)
	}
	if t.Failed() {
		t.Logf("the child's output:\n%s", tail(output, 80))
	}
}

// skipWithoutServer skips the test when a run could not start because it
// found no server of kind: no PostgreSQL server binaries for a cluster; no
// engine, image or reaper setting for a container, unless
// HARMLESS_REQUIRE_CONTAINER=1, as in CI, where that fails the test.
func skipWithoutServer(t *testing.T, kind provision.Kind, setupErr string) {
	t.Helper()
	switch {
	case kind == provision.KindCluster && noServerBinaries(setupErr):
		t.Skipf("no PostgreSQL server binaries for a throwaway cluster: %s", setupErr)
	case kind == provision.KindContainer && strings.Contains(setupErr, provision.ErrNoDatabase.Error()):
		if os.Getenv("HARMLESS_REQUIRE_CONTAINER") == "1" {
			t.Fatalf("no container, with HARMLESS_REQUIRE_CONTAINER=1: %s", setupErr)
		}
		t.Skipf("no container (start an engine with ci/start-docker.sh, build the image with ci/build-postgres-image.sh, source ci/env.sh): %s", setupErr)
	}
}

// checkAgainstRegistry fails the test when a built-in adapter's case does
// not give each crash-recovery rule a verdict the registry allows.
func checkAgainstRegistry(t *testing.T, entry builtin.Entry, c crashCase) {
	t.Helper()
	for id, e := range c.want {
		rule, err := fixtures.Lookup(id)
		if err != nil {
			t.Fatal(err)
		}
		if allowed, why := entry.Allowed(rule); !slices.Contains(allowed, e.verdict) {
			t.Errorf("the case of %s wants %s on %s; the registry allows %v (%s)", entry.Adapter.Name, e.verdict, id, allowed, why)
		}
	}
}

// noServerBinaries reports whether a run could not start because the
// cluster way found no server binaries.
func noServerBinaries(setupErr string) bool {
	return strings.Contains(setupErr, provision.ErrNoDatabase.Error()) && strings.HasSuffix(strings.TrimSpace(setupErr), ": not found")
}
