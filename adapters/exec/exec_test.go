package exec

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/exec/protocol"
	"github.com/harmless-dev/harmless/internal/effect"
	"github.com/harmless-dev/harmless/internal/execchild"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/version"
)

func TestMain(m *testing.M) {
	execchild.MaybeServe()
	pgtest.Main(m)
}

// testTimeout bounds one call in these tests: far above what a well-behaved
// child needs, so only a hang reaches it.
const testTimeout = 30 * time.Second

// probe runs the probe for a child in mode and fails the test on error.
func probe(t *testing.T, mode string, cfg Config) (adapters.Adapter, Info) {
	t.Helper()
	cfg.Command = execchild.Command(mode)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	adapter, info, err := Probe(ctx, cfg)
	if err != nil {
		t.Fatalf("probe %s: %v", mode, err)
	}
	return adapter, info
}

// env returns an environment with a fresh schema holding the ledger, on the
// real server; the schema is dropped when the test ends.
func env(t testing.TB) adapters.Env {
	t.Helper()
	pool := pgtest.Pool(t)
	var raw [4]byte
	_, _ = rand.Read(raw[:])
	schema := "exec_test_" + hex.EncodeToString(raw[:])
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})
	if err := ledger.Install(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	return adapters.Env{
		DSN:      pgtest.DSN(t),
		Schema:   schema,
		Effect:   ledger.Effect(schema, nil),
		Clock:    harness.SystemClock{},
		Instance: 1,
	}
}

