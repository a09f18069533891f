package exec

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/exec/protocol"
	"github.com/harmless-dev/harmless/internal/execchild"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/redact"
)

// crashBytes bounds one entry of Crashes: the label and time, the cause
// (which quotes at most 200 bytes of a stray line) and the excerpt of
// stderr (see TestStderrExcerptIsBounded).
const crashBytes = 120 + 600 + reportBytes + lineBytes + 80

// instance builds an instance of adapter on e; it is closed when the test
// ends.
func instance(t *testing.T, adapter adapters.Adapter, e adapters.Env) *pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	impl, err := adapter.New(ctx, e)
	if err != nil {
		t.Fatalf("new instance: %v", err)
	}
	p := impl.(*pool)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// serving returns the processes serving impl's requests.
func serving(impl *pool) []*member {
	impl.mu.Lock()
	defer impl.mu.Unlock()
	return slices.Clone(impl.procs)
}

// crashPIDs returns the process ids of impl's crashed processes.
func crashPIDs(impl *pool) []int {
	impl.mu.Lock()
	defer impl.mu.Unlock()
	var pids []int
	for _, c := range impl.crashes {
		pids = append(pids, c.pid)
	}
	return pids
}

// eventually polls cond until it holds, and fails the test if it does not
// within testTimeout. It observes state the test cannot be told of; it
// never stands in for synchronisation.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, testTimeout)
		}
		<-tick.C
	}
}

// checkCrash fails the test unless crash, an entry of Crashes, names
// label and says each of want, within its bounds.
func checkCrash(t *testing.T, crash, label string, want ...string) {
	t.Helper()
	if !strings.HasPrefix(crash, label+" failed at ") {
		t.Errorf("a crash does not start with %q: %s", label+" failed at", crash)
	}
	for _, w := range want {
		if !strings.Contains(crash, w) {
			t.Errorf("the crash of %s does not say %q: %s", label, w, crash)
		}
	}
	if len(crash) > crashBytes || strings.Contains(crash, "\n") {
		t.Errorf("the crash of %s takes %d bytes or several lines; want one line of at most %d: %s", label, len(crash), crashBytes, crash)
	}
}

