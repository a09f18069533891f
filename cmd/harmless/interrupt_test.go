package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/internal/execchild"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// interruptLimit bounds a certify run that was sent a signal: it must
// clean up and exit well within it.
const interruptLimit = 2 * time.Minute

var (
	runIDLine = regexp.MustCompile(`, run ([0-9a-f]{8}), seed `)
	// rulePassed matches the progress line of a rule that passed, e.g.
	// "[   1.9s] PASSED  ambiguous-commit / ...".
	rulePassed  = regexp.MustCompile(`^\[\s*[0-9.]+s\] PASSED `)
	clusterLine = regexp.MustCompile(`starting throwaway cluster in (\S+)`)
)

// interrupted is what a certify run that was sent a signal left.
type interrupted struct {
	code           int
	stdout, stderr string
	cert           certificate.Certificate
	took           time.Duration // from the first signal to the exit
}

// interruptCertify runs certify with -v and args, sends sig once the
// third rule has passed, and returns what the run left.
//
// The third rule is the first of bad-input, a play of two rules: the
// signal lands while the play runs or between the judging of its rules,
// and the run must clean up all the same. The two rules before it have
// surely passed by then.
func interruptCertify(t *testing.T, bin string, sig syscall.Signal, args ...string) interrupted {
	t.Helper()
	passed := 0
	return interruptAt(t, bin, func(line string, _ int) bool {
		if rulePassed.MatchString(line) {
			passed++
		}
		return passed == 3
	}, 0, []syscall.Signal{sig}, args...)
}

// interruptAt runs certify with -v and args, and sends sigs[0] once at
// reports true for a progress line (given with its number, from 1) and
// delay has passed after it, and sigs[1], if given, once the run says it
// stops; it returns what the run left, with how long it took to exit
// after the first signal.
func interruptAt(t *testing.T, bin string, at func(line string, n int) bool, delay time.Duration, sigs []syscall.Signal, args ...string) interrupted {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.json")
	r := interruptCommand(t, bin, append([]string{"certify", "-v", "--adapter", "reference", "--json", path}, args...), at, delay, sigs)
	if len(sigs) == 1 {
		r.cert = readCertificate(t, path)
	}
	return r
}

// interruptCommand is interruptAt for any command line of harmless.
func interruptCommand(t *testing.T, bin string, args []string, at func(line string, n int) bool, delay time.Duration, sigs []syscall.Signal) interrupted {
	t.Helper()
	r, reached := tryInterrupt(t, bin, args, at, delay, sigs)
	if !reached {
		t.Fatalf("the run ended before the point to interrupt it at\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	return r
}

// tryInterrupt is interruptCommand for a point that the run may not
// reach: a moment drawn from a run's time, which another run on a machine
// less loaded passes by. It reports whether the run was signalled; one
// that ended first is returned as it ended, judged by nothing.
func tryInterrupt(t *testing.T, bin string, args []string, at func(line string, n int) bool, delay time.Duration, sigs []syscall.Signal) (interrupted, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), interruptLimit+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderrPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Read stderr line by line, and signal from a timer once the point is
	// reached, so that reading goes on meanwhile.
	var stderr strings.Builder
	lines := bufio.NewScanner(stderrPipe)
	lines.Buffer(make([]byte, 64<<10), 16<<20)
	var signalledAt atomic.Pointer[time.Time]
	var timer *time.Timer
	for n := 1; lines.Scan(); n++ {
		line := lines.Text()
		stderr.WriteString(line + "\n")
		switch {
		case timer == nil && at(line, n):
			timer = time.AfterFunc(delay, func() {
				now := time.Now()
				signalledAt.Store(&now)
				if err := cmd.Process.Signal(sigs[0]); err != nil {
					t.Errorf("signal %v: %v", sigs[0], err)
				}
			})
		case len(sigs) > 1 && strings.Contains(line, "again to abandon"):
			// A second signal sent before the first is handled would be
			// merged with it: it is sent once the run says it stops, as
			// a user would.
			if err := cmd.Process.Signal(sigs[1]); err != nil {
				t.Errorf("signal %v: %v", sigs[1], err)
			}
		}
	}
	err = cmd.Wait()
	ended := time.Now()
	if timer != nil {
		timer.Stop()
	}
	r := interrupted{stdout: stdout.String(), stderr: stderr.String()}
	first := signalledAt.Load()
	if first == nil {
		return r, false
	}
	r.took = ended.Sub(*first)
	t.Logf("the run ended %s after the signal", r.took.Round(time.Millisecond))
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run: %v", err)
	}
	return r, true
}