// start builds an instance of a child in mode; it is closed when the test
// ends.
func start(t *testing.T, mode string, cfg Config) (*pool, adapters.Env) {
	t.Helper()
	adapter, _ := probe(t, mode, cfg)
	e := env(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	impl, err := adapter.New(ctx, e)
	if err != nil {
		t.Fatalf("new instance of %s: %v", mode, err)
	}
	p := impl.(*pool)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p, e
}

func deliver(t *testing.T, impl adapters.Implementation, id string, timeout time.Duration) (adapters.Outcome, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ev := adapters.Event{Namespace: "exec-test", ID: id, Payload: []byte("payload of " + id)}
	return impl.Deliver(ctx, adapters.Delivery{Event: ev, Attempt: 1})
}

func TestProbeReportsTheHandshake(t *testing.T) {
	adapter, info := probe(t, execchild.Reference, Config{})
	// The adapter is named by the child, not by the way it is run.
	if adapter.Name != "execchild-reference" {
		t.Errorf("adapter %q, want the name the child declares, %q", adapter.Name, "execchild-reference")
	}
	want := adapters.Declaration{ConflictPolicy: adapters.RejectConflicts, RedeliveryWindow: 24 * time.Hour, AcceptsClock: true}
	if adapter.Declares != want || info.declares != want {
		t.Errorf("declares %+v (info %+v), want %+v", adapter.Declares, info.declares, want)
	}
	if info.Protocol != protocol.Version || info.MaxInFlight != 8 || info.Implementation.Name != "execchild-reference" {
		t.Errorf("info %+v", info)
	}
}

func TestAdapterNameIsPrintable(t *testing.T) {
	for name, want := range map[string]string{
		"node-pg":         "node-pg",
		"python psycopg":  "python psycopg",
		"x\nCERTIFIED: y": `"x\nCERTIFIED: y"`,
		"red\x1b[31m":     `"red\x1b[31m"`,
	} {
		if got := adapterName(protocol.Implementation{Name: name, Version: "1"}); got != want {
			t.Errorf("adapterName(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestReferenceChildDeliversPurgesAndCloses(t *testing.T) {
	impl, e := start(t, execchild.Reference, Config{})
	if !effect.IsRemote(impl) {
		t.Error("the instance does not say it applies the effect in another process; the harness would arm Go hooks that cannot reach it")
	}
	for i, want := range []adapters.Outcome{adapters.Applied, adapters.Duplicate, adapters.Duplicate} {
		got, err := deliver(t, impl, "1", testTimeout)
		if err != nil || got != want {
			t.Fatalf("delivery %d: %v, %v; want %v", i+1, got, err, want)
		}
	}
	entries, err := ledger.Entries(context.Background(), pgtest.Pool(t), e.Schema, "exec-test", "1")
	if err != nil || len(entries) != 1 {
		t.Fatalf("ledger holds %d effects (%v), want 1", len(entries), err)
	}
	removed, err := impl.Purge(context.Background(), time.Now().Add(time.Hour))
	if err != nil || removed != 1 {
		t.Fatalf("purge removed %d (%v), want 1", removed, err)
	}
	procs := impl.procs
	if err := impl.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	for _, m := range procs {
		waitGroupGone(t, m.cmd.Process.Pid)
	}
	if _, err := deliver(t, impl, "2", testTimeout); err == nil {
		t.Error("a delivery after Close succeeded")
	}
}

func TestPoolGrowsWhenEveryProcessIsBusy(t *testing.T) {
	impl, _ := start(t, execchild.Reference, Config{})
	const n = 40 // over 8 in flight per process: at least 5 processes
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			got, err := deliver(t, impl, fmt.Sprint("grow-", i), testTimeout)
			if err == nil && got != adapters.Applied {
				err = fmt.Errorf("event %d: %v", i, got)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	impl.mu.Lock()
	procs := len(impl.procs)
	impl.mu.Unlock()
	if most := (n + 7) / 8; procs < 1 || procs > most {
		t.Errorf("the pool has %d processes; %d requests need at most %d at 8 in flight each", procs, n, most)
	}
	t.Logf("%d concurrent deliveries ran on %d processes", n, procs)
}

func TestMaxProcessesBoundsThePool(t *testing.T) {
	impl, _ := start(t, execchild.HangOnDeliver, Config{maxProcesses: 1})
	// Fill the only process's 8 slots with deliveries that hang until
	// cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range 8 {
		wg.Go(func() {
			ev := adapters.Event{Namespace: "exec-test", ID: fmt.Sprint("busy-", i)}
			_, _ = impl.Deliver(ctx, adapters.Delivery{Event: ev, Attempt: 1})
		})
	}
	full := time.Now().Add(testTimeout)
	for len(impl.procs) == 0 || len(impl.procs[0].slots) < 8 { // polling, not synchronising
		if time.Now().After(full) {
			t.Fatal("the 8 deliveries never all reached the process")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A ninth must wait for a slot, not start a second process.
	_, err := deliver(t, impl, "ninth", 300*time.Millisecond)
	if !errors.Is(err, errNoAnswer) || !strings.Contains(err.Error(), "was busy until the deadline") {
		t.Errorf("a ninth delivery: %v; want it to wait for a slot until its deadline", err)
	}
	impl.mu.Lock()
	procs := len(impl.procs)
	impl.mu.Unlock()
	if procs != 1 {
		t.Errorf("the pool has %d processes, want at most 1", procs)
	}
}

// failures are the misbehaviours that must fail a delivery with a clear
// error and without hanging the caller beyond its deadline.
var failures = []struct {
	mode string
	want []string // in the error message
	is   error
}{
	{execchild.CrashOnDeliver, []string{"exit status 3", execchild.LastWords}, errProcessFailed},
	{execchild.Garbage, []string{"malformed answer", `"this is not json"`}, protocol.ErrViolation},
	{execchild.UnknownOutcome, []string{`unknown outcome "maybe"`}, protocol.ErrViolation},
	{execchild.WrongID, []string{"never sent or was already answered"}, protocol.ErrViolation},
	{execchild.LongLine, []string{"line too long"}, protocol.ErrViolation},
	{execchild.StrayGrandchild, []string{"exit status 4"}, errProcessFailed},
	{execchild.HangOnDeliver, []string{"no answer", "deliver request"}, errNoAnswer},
	{execchild.StopReading, []string{"no answer"}, errNoAnswer},
}

func TestMisbehavingChildFailsItsDeliveryClearly(t *testing.T) {
	for _, f := range failures {
		t.Run(f.mode, func(t *testing.T) {
			impl, e := start(t, f.mode, Config{})
			_, err := deliver(t, impl, "1", 3*time.Second)
			if err == nil {
				t.Fatal("the delivery succeeded")
			}
			if !errors.Is(err, f.is) {
				t.Errorf("error does not wrap %v: %v", f.is, err)
			}
			for _, w := range f.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q: %v", w, err)
				}
			}
			if errors.Is(err, errProcessFailed) {
				// The process is gone and its crash recorded; the next
				// delivery goes to a new process, which fails the same way.
				_, again := deliver(t, impl, "2", testTimeout)
				if !errors.Is(again, f.is) || !strings.Contains(again.Error(), "process 2 of instance 1") {
					t.Errorf("the next delivery: %v, want the same failure of a new process", again)
				}
				crashes := impl.Crashes()
				if len(crashes) != 2 {
					t.Errorf("Crashes: %q; want the two processes' crashes", crashes)
				}
				for i, c := range crashes {
					checkCrash(t, c, fmt.Sprintf("process %d of instance 1", i+1), f.want...)
				}
			} else {
				// A delivery without an answer by its deadline finds the
				// process wedged: it is killed with its process group,
				// counts as a crash and leaves the pool.
				if !strings.Contains(err.Error(), wedgeKill) {
					t.Errorf("error does not say that the process was killed: %v", err)
				}
				crashes := impl.Crashes()
				if len(crashes) != 1 {
					t.Fatalf("Crashes: %q; want the wedged process's", crashes)
				}
				checkCrash(t, crashes[0], "process 1 of instance 1", "no answer to deliver request 3 within 3s: killed with its process group and replaced")
				if procs := serving(impl); len(procs) != 0 {
					t.Errorf("the pool still serves with %d processes, the first %s; want none", len(procs), procs[0].label)
				}
			}
			entries, err := ledger.Entries(context.Background(), pgtest.Pool(t), e.Schema, "exec-test", "1")
			if err != nil || len(entries) != 0 {
				t.Errorf("ledger holds %d effects (%v), want none", len(entries), err)
			}
		})
	}
}

func TestStrayGrandchildIsKilledWithTheGroup(t *testing.T) {
	impl, _ := start(t, execchild.StrayGrandchild, Config{})
	m := impl.procs[0]
	if _, err := deliver(t, impl, "1", testTimeout); !errors.Is(err, errProcessFailed) {
		t.Fatalf("delivery: %v", err)
	}
	if err := impl.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	waitGroupGone(t, m.cmd.Process.Pid)
}

// waitGroupGone waits until no live process is left in process group pgid.
// Killed processes whose parent has not reaped them yet (zombies) count as
// gone.
func waitGroupGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		live := liveInGroup(t, pgid)
		if len(live) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v of group %d are still alive", live, pgid)
		}
		time.Sleep(20 * time.Millisecond) // polling /proc, not synchronising
	}
}

// pfExiting is Linux's PF_EXITING, the flag of a process that is exiting.
const pfExiting = 0x4

// liveInGroup lists the processes of group pgid that are neither zombies
// nor exiting.
func liveInGroup(t *testing.T, pgid int) []int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var live []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// Fields after the command, which is in parentheses: state, ppid,
		// pgrp, session, tty_nr, tpgid, flags. A process with PF_EXITING
		// (0x4) among its flags is past the point of no return: it is
		// exiting, killed, and will run no more code of its own.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 7 || fields[2] != strconv.Itoa(pgid) || fields[0] == "Z" {
			continue
		}
		if flags, err := strconv.ParseUint(fields[6], 10, 64); err == nil && flags&pfExiting != 0 {
			continue
		}
		live = append(live, pid)
	}
	return live
}