// TestAProcessThatCrashesIsReplaced: a child that exits when the server
// terminates the connection of a delivery in flight, as a node-postgres
// child without an 'error' listener does, fails that delivery
// unacknowledged, quoting its crash report; Crashes reports the crash
// with the report's first line; and the redelivery is served by a new
// process, which applies the event once.
func TestAProcessThatCrashesIsReplaced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	adapter, _ := probe(t, execchild.ExitOnLostConnection, Config{})
	e := env(t)
	const app = "exec-test-lost-connection"
	e.DSN = pgtest.NamedDSN(t, app)
	impl := instance(t, adapter, e)
	if got, err := deliver(t, impl, "before", testTimeout); err != nil || got != adapters.Applied {
		t.Fatalf("a delivery before the fault: %v, %v", got, err)
	}
	first := serving(impl)[0]

	// The delivery waits for a lock the test holds, so that its connection
	// is in use when the server terminates it.
	tx, err := pgtest.Pool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{e.Schema, "processed_events"}.Sanitize()+" IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 1)
	go func() {
		_, err := deliver(t, impl, "victim", testTimeout)
		failed <- err
	}()
	waitForLockWait(t, app)
	if _, err := pgtest.Pool(t).Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE application_name = $1 AND wait_event_type = 'Lock'`, app); err != nil {
		t.Fatal(err)
	}
	err = <-failed
	if !errors.Is(err, errProcessFailed) || !strings.Contains(err.Error(), "exit status 1") || !strings.Contains(err.Error(), execchild.NodeLostConnection) {
		t.Fatalf("the delivery whose connection was terminated: %v; want the process's failure with its exit status and crash report", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	crashes := impl.Crashes()
	if len(crashes) != 1 {
		t.Fatalf("Crashes: %q; want the one crash", crashes)
	}
	checkCrash(t, crashes[0], "process 1 of instance 1", "exit status 1", "crash report starts: "+execchild.NodeLostConnection)
	if strings.Contains(crashes[0], "Node.js v20") {
		t.Errorf("the crash quotes the end of the report, not only its first lines: %s", crashes[0])
	}
	t.Logf("Crashes: %q", crashes)

	if got, err := deliver(t, impl, "victim", testTimeout); err != nil || got != adapters.Applied {
		t.Fatalf("the redelivery: %v, %v; want Applied by a new process", got, err)
	}
	procs := serving(impl)
	if len(procs) != 1 || procs[0].label != "process 2 of instance 1" || procs[0].cmd.Process.Pid == first.cmd.Process.Pid {
		t.Errorf("the pool serves with %d processes (the first %s); want the one that replaced process 1", len(procs), procs[0].label)
	}
	if live := liveInGroup(t, first.cmd.Process.Pid); len(live) > 0 {
		t.Errorf("processes %v of the crashed process's group are alive", live)
	}
	entries, err := ledger.Entries(ctx, pgtest.Pool(t), e.Schema, "exec-test", "victim")
	if err != nil || len(entries) != 1 {
		t.Errorf("the ledger holds %d effects of the victim (%v); want 1", len(entries), err)
	}
	if got := impl.Crashes(); len(got) != 1 {
		t.Errorf("Crashes after the redelivery: %q; want the one crash", got)
	}
}

// endBackoff makes impl's crash-loop backoff end now: it moves the last
// failure back by the backoff, rather than the test waiting for it.
func endBackoff(impl *pool) {
	impl.mu.Lock()
	defer impl.mu.Unlock()
	impl.lastFailure = impl.lastFailure.Add(-crashLoopBackoff)
}

// started is how many processes impl has started.
func started(impl *pool) int {
	impl.mu.Lock()
	defer impl.mu.Unlock()
	return impl.started
}

// TestAChildThatCrashesOnEveryRequest: each delivery to a child that
// crashes at every one fails with its process's crash, on a new process
// started no sooner than restartDelay after the crash before, and
// Crashes grows by one with each, oldest first; until crashLoopLimit
// processes crashed so. Then the pool backs off: a delivery fails at once
// with the last crash, and starts no process; once the backoff is over, a
// delivery starts one process again. Close returns at once, with no
// process left.
func TestAChildThatCrashesOnEveryRequest(t *testing.T) {
	impl, _ := start(t, execchild.CrashOnDeliver, Config{})
	for i := range crashLoopLimit {
		label := fmt.Sprintf("process %d of instance 1", i+1)
		_, err := deliver(t, impl, fmt.Sprint("crash-", i), testTimeout)
		if !errors.Is(err, errProcessFailed) || !strings.Contains(err.Error(), label) || !strings.Contains(err.Error(), execchild.LastWords) {
			t.Fatalf("delivery %d: %v; want the crash of %s", i+1, err, label)
		}
		if got := impl.Crashes(); len(got) != i+1 {
			t.Fatalf("after %d deliveries, Crashes: %q; want %d", i+1, got, i+1)
		}
	}
	impl.mu.Lock()
	for i := 1; i < len(impl.crashes); i++ {
		if gap := impl.crashes[i].at.Sub(impl.crashes[i-1].at); gap < restartDelay {
			t.Errorf("crash %d came %s after crash %d; the restart between them must wait %s", i+1, gap, i, restartDelay)
		}
	}
	impl.mu.Unlock()

	began := time.Now()
	_, err := deliver(t, impl, "in-the-loop", testTimeout)
	last := fmt.Sprintf("the last crash: process %d of instance 1 failed at", crashLoopLimit)
	if !errors.Is(err, errProcessFailed) || !strings.Contains(err.Error(), "crash loop") || !strings.Contains(err.Error(), last) || !strings.Contains(err.Error(), execchild.LastWords) {
		t.Errorf("a delivery in the crash loop: %v; want it failed with the last crash", err)
	}
	if took := time.Since(began); took >= restartDelay {
		t.Errorf("a delivery in the crash loop took %s; want it failed at once", took)
	}
	if n := started(impl); n != crashLoopLimit {
		t.Errorf("%d processes were started; the crash loop must start none after the %d that crashed", n, crashLoopLimit)
	}

	endBackoff(impl)
	label := fmt.Sprintf("process %d of instance 1", crashLoopLimit+1)
	if _, err := deliver(t, impl, "after-the-backoff", testTimeout); !errors.Is(err, errProcessFailed) || !strings.Contains(err.Error(), label+": it closed its stdout") {
		t.Errorf("a delivery after the backoff: %v; want the crash of %s", err, label)
	}
	crashes := impl.Crashes()
	if len(crashes) != crashLoopLimit+1 {
		t.Errorf("Crashes: %q; want %d", crashes, crashLoopLimit+1)
	}
	for i, c := range crashes {
		checkCrash(t, c, fmt.Sprintf("process %d of instance 1", i+1), "exit status 3", execchild.LastWords)
	}

	began = time.Now()
	if err := impl.Close(context.Background()); err != nil {
		t.Errorf("close: %v", err)
	}
	if took := time.Since(began); took > time.Second {
		t.Errorf("Close took %s with no process left to shut down", took)
	}
	for _, pid := range crashPIDs(impl) {
		if live := liveInGroup(t, pid); len(live) > 0 {
			t.Errorf("processes %v of the group of crashed process %d are alive after Close", live, pid)
		}
	}
	if got := impl.Crashes(); len(got) != crashLoopLimit+1 {
		t.Errorf("Crashes after Close: %d, want %d", len(got), crashLoopLimit+1)
	}
}

// TestARestartThatFailsHelloDoesNotHang: once the first process crashed,
// every new process of the child exits before it answers hello. Each
// delivery then fails at once with that start's failure, quoting its
// crash report, not at its deadline, until the crash loop's backoff fails
// them without a start; after the backoff, concurrent deliveries that each
// need a process wait for a single start and share its failure, rather
// than start one process each; and Close leaves no process behind.
func TestARestartThatFailsHelloDoesNotHang(t *testing.T) {
	cfg := Config{Env: []string{execchild.EnvMarkDir + "=" + t.TempDir(), execchild.EnvMaxInFlight + "=1"}}
	impl, _ := start(t, execchild.CrashThenFailHello, cfg)
	if _, err := deliver(t, impl, "first", testTimeout); !errors.Is(err, errProcessFailed) || !strings.Contains(err.Error(), execchild.LastWords) {
		t.Fatalf("the first delivery: %v; want the first process's crash", err)
	}
	for i := range crashLoopLimit {
		began := time.Now()
		_, err := deliver(t, impl, fmt.Sprint("restart-", i), testTimeout)
		took := time.Since(began)
		switch {
		case i < crashLoopLimit-1:
			if !errors.Is(err, errHandshake) || !errors.Is(err, errProcessFailed) || !strings.Contains(err.Error(), execchild.NodeConnectRefused) {
				t.Errorf("delivery %d after the crash: %v; want the failed start of a new process, quoting its crash report", i+1, err)
			}
		default:
			if !errors.Is(err, errProcessFailed) || !strings.Contains(err.Error(), "crash loop") || !strings.Contains(err.Error(), execchild.NodeConnectRefused) {
				t.Errorf("delivery %d after the crash: %v; want the crash loop, quoting the last crash report", i+1, err)
			}
		}
		if took > testTimeout/2 {
			t.Errorf("delivery %d after the crash took %s; a start that failed must fail it at once", i+1, took)
		}
	}
	crashes := impl.Crashes()
	if len(crashes) != crashLoopLimit {
		t.Fatalf("Crashes: %q; want the first process's crash and %d failed starts", crashes, crashLoopLimit-1)
	}
	for i, c := range crashes[1:] {
		checkCrash(t, c, fmt.Sprintf("process %d of instance 1", i+2), "exit status 1", "crash report starts: "+execchild.NodeConnectRefused)
	}

	endBackoff(impl)
	const concurrent = 8
	var wg sync.WaitGroup
	errs := make([]error, concurrent)
	for i := range concurrent {
		wg.Go(func() { _, errs[i] = deliver(t, impl, fmt.Sprint("concurrent-", i), testTimeout) })
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, errProcessFailed) || !strings.Contains(err.Error(), execchild.NodeConnectRefused) {
			t.Errorf("concurrent delivery %d: %v; want the failed start, or the crash loop it renewed", i, err)
		}
	}
	if n := len(impl.Crashes()) - len(crashes); n != 1 {
		t.Errorf("%d concurrent deliveries to a child that cannot start started %d processes; want one", concurrent, n)
	}

	if err := impl.Close(context.Background()); err != nil {
		t.Errorf("close: %v", err)
	}
	for _, pid := range crashPIDs(impl) {
		if live := liveInGroup(t, pid); len(live) > 0 {
			t.Errorf("processes %v of the group of crashed process %d are alive after Close", live, pid)
		}
	}
}

// busyWithHangingRestarts returns an instance of a child declaring
// max_in_flight 1 whose first process is busy with a delivery that is
// never answered, and whose later processes never answer hello; and the
// channel on which that delivery's error arrives.
func busyWithHangingRestarts(t *testing.T) (*pool, <-chan error) {
	t.Helper()
	// The probe and the instance's first process run the child; later
	// processes hang before hello.
	dir := t.TempDir()
	child := execchild.CommandMaxInFlight(execchild.HangOnDeliver, 1)
	command := `if [ "$HARMLESS_INSTANCE" != 0 ]; then if [ -e '` + dir + `/first' ]; then exec sleep 300; fi; touch '` + dir + `/first'; fi; ` + child
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	adapter, _, err := Probe(ctx, Config{Command: command})
	if err != nil {
		t.Fatal(err)
	}
	impl := instance(t, adapter, env(t))
	hung := make(chan error, 1)
	go func() { _, err := deliver(t, impl, "hung", testTimeout); hung <- err }()
	eventually(t, "the first delivery reaches the process", func() bool { return len(serving(impl)[0].slots) > 0 })
	return impl, hung
}

// TestAStartPastTheDeadlineIsNotACrash: a process that has not answered
// hello by the deadline of the request that needed it is killed, and the
// request fails as not answered; the process did not crash.
func TestAStartPastTheDeadlineIsNotACrash(t *testing.T) {
	impl, _ := busyWithHangingRestarts(t)
	_, err := deliver(t, impl, "needs-a-process", 500*time.Millisecond)
	if !errors.Is(err, errHandshake) || !errors.Is(err, errNoAnswer) || errors.Is(err, errProcessFailed) {
		t.Errorf("the delivery that needed a new process: %v; want its hello unanswered", err)
	}
	impl.mu.Lock()
	started, launching := impl.started, len(impl.launching)
	impl.mu.Unlock()
	if started != 2 || launching != 0 {
		t.Errorf("%d processes were started and %d are still starting; want the second one started and gone", started, launching)
	}
	if got := impl.Crashes(); len(got) != 0 {
		t.Errorf("Crashes: %q; a process the harness killed at the deadline did not crash", got)
	}
}

// TestStoppingAnInstanceKillsAProcessStillStarting: Close and Abort kill a
// process that has not answered hello yet, and return at once; the
// request that waited for it fails; neither they nor the processes they
// stop are crashes.
func TestStoppingAnInstanceKillsAProcessStillStarting(t *testing.T) {
	for _, how := range []string{"close", "abort"} {
		t.Run(how, func(t *testing.T) {
			impl, hung := busyWithHangingRestarts(t)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			waiting := make(chan error, 1)
			go func() { _, err := deliver(t, impl, "needs-a-process", testTimeout); waiting <- err }()
			var starting *process
			eventually(t, "a second process starts", func() bool {
				impl.mu.Lock()
				defer impl.mu.Unlock()
				for proc := range impl.launching {
					starting = proc
				}
				return starting != nil
			})

			began := time.Now()
			var err error
			switch how {
			case "close":
				err = impl.Close(ctx)
			case "abort":
				err = impl.Abort(ctx)
			}
			if err != nil {
				t.Errorf("%s: %v", how, err)
			}
			// Shutting the starting process down would take the shutdown
			// timeout, since it does not read; killing it takes no time.
			// The other process exits as asked, within a second (the race
			// detector makes a child sleep a second as it exits).
			if took := time.Since(began); took > defaultShutdownTimeout/2 {
				t.Errorf("%s took %s; it must kill a process still starting, not wait for it", how, took)
			}
			if err := <-waiting; err == nil {
				t.Error("the delivery that waited for the starting process succeeded")
			}
			if err := <-hung; err == nil {
				t.Error("the hung delivery succeeded")
			}
			select {
			case <-starting.exited:
			default:
				t.Errorf("the process still starting was not killed: %s returned before it exited", how)
			}
			if live := liveInGroup(t, starting.cmd.Process.Pid); len(live) > 0 {
				t.Errorf("processes %v of the starting process's group are alive", live)
			}
			if got := impl.Crashes(); len(got) != 0 {
				t.Errorf("Crashes: %q; the processes the harness stopped did not crash", got)
			}
		})
	}
}

// TestCloseAndAbortAreNotCrashes: the processes an instance shuts down at
// Close, and those Abort kills with a delivery in flight, are not crashes.
func TestCloseAndAbortAreNotCrashes(t *testing.T) {
	t.Run("close", func(t *testing.T) {
		impl, _ := start(t, execchild.Reference, oneAtATime)
		growTo(t, impl, 6, "close-")
		if err := impl.Close(context.Background()); err != nil {
			t.Fatalf("close: %v", err)
		}
		if got := impl.Crashes(); len(got) != 0 {
			t.Errorf("Crashes after Close: %q; want none", got)
		}
	})
	t.Run("abort", func(t *testing.T) {
		impl, _ := start(t, execchild.HangOnDeliver, Config{})
		failed := make(chan error, 1)
		go func() { _, err := deliver(t, impl, "in-flight", testTimeout); failed <- err }()
		eventually(t, "the delivery reaches the process", func() bool { return len(serving(impl)[0].slots) > 0 })
		if err := impl.Abort(t.Context()); err != nil {
			t.Fatalf("abort: %v", err)
		}
		if err := <-failed; !errors.Is(err, errProcessFailed) || !strings.Contains(err.Error(), "SIGKILL (abort)") {
			t.Errorf("the delivery in flight: %v; want it failed by the abort", err)
		}
		if got := impl.Crashes(); len(got) != 0 {
			t.Errorf("Crashes after Abort: %q; want none", got)
		}
	})
}

// TestAStrayStdoutLineIsACrash: a child that logs to stdout, as Node.js's
// console.log does, breaks the protocol: its process is killed, the crash
// quotes the offending line, and the next delivery goes to a new process.
func TestAStrayStdoutLineIsACrash(t *testing.T) {
	impl, _ := start(t, execchild.LogToStdout, Config{})
	line := strconv.Quote(execchild.StdoutLog + "1")
	_, err := deliver(t, impl, "1", testTimeout)
	if !errors.Is(err, errProcessFailed) || !errors.Is(err, protocol.ErrViolation) || !strings.Contains(err.Error(), line) {
		t.Fatalf("the delivery: %v; want a protocol violation quoting %s", err, line)
	}
	crashes := impl.Crashes()
	if len(crashes) != 1 {
		t.Fatalf("Crashes: %q; want the one crash", crashes)
	}
	checkCrash(t, crashes[0], "process 1 of instance 1", "malformed answer", line)
	t.Logf("Crashes: %q", crashes)
	_, err = deliver(t, impl, "2", testTimeout)
	if !errors.Is(err, protocol.ErrViolation) || !strings.Contains(err.Error(), "process 2 of instance 1") {
		t.Errorf("the next delivery: %v; want the same violation by a new process", err)
	}
}

// TestCrashesMaskTheSecrets: a child that prints setup's connection (its
// password a field of its own), its DSN and password, then crashes, is
// reported without the password. The child logs in as a
// role of the test's own, with that role's password: the server may ask
// for it (a server harmless starts asks every login), and the role may
// create the tables of its setup in the test's schema.
func TestCrashesMaskTheSecrets(t *testing.T) {
	adapter, _ := probe(t, execchild.LeakDSN, Config{})
	e := env(t)
	role := pgtest.NewRole(t)
	grant := fmt.Sprintf("GRANT USAGE, CREATE ON SCHEMA %s TO %s", pgx.Identifier{e.Schema}.Sanitize(), pgx.Identifier{role.Name}.Sanitize())
	if _, err := pgtest.Pool(t).Exec(t.Context(), grant); err != nil {
		t.Fatalf("%s: %v", grant, err)
	}
	password := role.Password
	e.DSN = role.As(t, e.DSN)
	impl := instance(t, adapter, e)
	_, err := deliver(t, impl, "1", testTimeout)
	if !errors.Is(err, errProcessFailed) {
		t.Fatalf("the delivery: %v; want the crash", err)
	}
	// The delivery's failure quotes the last lines of stderr.
	for _, want := range []string{`execchild: setup's connection: {"hosts":`, `"password":"` + redact.Mask + `"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the delivery's failure does not quote %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), password[:6]) || strings.Contains(err.Error(), password[len(password)-6:]) {
		t.Errorf("the delivery's failure shows the password: %v", err)
	}
	crashes := impl.Crashes()
	if len(crashes) != 1 {
		t.Fatalf("Crashes: %q; want the one crash", crashes)
	}
	checkCrash(t, crashes[0], "process 1 of instance 1", "exit status 3", "panic: cannot deliver", redact.Mask)
	if strings.Contains(crashes[0], password[:6]) || strings.Contains(crashes[0], password[len(password)-6:]) {
		t.Errorf("the crash shows the password: %s", crashes[0])
	}
}