// check judges an interrupted run: the exit code of the signal, the
// INTERRUPTED verdict line, the certificate's status, and no rule failed
// because of the interruption.
func (r interrupted) check(t *testing.T, want int) {
	t.Helper()
	if r.code != want {
		t.Errorf("exit code %d; want %d", r.code, want)
	}
	if !strings.Contains(r.stdout, "\nINTERRUPTED: reference\n") || strings.Contains(r.stdout, "NOT CERTIFIED") {
		t.Errorf("stdout does not end with the INTERRUPTED verdict:\n%s", r.stdout)
	}
	if r.cert.Status != certificate.StatusInterrupted || r.cert.Certified || r.cert.Interrupted == "" {
		t.Errorf("certificate: status %s, certified %t, interrupted %q; want interrupted", r.cert.Status, r.cert.Certified, r.cert.Interrupted)
	}
	passed := 0
	for _, rule := range r.cert.Rules {
		switch rule.Verdict {
		case certificate.VerdictFail:
			t.Errorf("rule %s failed in an interrupted run: %s", rule.ID, rule.Message)
		case certificate.VerdictPass:
			passed++
		}
	}
	if passed < 2 || passed == len(r.cert.Rules) {
		t.Errorf("%d of %d rules passed; want the two rules before the signal passed and the run stopped in the middle", passed, len(r.cert.Rules))
	}
}

// TestInterruptCleansUpAndSaysSo sends SIGINT to a certify run on a DSN
// and SIGTERM to one on a throwaway cluster, each in the middle of its
// fixtures: each must clean up (no schema of the run left on the DSN; no
// cluster directory or server process left), exit 130 or 143, print
// INTERRUPTED and write a certificate whose status says so, with no rule
// failed because of it.
func TestInterruptCleansUpAndSaysSo(t *testing.T) {
	bin := binary(t)
	t.Run("SIGINT on a DSN", func(t *testing.T) {
		dsn := pgtest.DSN(t)
		r := interruptCertify(t, bin, syscall.SIGINT, "--dsn", dsn)
		r.check(t, 130)
		noSchemaLeft(t, r.stderr)
	})
	t.Run("SIGTERM on a throwaway cluster", func(t *testing.T) {
		requireServerBinaries(t)
		r := interruptCertify(t, bin, syscall.SIGTERM, "--provision", "cluster")
		r.check(t, 143)
		m := clusterLine.FindStringSubmatch(r.stderr)
		if m == nil {
			t.Fatalf("the cluster's directory is not in the run's log:\n%s", r.stderr)
		}
		if _, err := os.Stat(m[1]); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the interrupted run left its cluster directory %s (%v)", m[1], err)
		}
		if procs := processesMentioning(t, m[1]); len(procs) > 0 {
			t.Errorf("the interrupted run left processes of its cluster: %v", procs)
		}
	})
}