func TestErrorClassesMapToTheHarnessErrors(t *testing.T) {
	impl, _ := start(t, execchild.ErrorClasses, Config{})
	for class, want := range map[string]error{
		string(protocol.InvalidInput):    adapters.ErrInvalidInput,
		string(protocol.PayloadConflict): adapters.ErrPayloadConflict,
		string(protocol.Unsupported):     errUnsupported,
	} {
		if _, err := deliver(t, impl, class, testTimeout); !errors.Is(err, want) {
			t.Errorf("class %s: %v, want an error wrapping %v", class, err, want)
		}
	}
	_, err := deliver(t, impl, string(protocol.Transient), testTimeout)
	var answer *answerError
	if !errors.As(err, &answer) || answer.Err.Class != protocol.Transient || errors.Is(err, adapters.ErrInvalidInput) || errors.Is(err, errProcessFailed) {
		t.Errorf("class transient: %v", err)
	}
	_, err = deliver(t, impl, "bogus", testTimeout)
	if !errors.Is(err, protocol.ErrViolation) || !strings.Contains(err.Error(), `unknown error class "bogus"`) {
		t.Errorf("class bogus: %v, want a protocol violation", err)
	}
}

func TestHandshakeFailuresAreClear(t *testing.T) {
	for mode, want := range map[string]string{
		execchild.BadVersion: "chose protocol version 99; the harness offered [1]",
		execchild.HelloError: "cannot start: no configuration",
		execchild.SilentExit: "closed its stdout and exited (exit status 0)",
	} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			_, _, err := Probe(ctx, Config{Command: execchild.Command(mode)})
			if !errors.Is(err, errHandshake) || !strings.Contains(err.Error(), want) {
				t.Errorf("probe: %v; want errHandshake saying %q", err, want)
			}
		})
	}
	t.Run("no such command", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		_, _, err := Probe(ctx, Config{Command: "/nonexistent/harmless-impl --flag"})
		if !errors.Is(err, errHandshake) || !strings.Contains(err.Error(), "exit status 127") || !strings.Contains(err.Error(), "not found") {
			t.Errorf("probe: %v; want the shell's exit status 127 and its 'not found' on stderr", err)
		}
	})
}