// TestAChildThatStopsReadingMidLineIsACrash: a child that stops reading
// a delivery's line in the middle until the deadline is wedged: the
// harness kills the process, which could not be sent the rest of the line
// without corrupting the stream anyway, and counts a crash. The pool
// replaces the process.
func TestAChildThatStopsReadingMidLineIsACrash(t *testing.T) {
	impl, _ := start(t, execchild.StopReading, Config{})
	first := serving(impl)[0]
	// Long enough for the child to read the start of the line on a loaded
	// machine (under the race detector, beside other tests): a child that
	// has read none of it by the deadline is killed too, but this test is
	// about the middle of a line.
	const deadline = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	ev := adapters.Event{Namespace: "exec-test", ID: "big", Payload: make([]byte, 1<<20)} // more than a pipe holds
	_, err := impl.Deliver(ctx, adapters.Delivery{Event: ev, Attempt: 1})
	if !errors.Is(err, errNoAnswer) || !strings.Contains(err.Error(), "in the middle of deliver request 3") || !strings.Contains(err.Error(), wedgeKill) {
		t.Fatalf("the delivery the child stopped reading: %v; want the process killed for it", err)
	}
	crashes := impl.Crashes()
	if len(crashes) != 1 {
		t.Fatalf("Crashes: %q; want the wedged process's", crashes)
	}
	checkCrash(t, crashes[0], "process 1 of instance 1", "it stopped reading its stdin in the middle of deliver request 3", "s: killed with its process group and replaced")
	if _, err := deliver(t, impl, "small", 500*time.Millisecond); !errors.Is(err, errNoAnswer) || !strings.Contains(err.Error(), "process 2 of instance 1") {
		t.Errorf("the next delivery: %v; want it unanswered by a new process", err)
	}
	if err := first.awaitExit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if live := liveInGroup(t, first.cmd.Process.Pid); len(live) > 0 {
		t.Errorf("processes %v of the killed process's group are alive", live)
	}
}