// processesMentioning lists the processes whose command line mentions s.
func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range dirs {
		cmdline, err := os.ReadFile(d)
		if err != nil {
			continue // gone meanwhile
		}
		if bytes.Contains(cmdline, []byte(s)) {
			out = append(out, strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}

// requireServerBinaries skips the test where no throwaway cluster can be
// started.
func requireServerBinaries(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("initdb"); err != nil {
		if matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(matches) == 0 {
			t.Skip("no PostgreSQL server binaries for a throwaway cluster")
		}
	}
}

// interruptPoints is how many points of a run
// TestAnInterruptAtAnyPointEndsTheRun stops it at, drawn from the time a
// whole run takes, beside the points chosen for the phases where runs hung
// or could.
const interruptPoints = 10

// TestAnInterruptAtAnyPointEndsTheRun stops certify at moments drawn at
// random from the time a whole run takes, after its first -v line (the
// seed is logged, and HARMLESS_INTERRUPT_SEED draws the same points again), on a
// throwaway cluster, on a DSN, and with a program over the exec protocol;
// and at chosen points: during crash-recovery's play that holds the
// implementation's writes with a lock of the harness's (where runs hung),
// during the exec program's handshake, and, where pg_auto_failover is
// installed, while a replicated formation starts and during each kind of
// failover. At each, the run must exit with the signal's code within
// interruptLimit, and leave no directory or process of its server, no
// schema on a DSN.
func TestAnInterruptAtAnyPointEndsTheRun(t *testing.T) {
	requireServerBinaries(t)
	t.Parallel() // beside the other long tests of the package
	bin := binary(t)
	began := time.Now()
	code, _, whole := runCertify(t, bin, nil, "-v", "--adapter", "reference", "--provision", "cluster")
	if code != exitCertified {
		t.Fatalf("the whole run ended %d; want %d:\n%s", code, exitCertified, whole)
	}
	took := time.Since(began)
	progress := strings.Count(whole, "\n")
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HARMLESS_INTERRUPT_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("HARMLESS_INTERRUPT_SEED: %v", err)
		}
	}
	t.Logf("a whole run took %s and printed %d progress lines; the points are drawn with HARMLESS_INTERRUPT_SEED=%d", took.Round(time.Millisecond), progress, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	// Where a run goes, and what must be gone after it.
	type way struct {
		name string
		args func(t *testing.T) []string
		left func(t *testing.T, stderr string)
	}
	cluster := way{"a throwaway cluster", func(*testing.T) []string { return []string{"--adapter", "reference", "--provision", "cluster"} }, noClusterLeft}
	dsn := way{"a DSN", func(t *testing.T) []string { return []string{"--adapter", "reference", "--dsn", pgtest.DSN(t)} }, noSchemaLeft}
	execDSN := way{"a DSN, over the exec protocol", func(t *testing.T) []string {
		return []string{"--exec", execchild.Command(execchild.Reference), "--dsn", pgtest.DSN(t)}
	}, noSchemaLeft}
	formation := way{"a replicated formation", func(t *testing.T) []string {
		return []string{"--adapter", "reference", "--provision", "ha", "--fixture", "failover"}
	}, noFormationLeft}

	type point struct {
		name  string
		way   way
		at    func(line string, n int) bool
		delay time.Duration
	}
	lineIs := func(prefix string) func(string, int) bool {
		return func(line string, _ int) bool { return strings.Contains(line, "] "+prefix) }
	}
	points := []point{
		// Its plays start together, and hold the deliveries in flight, by
		// a sleep and by the writes held, from their warm-up until the
		// crash, which waits for the slowest: a second in all.
		{"while crash-recovery holds the implementation's writes", cluster, lineIs("3 plays that crash the server start"), 500 * time.Millisecond},
		{"during the exec program's handshake", execDSN, func(_ string, n int) bool { return n == 1 }, 0},
	}
	if formationsStart(t) {
		points = append(points,
			point{"while the formation starts", formation, lineIs("HA formation: monitor running"), 0},
			point{"during a controlled failover", formation, lineIs("HA formation healthy"), time.Second},
			point{"during a hard-kill failover", formation, lineIs("stalled replication"), time.Second},
		)
	}
	// The points are moments after the run's first progress line, drawn
	// from the first two thirds of the whole run's time: plays run side by
	// side and their verdicts come in bursts, so a line's number says
	// little of when it comes, and runs side by side on a loaded machine
	// take more or less time than the whole run did alone. A run on a DSN
	// is shorter (no crash of a server it does not own).
	ways := []way{cluster, cluster, dsn, cluster, execDSN}
	for i := range interruptPoints {
		w := ways[i%len(ways)]
		span := took * 2 / 3
		if w.name != cluster.name {
			span = took / 3
		}
		delay := time.Duration(rng.Int64N(int64(max(span, time.Millisecond))))
		points = append(points, point{
			name:  fmt.Sprintf("%s after the first progress line", delay.Round(time.Millisecond)),
			way:   w,
			at:    func(_ string, n int) bool { return n == 1 },
			delay: delay,
		})
	}
	var mu sync.Mutex
	var slowest time.Duration
	t.Cleanup(func() {
		t.Logf("%d points, the slowest exit %s after its signal", len(points), slowest.Round(time.Millisecond))
	})
	for i, p := range points {
		sig := []syscall.Signal{syscall.SIGINT, syscall.SIGTERM}[i%2]
		t.Run(p.name+" on "+p.way.name, func(t *testing.T) {
			// Side by side, as many as go test runs at once: a run
			// mostly waits for its server.
			t.Parallel()
			args := append([]string{"certify", "-v"}, p.way.args(t)...)
			// A run faster than the whole one (which may have run on a
			// busier machine) can end before a point drawn from its time:
			// it is run again, to be interrupted at half the delay.
			var r interrupted
			for delay, tries := p.delay, 1; ; delay, tries = delay/2, tries+1 {
				var reached bool
				if r, reached = tryInterrupt(t, bin, args, p.at, delay, []syscall.Signal{sig}); reached {
					break
				}
				if tries == 3 {
					t.Fatalf("%d runs ended before the point to interrupt them at, the last %s after it\nstderr:\n%s", tries, delay.Round(time.Millisecond), r.stderr)
				}
				t.Logf("the run ended before the point %s after its progress line: again, at %s", delay.Round(time.Millisecond), (delay / 2).Round(time.Millisecond))
			}
			mu.Lock()
			slowest = max(slowest, r.took)
			mu.Unlock()
			if want := exitInterrupted(sig); r.code != want {
				t.Errorf("exit code %d; want %d\nstderr:\n%s", r.code, want, r.stderr)
			}
			if r.took > interruptLimit {
				t.Errorf("the run took %s to end after %v; want at most %s", r.took, sig, interruptLimit)
			}
			p.way.left(t, r.stderr)
		})
	}
}

// formationsStart reports whether a replicated formation can start here;
// where it cannot it says why in the log, and fails the test if
// HARMLESS_REQUIRE_HA=1 (as .ci/run sets).
func formationsStart(t *testing.T) bool {
	t.Helper()
	choice, err := provision.Options{Only: provision.KindHA}.Choose(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if choice.Note == "" {
		return true
	}
	if os.Getenv("HARMLESS_REQUIRE_HA") == "1" {
		t.Fatalf("HARMLESS_REQUIRE_HA=1, but no formation can start here: %s", choice.Note)
	}
	t.Logf("no interrupt on a replicated formation: %s", choice.Note)
	return false
}

var formationLine = regexp.MustCompile(`starting HA formation in (\S+)`)

// noFormationLeft fails the test if the run whose log is stderr left its
// formation's directory or a process of it.
func noFormationLeft(t *testing.T, stderr string) {
	t.Helper()
	noServerLeft(t, stderr, formationLine, "formation")
}

// noClusterLeft fails the test if the run whose log is stderr left its
// throwaway cluster's directory or a process of it.
func noClusterLeft(t *testing.T, stderr string) {
	t.Helper()
	noServerLeft(t, stderr, clusterLine, "cluster")
}

// noServerLeft fails the test if the run whose log is stderr left the
// directory of the server that started matches names, or a process of it.
func noServerLeft(t *testing.T, stderr string, started *regexp.Regexp, what string) {
	t.Helper()
	m := started.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("the %s's directory is not in the run's log:\n%s", what, stderr)
	}
	if _, err := os.Stat(m[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the run left its %s's directory %s (%v)", what, m[1], err)
	}
	if procs := processesMentioning(t, m[1]); len(procs) > 0 {
		t.Errorf("the run left processes of its %s: %v", what, procs)
	}
}

// noSchemaLeft fails the test if the run on pgtest's server whose log is
// stderr left a schema there.
func noSchemaLeft(t *testing.T, stderr string) {
	t.Helper()
	m := runIDLine.FindStringSubmatch(stderr)
	if m == nil {
		// The run's first line names it before its first play creates a
		// schema: one stopped before that line created none.
		if !strings.Contains(stderr, "INTERRUPTED") && !strings.Contains(stderr, "before the run began") && !strings.Contains(stderr, "stopping the run") {
			t.Fatalf("the run's id is not in its log, and it was not stopped before it began:\n%s", stderr)
		}
		return
	}
	rows, err := pgtest.Pool(t).Query(t.Context(), `SELECT nspname FROM pg_namespace WHERE nspname LIKE $1`, "harmless\\_"+m[1]+"\\_%")
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("the interrupted run left its schemas: %v", left)
	}
}

// abandonLimit bounds the exit of a run sent a second signal, which must
// not wait for any cleanup.
const abandonLimit = 20 * time.Second

// A second signal abandons the run at once: the exit code is the
// signal's, every process the run started is killed, and what it left
// (the cluster's directory) the next run removes when it starts.
func TestASecondSignalAbandonsTheRunAtOnce(t *testing.T) {
	requireServerBinaries(t)
	bin := binary(t)
	r := interruptAt(t, bin, func(line string, _ int) bool { return strings.Contains(line, "concurrent-delivery (") },
		0, []syscall.Signal{syscall.SIGINT, syscall.SIGINT}, "--provision", "cluster")
	if r.code != 130 {
		t.Errorf("exit code %d; want 130\nstderr:\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "SIGINT again: abandoning the run now") {
		t.Errorf("the run does not say it abandons the run:\n%s", r.stderr)
	}
	if r.took > abandonLimit {
		t.Errorf("the run took %s to end after the second signal; want at most %s", r.took, abandonLimit)
	}
	m := clusterLine.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("the cluster's directory is not in the run's log:\n%s", r.stderr)
	}
	if procs := processesMentioning(t, m[1]); len(procs) > 0 {
		t.Errorf("the abandoned run left processes of its cluster: %v", procs)
	}
	// One fixture: the rest of the MUST rules do not run (exit 3).
	code, _, stderr := runCertify(t, bin, nil, "-v", "--adapter", "reference", "--provision", "cluster", "--fixture", "double-delivery")
	if code != exitPartial {
		t.Fatalf("the next run ended %d; want %d:\n%s", code, exitPartial, stderr)
	}
	if _, err := os.Stat(m[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the next run did not remove the directory %s the abandoned one left (%v):\n%s", m[1], err, stderr)
	}
}

// An implementation's process may start one that leaves its process
// group and session and ignores SIGTERM, then exit or be killed: that one
// must not outlive the run either. The child below starts such a process
// (setsid, SIGTERM ignored) in every instance, and notes its pid.
func TestNoProcessOutlivesTheRun(t *testing.T) {
	bin := binary(t)
	pids := filepath.Join(t.TempDir(), "escaped")
	child := fmt.Sprintf(`setsid sh -c 'trap "" TERM; echo $$ >> %s; exec sleep 300' </dev/null >/dev/null 2>&1 & %s`, pids, execchild.Command(execchild.Reference))
	code, stdout, stderr := runCertify(t, bin, nil, "--exec", child, "--dsn", pgtest.DSN(t), "--fixture", "double-delivery")
	if code != exitPartial { // one fixture: the other MUST rules did not run
		t.Fatalf("exit code %d; want %d\nstdout:\n%s\nstderr:\n%s", code, exitPartial, stdout, stderr)
	}
	b, err := os.ReadFile(pids)
	if err != nil {
		t.Fatalf("the child never started its escaping process: %v", err)
	}
	escaped := strings.Fields(string(b))
	if len(escaped) == 0 {
		t.Fatal("the child never started its escaping process")
	}
	for _, s := range escaped {
		pid, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		if running(pid) {
			t.Errorf("process %d, started in a session of its own by the implementation, outlived the run", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if !strings.Contains(stderr, "processes the run's programs had left running") {
		t.Errorf("the run does not say it killed what was left:\n%s", stderr)
	}
}

// running reports whether pid is a process that has not exited.
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// TestAnInterruptEndsTheSoak stops a soak of the reference on a throwaway
// cluster, crashed now and then, at each of its first lines: while its
// server starts, once it is ready, once the load runs, while the server
// is down after a crash, once it restarted. The soak ends its load and
// checks what ran: it must exit with the signal's code within
// interruptLimit and leave neither the cluster's directory nor a process
// of it.
func TestAnInterruptEndsTheSoak(t *testing.T) {
	requireServerBinaries(t)
	bin := binary(t)
	points := []struct {
		name string
		at   func(line string, n int) bool
	}{
		{"while its server starts", func(line string, _ int) bool { return strings.HasPrefix(line, "starting throwaway cluster") }},
		{"once its server is ready", func(line string, _ int) bool { return strings.HasPrefix(line, "cluster ready") }},
		{"once the load runs", func(line string, _ int) bool { return strings.HasPrefix(line, "harmless soak: reference") }},
		{"while the server is down after a crash", func(line string, _ int) bool { return strings.HasPrefix(line, "crashed throwaway cluster") }},
		{"once the server restarted", func(line string, _ int) bool { return strings.HasPrefix(line, "restarted throwaway cluster") }},
	}
	for i, p := range points {
		sig := []syscall.Signal{syscall.SIGINT, syscall.SIGTERM}[i%2]
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			r := interruptCommand(t, bin, []string{"soak", "--adapter", "reference", "--provision", "cluster", "--duration", "1h", "--nemesis", "crash"}, p.at, 0, []syscall.Signal{sig})
			if want := exitInterrupted(sig); r.code != want {
				t.Errorf("exit code %d; want %d\nstdout:\n%s\nstderr:\n%s", r.code, want, r.stdout, r.stderr)
			}
			if r.took > interruptLimit {
				t.Errorf("the soak took %s to end after %v; want at most %s", r.took, sig, interruptLimit)
			}
			noClusterLeft(t, r.stderr)
		})
	}
}