// TestOneAtATimeChild runs the Go child declaring max_in_flight 1, which
// reads its next line only after answering: concurrent deliveries all
// succeed, each process having at most one at a time. A value out of range
// stops the child before the handshake, saying why.
func TestOneAtATimeChild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	adapter, info, err := Probe(ctx, Config{Command: execchild.CommandMaxInFlight(execchild.Reference, 1)})
	if err != nil || info.MaxInFlight != 1 {
		t.Fatalf("probe: max_in_flight %d, %v; want 1", info.MaxInFlight, err)
	}
	impl, err := adapter.New(ctx, env(t))
	if err != nil {
		t.Fatal(err)
	}
	p := impl.(*pool)
	defer p.Close(context.Background())
	const n = 4
	var wg sync.WaitGroup
	outcomes := make([]adapters.Outcome, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { outcomes[i], errs[i] = deliver(t, p, fmt.Sprint("one-at-a-time-", i), testTimeout) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || outcomes[i] != adapters.Applied {
			t.Errorf("delivery %d: %v, %v; want Applied", i, outcomes[i], errs[i])
		}
	}
	p.mu.Lock()
	procs := len(p.procs)
	p.mu.Unlock()
	if procs < 1 || procs > n {
		t.Errorf("%d concurrent deliveries ran on %d processes; want 1 to %d", n, procs, n)
	}

	_, _, err = Probe(ctx, Config{Command: execchild.CommandMaxInFlight(execchild.Reference, 0)})
	if !errors.Is(err, errHandshake) || !strings.Contains(err.Error(), execchild.EnvMaxInFlight) {
		t.Errorf("probe with max_in_flight 0: %v; want errHandshake naming %s", err, execchild.EnvMaxInFlight)
	}
}

// stubEffect is an effect the harness did not build.
type stubEffect struct{}

func (stubEffect) Apply(context.Context, pgx.Tx, adapters.Delivery) error     { return nil }
func (stubEffect) ApplySQL(context.Context, *sql.Tx, adapters.Delivery) error { return nil }