// TestProcessesThatCrashTogetherAreNotACrashLoop: when the server
// terminates the connections of every process at once, as a server crash
// does, and each of a child's processes exits, that is one round of
// crashes, not a crash loop: every redelivery is served by new processes.
func TestProcessesThatCrashTogetherAreNotACrashLoop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	adapter, _ := probe(t, execchild.ExitOnLostConnection, oneAtATime)
	e := env(t)
	const app = "exec-test-crash-together"
	e.DSN = pgtest.NamedDSN(t, app)
	impl := instance(t, adapter, e)

	tx, err := pgtest.Pool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{e.Schema, "processed_events"}.Sanitize()+" IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	const n = crashLoopLimit + 3
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { _, errs[i] = deliver(t, impl, fmt.Sprint("together-", i), testTimeout) })
	}
	eventually(t, fmt.Sprintf("%d deliveries wait for the lock", n), func() bool {
		var waiting int
		err := pgtest.Pool(t).QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		return waiting == n
	})
	if _, err := pgtest.Pool(t).Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, app); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, errProcessFailed) || !strings.Contains(err.Error(), execchild.NodeLostConnection) {
			t.Errorf("delivery %d: %v; want its process's crash", i, err)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := impl.Crashes(); len(got) != n {
		t.Errorf("Crashes: %d; want one for each of the %d processes", len(got), n)
	}
	impl.mu.Lock()
	streak := impl.streak
	impl.mu.Unlock()
	if streak != 1 {
		t.Errorf("the crashes count as %d rounds; want 1", streak)
	}

	for i := range n {
		wg.Go(func() {
			if got, err := deliver(t, impl, fmt.Sprint("together-", i), testTimeout); err != nil || got != adapters.Applied {
				t.Errorf("the redelivery of event %d: %v, %v; want Applied by a new process", i, got, err)
			}
		})
	}
	wg.Wait()
	impl.mu.Lock()
	streak = impl.streak
	impl.mu.Unlock()
	if streak != 0 {
		t.Errorf("after answered requests, the crashes count as %d rounds; want none", streak)
	}
}

// TestAWedgedChildIsKilledAndReplaced: a child that wedges at its fifth
// delivery (it never answers it, nor anything after, and keeps running)
// costs one deadline, not one per later request. The wedged delivery ends
// unanswered at its deadline; a delivery in flight on the same process
// with a later deadline fails with it, unacknowledged, as for a crash; the
// process is killed with its process group and counts as a crash; and the
// deliveries after it are answered by a new process.
func TestAWedgedChildIsKilledAndReplaced(t *testing.T) {
	const wedgeAt, deadline = 5, 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	impl, _ := start(t, execchild.WedgeAtNth, Config{Env: []string{execchild.EnvCrashAt + "=" + strconv.Itoa(wedgeAt)}})
	for i := 1; i < wedgeAt; i++ {
		if got, err := deliver(t, impl, fmt.Sprint("before-", i), testTimeout); err != nil || got != adapters.Applied {
			t.Fatalf("delivery %d, before the wedge: %v, %v", i, got, err)
		}
	}
	first := serving(impl)[0]

	began := time.Now()
	wedged := make(chan error, 1)
	go func() { _, err := deliver(t, impl, "wedges", deadline); wedged <- err }()
	eventually(t, "the child wedges", func() bool { return strings.Contains(first.stderr.Summary(), "wedged at delivery") })
	// In flight on the wedged process, with a deadline far later.
	alongside := make(chan error, 1)
	go func() { _, err := deliver(t, impl, "alongside", testTimeout); alongside <- err }()

	err := <-wedged
	took := time.Since(began)
	if !errors.Is(err, errNoAnswer) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), wedgeKill) {
		t.Errorf("the wedged delivery: %v; want it unanswered at its deadline, and its process killed", err)
	}
	if took < deadline || took > deadline+time.Second {
		t.Errorf("the wedged delivery ended after %s; want its deadline, %s", took, deadline)
	}
	if err := <-alongside; !errors.Is(err, errProcessFailed) || !strings.Contains(err.Error(), "no answer to deliver request 7 within 2s") {
		t.Errorf("the delivery in flight alongside: %v; want it failed with the wedged process", err)
	}
	if took := time.Since(began); took > deadline+2*time.Second {
		t.Errorf("the delivery in flight alongside ended after %s; want it ended with the wedged process, at %s", took, deadline)
	}
	if err := first.awaitExit(ctx); err != nil {
		t.Fatalf("the wedged process: %v", err)
	}
	if live := liveInGroup(t, first.cmd.Process.Pid); len(live) > 0 {
		t.Errorf("processes %v of the wedged process's group are alive", live)
	}
	crashes := impl.Crashes()
	if len(crashes) != 1 {
		t.Fatalf("Crashes: %q; want the wedged process's", crashes)
	}
	checkCrash(t, crashes[0], "process 1 of instance 1", "no answer to deliver request 7 within 2s: killed with its process group and replaced", "wedged at delivery 5")

	for i := 1; i < wedgeAt; i++ {
		if got, err := deliver(t, impl, fmt.Sprint("after-", i), testTimeout); err != nil || got != adapters.Applied {
			t.Errorf("delivery %d after the wedge: %v, %v; want Applied by a new process", i, got, err)
		}
	}
	if procs := serving(impl); len(procs) != 1 || procs[0].label != "process 2 of instance 1" {
		t.Errorf("the pool serves with %d processes; want process 2 of instance 1 alone", len(procs))
	}
}