// TestForeignEffectIsRefused checks that an instance built with an effect
// the harness did not build fails clearly, before any child starts: the
// child needs the effect's statement, which only the harness's effect has.
func TestForeignEffectIsRefused(t *testing.T) {
	adapter, _ := probe(t, execchild.Reference, Config{})
	e := env(t)
	e.Effect = stubEffect{}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	impl, err := adapter.New(ctx, e)
	if err == nil {
		_ = impl.Close(ctx)
		t.Fatal("new instance with a foreign effect succeeded; want an error")
	}
	if !strings.Contains(err.Error(), "not built by the harmless harness") {
		t.Errorf("new instance: %v; want it to say the effect was not built by the harness", err)
	}
}

func TestEveryProcessMustDeclareTheSame(t *testing.T) {
	adapter, _ := probe(t, execchild.Inconsistent, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err := adapter.New(ctx, env(t))
	if err == nil || !strings.Contains(err.Error(), "but the probe declared") {
		t.Errorf("new instance: %v; want a declaration mismatch", err)
	}
}

func TestChildIgnoringShutdownIsKilled(t *testing.T) {
	// The probe exits as asked, whatever the machine's load; only the
	// instance gets the short shutdown timeout.
	_, info := probe(t, execchild.IgnoreShutdown, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	impl, err := newPool(ctx, Config{Command: execchild.Command(execchild.IgnoreShutdown), shutdownTimeout: 500 * time.Millisecond}, info, env(t))
	if err != nil {
		t.Fatal(err)
	}
	m := impl.procs[0]
	err = impl.Close(context.Background())
	if err == nil || !strings.Contains(err.Error(), "did not exit after shutdown") {
		t.Errorf("close: %v; want an error saying the child was killed", err)
	}
	<-m.exited
	if !strings.Contains(m.status, "killed") {
		t.Errorf("the child ended with %s, want killed", m.status)
	}
}

// TestATransientSetupDoesNotEndTheInstance: a process the pool starts
// later whose setup answers transient (as one started while the server
// restarts would) fails only the request that needed it, unacknowledged,
// and is not a crash; the instance lives on and its other processes go on
// serving.
func TestATransientSetupDoesNotEndTheInstance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cfg := Config{
		Command: execchild.CommandMaxInFlight(execchild.SetupTransientLater, 1),
		Env:     []string{execchild.EnvMarkDir + "=" + t.TempDir()},
	}
	adapter, _, err := Probe(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := env(t)
	const app = "exec-test-transient-setup"
	e.DSN = pgtest.NamedDSN(t, app)
	impl, err := adapter.New(ctx, e)
	if err != nil {
		t.Fatalf("new instance: %v", err)
	}
	t.Cleanup(func() { _ = impl.Close(context.Background()) })

	// Keep the first process busy: its delivery waits for a lock the test
	// holds on the marker table, so the next request needs a new process.
	tx, err := pgtest.Pool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{e.Schema, "processed_events"}.Sanitize()+" IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	busy := make(chan error, 1)
	go func() {
		got, err := deliver(t, impl, "busy", testTimeout)
		if err == nil && got != adapters.Applied {
			err = fmt.Errorf("the busy delivery ended %v", got)
		}
		busy <- err
	}()
	waitForLockWait(t, app)

	_, err = deliver(t, impl, "needs-a-new-process", testTimeout)
	var answer *answerError
	if !errors.As(err, &answer) || answer.Err.Class != protocol.Transient || errors.Is(err, errProcessFailed) {
		t.Fatalf("the request that needed a new process: %v; want the transient answer to its setup, unacknowledged", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-busy; err != nil {
		t.Fatalf("the first process's delivery: %v", err)
	}
	if got, err := deliver(t, impl, "after", testTimeout); err != nil || got != adapters.Applied {
		t.Errorf("a delivery after the failed start: %v, %v; want Applied: the instance must live on", got, err)
	}
	if crashes := impl.(*pool).Crashes(); len(crashes) != 0 {
		t.Errorf("Crashes: %q; a setup that answered did not crash", crashes)
	}
}

// waitForLockWait waits until a backend whose application_name is app
// waits for a lock, and fails the test if none does within testTimeout.
func waitForLockWait(t *testing.T, app string) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var waiting bool
		err := pgtest.Pool(t).QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
WHERE application_name = $1 AND wait_event_type = 'Lock')`, app).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection of %s waited for a lock within %s", app, testTimeout)
		}
		<-tick.C
	}
}

// oneAtATime makes a child declare max_in_flight 1, so that concurrent
// deliveries need several processes.
var oneAtATime = Config{Env: []string{execchild.EnvMaxInFlight + "=1"}}

// growTo makes impl, a pool of a child declaring max_in_flight 1, start
// several processes, by delivering batches of n new events at once until
// it has.
func growTo(t *testing.T, impl *pool, n int, prefix string) {
	t.Helper()
	for round := range 5 {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if got, err := deliver(t, impl, fmt.Sprint(prefix, round, "-", i), testTimeout); err != nil || got != adapters.Applied {
					t.Errorf("delivery %d: %v, %v; want Applied", i, got, err)
				}
			})
		}
		wg.Wait()
		impl.mu.Lock()
		procs := len(impl.procs)
		impl.mu.Unlock()
		if procs >= 2 {
			return
		}
	}
	t.Fatalf("5 rounds of %d concurrent deliveries ran on one process; the test needs several", n)
}

// requestsSent is how many requests each process of impl has been sent.
func requestsSent(impl *pool) map[*process]uint64 {
	impl.mu.Lock()
	defer impl.mu.Unlock()
	sent := map[*process]uint64{}
	for _, m := range impl.procs {
		m.mu.Lock()
		sent[m.process] = m.nextID
		m.mu.Unlock()
	}
	return sent
}

// TestDrainAsksEveryProcess: Drain sends drain to every process of the
// instance and succeeds when each answers. A child that does not implement
// drain makes Drain fail with errDrainUnsupported (also errors.ErrUnsupported),
// at once on the next call, and goes on serving deliveries.
func TestDrainAsksEveryProcess(t *testing.T) {
	t.Run("answered", func(t *testing.T) {
		impl, _ := start(t, execchild.Reference, oneAtATime)
		growTo(t, impl, 6, "drain-")
		before := requestsSent(impl)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := impl.Drain(ctx); err != nil {
			t.Fatalf("drain: %v", err)
		}
		for proc, n := range requestsSent(impl) {
			if n != before[proc]+1 {
				t.Errorf("%s was sent %d requests by Drain, want 1", proc.label, n-before[proc])
			}
		}
	})
	t.Run("unsupported", func(t *testing.T) {
		impl, _ := start(t, execchild.NoDrain, Config{})
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		err := impl.Drain(ctx)
		if !errors.Is(err, errDrainUnsupported) || !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "unknown method drain") {
			t.Fatalf("drain: %v; want errDrainUnsupported with the child's answer", err)
		}
		before := requestsSent(impl)
		if err := impl.Drain(ctx); !errors.Is(err, errDrainUnsupported) {
			t.Errorf("a second drain: %v; want errDrainUnsupported", err)
		}
		if after := requestsSent(impl); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("a second drain asked the child again (%v, then %v); it already said it does not drain", before, after)
		}
		if got, err := deliver(t, impl, "after-drain", testTimeout); err != nil || got != adapters.Applied {
			t.Errorf("a delivery after the unsupported drain: %v, %v; want Applied", got, err)
		}
	})
}

// TestAbortKillsEveryProcess: Abort kills every process of the instance by
// SIGKILL, without shutdown, and returns once they have exited. What they
// committed stays: a new instance on the same schema finds it. The aborted
// instance fails later requests, and its Close is a no-op.
func TestAbortKillsEveryProcess(t *testing.T) {
	impl, e := start(t, execchild.Reference, oneAtATime)
	growTo(t, impl, 6, "abort-")
	impl.mu.Lock()
	procs := slices.Clone(impl.procs)
	impl.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := impl.Abort(ctx); err != nil {
		t.Fatalf("abort: %v", err)
	}
	for _, m := range procs {
		if m.status != "killed by signal killed" {
			t.Errorf("%s ended with %s; want killed by SIGKILL", m.label, m.status)
		}
		if live := liveInGroup(t, m.cmd.Process.Pid); len(live) > 0 {
			t.Errorf("processes %v of %s's group are alive after Abort returned", live, m.label)
		}
	}
	if _, err := deliver(t, impl, "after-abort", testTimeout); err == nil {
		t.Error("a delivery after Abort succeeded")
	}
	if err := impl.Drain(ctx); err == nil {
		t.Error("a drain after Abort succeeded")
	}
	if err := impl.Close(ctx); err != nil {
		t.Errorf("close after abort: %v; want a no-op", err)
	}

	next, err := newPool(ctx, impl.cfg, impl.info, adapters.Env{DSN: e.DSN, Schema: e.Schema, Effect: e.Effect, Clock: e.Clock, Instance: 2})
	if err != nil {
		t.Fatalf("a new instance on the aborted one's schema: %v", err)
	}
	defer next.Close(context.Background())
	if got, err := deliver(t, next, "abort-0-0", testTimeout); err != nil || got != adapters.Duplicate {
		t.Errorf("redelivery of an event the aborted instance applied: %v, %v; want Duplicate", got, err)
	}
}

// TestAbortFailsTheDeliveryInFlight: a delivery the child is working on
// when the instance is aborted fails at once, saying so, unacknowledged.
func TestAbortFailsTheDeliveryInFlight(t *testing.T) {
	impl, _ := start(t, execchild.HangOnDeliver, Config{})
	failed := make(chan error, 1)
	go func() {
		_, err := deliver(t, impl, "in-flight", 10*testTimeout)
		failed <- err
	}()
	full := time.Now().Add(testTimeout)
	for len(impl.procs[0].slots) == 0 { // polling, not synchronising
		if time.Now().After(full) {
			t.Fatal("the delivery never reached the process")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := impl.Abort(t.Context()); err != nil {
		t.Fatalf("abort: %v", err)
	}
	err := <-failed
	if !errors.Is(err, errProcessFailed) || !strings.Contains(err.Error(), "SIGKILL (abort)") {
		t.Errorf("the delivery in flight: %v; want it failed by the abort", err)
	}
}

// TestHelloCarriesTheHarnessVersion runs a child that saves the hello it
// reads and answers it, and checks that the harness said which version it
// is, so that a child may log it or refuse an old harness.
func TestHelloCarriesTheHarnessVersion(t *testing.T) {
	saved := filepath.Join(t.TempDir(), "hello.json")
	answer, err := protocol.EncodeResult(1, protocol.HelloResult{
		Protocol:       protocol.Version,
		Implementation: protocol.Implementation{Name: "hello-saver", Version: "1"},
		Declares:       adapters.Declaration{ConflictPolicy: adapters.RejectConflicts, RedeliveryWindow: time.Hour},
		MaxInFlight:    1,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, _, err = Probe(ctx, Config{
		Command: `IFS= read -r line; printf '%s\n' "$line" > "$SAVED"; printf '%s\n' "$ANSWER"; IFS= read -r shutdown`,
		Env:     []string{"SAVED=" + saved, "ANSWER=" + strings.TrimSuffix(string(answer), "\n")},
	})
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	line, err := os.ReadFile(saved)
	if err != nil {
		t.Fatal(err)
	}
	var hello struct {
		Method string               `json:"method"`
		Params protocol.HelloParams `json:"params"`
	}
	if err := json.Unmarshal(line, &hello); err != nil {
		t.Fatalf("the hello line %q: %v", line, err)
	}
	if hello.Method != protocol.MethodHello || hello.Params.Harness != version.Harness {
		t.Errorf("hello %s; want method %q with harness %q", line, protocol.MethodHello, version.Harness)
	}
}