// TestAChildThatClosesItsStdoutUnderTheShellIsReplaced: a child run by a
// command without exec in front, which /bin/sh (dash) runs as a child of
// its own, that closes its stdout and keeps running is found out at once,
// not at the deadline of the request it leaves unanswered: the shell
// holds no copy of the pipe. The request fails unacknowledged, the
// process is killed and counts as a crash, and a new one serves the next
// request.
func TestAChildThatClosesItsStdoutUnderTheShellIsReplaced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	adapter, _, err := Probe(ctx, Config{Command: execchild.CommandUnderShell(execchild.CloseStdoutAtNth), Env: []string{execchild.EnvCrashAt + "=2"}})
	if err != nil {
		t.Fatal(err)
	}
	impl := instance(t, adapter, env(t))
	if got, err := deliver(t, impl, "before", testTimeout); err != nil || got != adapters.Applied {
		t.Fatalf("a delivery before the child closes its stdout: %v, %v", got, err)
	}
	first := serving(impl)[0]
	began := time.Now()
	_, err = deliver(t, impl, "closes", testTimeout)
	took := time.Since(began)
	if !errors.Is(err, errProcessFailed) || !strings.Contains(err.Error(), "closed its stdout but is still running") {
		t.Errorf("the delivery the child closed its stdout at: %v; want the process failed for it", err)
	}
	if took > 2*time.Second {
		t.Errorf("the delivery ended after %s; want at once, well before its deadline (%s)", took, testTimeout)
	}
	crashes := impl.Crashes()
	if len(crashes) != 1 {
		t.Fatalf("Crashes: %q; want the process that closed its stdout", crashes)
	}
	checkCrash(t, crashes[0], "process 1 of instance 1", "closed its stdout but is still running", "closing stdout at delivery 2")
	if err := first.awaitExit(ctx); err != nil {
		t.Fatalf("the failed process: %v", err)
	}
	if live := liveInGroup(t, first.cmd.Process.Pid); len(live) > 0 {
		t.Errorf("processes %v of the failed process's group are alive", live)
	}
	if got, err := deliver(t, impl, "after", testTimeout); err != nil || got != adapters.Applied {
		t.Errorf("the next delivery: %v, %v; want Applied by a new process", got, err)
	}
	if procs := serving(impl); len(procs) != 1 || procs[0].label != "process 2 of instance 1" {
		t.Errorf("the pool serves with %d processes; want process 2 of instance 1 alone", len(procs))
	}
}

// TestARequestSentLateDoesNotMakeItsProcessWedged: a delivery that the
// pool could send only with less than half of its caller's time left
// (it spent the rest starting a process or waiting for a slot) and that
// goes unanswered does not kill its process: the child had too little
// time to be judged wedged.
func TestARequestSentLateDoesNotMakeItsProcessWedged(t *testing.T) {
	impl, _ := start(t, execchild.HangOnDeliver, Config{})
	ctx := context.WithValue(context.Background(), begunKey{}, time.Now().Add(-5*time.Second))
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	ev := adapters.Event{Namespace: "exec-test", ID: "late"}
	_, err := impl.Deliver(ctx, adapters.Delivery{Event: ev, Attempt: 1})
	if !errors.Is(err, errNoAnswer) || strings.Contains(err.Error(), wedgeKill) {
		t.Errorf("the delivery sent late: %v; want it unanswered, its process left alone", err)
	}
	if got := impl.Crashes(); len(got) != 0 {
		t.Errorf("Crashes: %q; want none", got)
	}
	procs := serving(impl)
	if len(procs) != 1 {
		t.Fatalf("the pool serves with %d processes; want the first alone", len(procs))
	}
	select {
	case <-procs[0].failed:
		t.Errorf("%s failed: %v", procs[0].label, procs[0].err)
	default:
	}
}
