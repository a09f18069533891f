package provision

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// childEnv makes the test binary act as a child process for the tests that
// need a fresh process (testcontainers-go caches the engine it found) or
// one that can be killed.
const childEnv = "HARMLESS_PROVISION_TEST_CHILD"

// env returns a LookupEnv that sees only vars (and PATH from the process, so
// that server binaries on it are found), set, and no other variable.
func env(vars ...string) func(string) (string, bool) {
	m := map[string]string{"PATH": os.Getenv("PATH")}
	for i := 0; i+1 < len(vars); i += 2 {
		m[vars[i]] = vars[i+1]
	}
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// getenvOf is lookup as a Getenv, for FindDocker.
func getenvOf(lookup func(string) (string, bool)) func(string) string {
	return func(k string) string {
		v, _ := lookup(k)
		return v
	}
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func closeServer(t *testing.T, srv *Server) {
	t.Cleanup(func() {
		if err := srv.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

func connect(t *testing.T, ctx context.Context, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func startCluster(t *testing.T, ctx context.Context) *Server {
	t.Helper()
	srv, err := Open(ctx, Options{Only: KindCluster, LookupEnv: env(), Logf: t.Logf})
	if err != nil {
		t.Fatalf("Open cluster: %v", err)
	}
	closeServer(t, srv)
	return srv
}

func TestDSN(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	// The server CI names, else a throwaway cluster's.
	dsn := firstNonEmpty(os.Getenv("HARMLESS_DSN"), os.Getenv("DATABASE_URL"))
	if dsn == "" {
		dsn = startCluster(t, ctx).DSN()
	}
	for _, tc := range []struct {
		name   string
		opts   Options
		source string
	}{
		{"option", Options{DSN: dsn, LookupEnv: env()}, "--dsn"},
		{"HARMLESS_DSN", Options{LookupEnv: env("HARMLESS_DSN", dsn, "DATABASE_URL", "postgres://nowhere.invalid/x")}, "HARMLESS_DSN"},
		{"DATABASE_URL", Options{LookupEnv: env("DATABASE_URL", dsn)}, "DATABASE_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lines []string
			tc.opts.Logf = func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }
			srv, err := Open(ctx, tc.opts)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if srv.Kind != KindDSN || srv.DSN() != dsn || srv.Owned() {
				t.Errorf("got kind %s, DSN %q, owned %v; want dsn, %q, false", srv.Kind, srv.DSN(), srv.Owned(), dsn)
			}
			if srv.Version == "" {
				t.Error("no server_version")
			}
			if !strings.Contains(strings.Join(lines, "\n"), tc.source) {
				t.Errorf("progress lines %q do not name the source %s", lines, tc.source)
			}
			if err := srv.Crash(ctx); err == nil {
				t.Error("Crash of a DSN server: no error")
			}
			if err := srv.Restart(ctx); err == nil {
				t.Error("Restart of a DSN server: no error")
			}
			if err := srv.Close(ctx); err != nil {
				t.Errorf("Close of a DSN server: %v", err)
			}
			t.Logf("%s", srv)
		})
	}
}

func TestBadDSNIsAnErrorNotAFallback(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	port, err := freePort() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dsn, want string
	}{
		{"unparseable", "postgres://postgres:s3cret@127.0.0.1:notaport/x", "not a valid connection string"},
		{"unreachable", fmt.Sprintf("postgres://postgres:s3cret@127.0.0.1:%d/x?sslmode=disable", port), "cannot use the server named by HARMLESS_DSN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			began := time.Now()
			srv, err := Open(ctx, Options{LookupEnv: env("HARMLESS_DSN", tc.dsn)})
			if err == nil {
				srv.Close(ctx)
				t.Fatalf("Open(%q) = %s, want an error", tc.dsn, srv)
			}
			t.Logf("error after %s: %v", time.Since(began).Round(time.Millisecond), err)
			if errors.Is(err, ErrNoDatabase) {
				t.Error("a broken DSN must not be reported as 'no database': the user named one")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "HARMLESS_DSN") {
				t.Errorf("error %q does not say %q and where the DSN came from", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

func TestUnknownForcedWay(t *testing.T) {
	_, err := Open(t.Context(), Options{LookupEnv: env("HARMLESS_PROVISION", "docker")})
	if err == nil || !strings.Contains(err.Error(), `"docker"`) {
		t.Fatalf("Open with HARMLESS_PROVISION=docker: %v, want an error naming it", err)
	}
}

// TestPlanned: the way Open would take is known from the options and the
// environment alone, in Open's order of choice.
func TestPlanned(t *testing.T) {
	start := func(context.Context, string, func(string, ...any)) (Container, error) {
		return nil, errors.New("not started")
	}
	for _, tc := range []struct {
		name string
		opts Options
		want Kind
	}{
		{"nothing set, containers linked", Options{Container: start, LookupEnv: env()}, ""},
		{"nothing set, no containers", Options{LookupEnv: env()}, KindCluster},
		{"--dsn", Options{DSN: "postgres://x@h/db", Container: start, LookupEnv: env()}, KindDSN},
		{"HARMLESS_DSN", Options{Container: start, LookupEnv: env("HARMLESS_DSN", "postgres://x@h/db")}, KindDSN},
		{"DATABASE_URL", Options{Container: start, LookupEnv: env("DATABASE_URL", "postgres://x@h/db")}, KindDSN},
		{"forced over a DSN", Options{DSN: "postgres://x@h/db", Only: KindCluster, LookupEnv: env()}, KindCluster},
		{"HARMLESS_PROVISION", Options{Container: start, LookupEnv: env("HARMLESS_DSN", "postgres://x@h/db", "HARMLESS_PROVISION", "container")}, KindContainer},
		{"ha", Options{Container: start, LookupEnv: env("HARMLESS_PROVISION", "ha")}, KindHA},
		{"ha forced over a DSN", Options{DSN: "postgres://x@h/db", Only: KindHA, LookupEnv: env()}, KindHA},
	} {
		if got, err := tc.opts.Planned(); err != nil || got != tc.want {
			t.Errorf("%s: Planned() = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	if _, err := (Options{LookupEnv: env("HARMLESS_PROVISION", "docker")}).Planned(); err == nil {
		t.Error("Planned with HARMLESS_PROVISION=docker succeeded; want an error")
	}
}

// TestEmptyDSNIsRefused: a DSN variable set but empty names no server, and
// is not taken for unset (which would start a throwaway server where the
// user meant theirs), nor skipped for the next variable; a way forced past
// the DSN does not read it.
func TestEmptyDSNIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name, source string
		opts         Options
	}{
		{"HARMLESS_DSN=", "HARMLESS_DSN", Options{LookupEnv: env("HARMLESS_DSN", "")}},
		{"HARMLESS_DSN= over DATABASE_URL", "HARMLESS_DSN", Options{LookupEnv: env("HARMLESS_DSN", "", "DATABASE_URL", "postgres://x@h/db")}},
		{"DATABASE_URL=", "DATABASE_URL", Options{LookupEnv: env("DATABASE_URL", "")}},
		{"forced dsn", "HARMLESS_DSN", Options{Only: KindDSN, LookupEnv: env("HARMLESS_DSN", "")}},
	} {
		_, err := tc.opts.Planned()
		if !errors.Is(err, ErrEmptyDSN) || !strings.Contains(err.Error(), tc.source+" is set but empty") {
			t.Errorf("%s: Planned: %v; want ErrEmptyDSN naming %s", tc.name, err, tc.source)
		}
		if _, err := Open(t.Context(), tc.opts); !errors.Is(err, ErrEmptyDSN) {
			t.Errorf("%s: Open: %v; want ErrEmptyDSN", tc.name, err)
		}
	}
	if got, err := (Options{Only: KindCluster, LookupEnv: env("HARMLESS_DSN", "")}).Planned(); err != nil || got != KindCluster {
		t.Errorf("forced cluster with HARMLESS_DSN=: Planned() = %q, %v; want cluster", got, err)
	}
}

func TestNoDatabaseForced(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	empty := t.TempDir()
	for _, tc := range []struct {
		only Kind
		want []string
	}{
		{KindDSN, []string{
			"1) --dsn / HARMLESS_DSN / DATABASE_URL: not set;",
			"2) container engine: not tried (forced way: dsn);",
			"3) local server binaries (initdb, pg_ctl in Options.BinDir=" + empty + "): not tried (forced way: dsn)",
		}},
		{KindCluster, []string{
			"1) --dsn / HARMLESS_DSN / DATABASE_URL: not tried (forced way: cluster);",
			"2) container engine: not tried (forced way: cluster);",
			"3) local server binaries (initdb, pg_ctl in Options.BinDir=" + empty + "): not found",
		}},
	} {
		t.Run(string(tc.only), func(t *testing.T) {
			_, err := Open(ctx, Options{Only: tc.only, BinDir: empty, LookupEnv: env()})
			if !errors.Is(err, ErrNoDatabase) {
				t.Fatalf("Open = %v, want ErrNoDatabase", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\n lacks %q", err, w)
				}
			}
		})
	}
}

// hideEngineEnv asks the child to cover the engine's sockets.
const hideEngineEnv = "HARMLESS_PROVISION_TEST_HIDE_ENGINE"

// hideEngineSockets covers the well-known engine sockets with /dev/null,
// in the child's own mount namespace (see TestNoDatabaseListsAllThreeWays).
func hideEngineSockets() error {
	if os.Getenv(hideEngineEnv) == "" {
		return nil
	}
	for _, p := range []string{"/var/run/docker.sock", "/run/docker.sock", "/run/podman/podman.sock"} {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := syscall.Mount("/dev/null", p, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("cover %s: %w", p, err)
		}
	}
	return nil
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

// recoveryLine is what PostgreSQL logs when it starts after a crash.
const recoveryLine = "database system was not properly shut down; automatic recovery in progress"

// crashAndRecover checks the contract of an owned server: a committed row
// survives Crash and Restart, the crash was real (connections die, the
// server log shows crash recovery), and Restart of a running server is an
// error. afterCrash, if not nil, checks more right after the crash.
func crashAndRecover(t *testing.T, ctx context.Context, srv *Server, serverLog func() string, afterCrash func()) {
	t.Helper()
	conn := connect(t, ctx, srv.DSN())
	if _, err := conn.Exec(ctx, "CREATE TABLE survivor (v text); INSERT INTO survivor VALUES ('committed')"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Crash(ctx); err != nil {
		t.Fatalf("Crash: %v", err)
	}
	if afterCrash != nil {
		afterCrash()
	}
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("the connection still works after Crash")
	}
	began, before, secrets := time.Now(), srv.DSN(), srv.Secrets()
	if err := srv.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	t.Logf("restarted in %s; host:port %s -> %s", time.Since(began).Round(time.Millisecond), hostPort(before), hostPort(srv.DSN()))
	if log := serverLog(); !strings.Contains(log, recoveryLine) {
		t.Errorf("no crash recovery in the server log:\n%s", log)
	}
	var v string
	if err := connect(t, ctx, srv.DSN()).QueryRow(ctx, "SELECT v FROM survivor").Scan(&v); err != nil || v != "committed" {
		t.Fatalf("after the crash: %q, %v; want the committed row", v, err)
	}
	// The DSN got in with the password generated at the start; without
	// it, no one does.
	if !slices.Equal(srv.Secrets(), secrets) || len(secrets) != 1 {
		t.Errorf("Secrets() changed on Restart, or does not hold the one generated password")
	}
	checkRefused(t, ctx, "a login without a password after the restart", srv.DSN(), "")
	if err := srv.Restart(ctx); err == nil {
		t.Error("Restart of a running server: no error")
	}
}

func TestClusterCrashRestart(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	began := time.Now()
	srv := startCluster(t, ctx)
	t.Logf("cluster started in %s: %s", time.Since(began).Round(time.Millisecond), srv)
	c := srv.b.(*cluster)
	if srv.Kind != KindCluster || !srv.Owned() || srv.Version == "" {
		t.Fatalf("got %s, owned %v", srv, srv.Owned())
	}
	if parent := filepath.Clean(serverParent(os.Getenv)); filepath.Dir(c.dir) != parent || !strings.HasPrefix(filepath.Base(c.dir), fmt.Sprintf("harmless-pg-%d-", os.Getpid())) {
		t.Errorf("cluster directory %s, want %s/harmless-pg-%d-*", c.dir, parent, os.Getpid())
	}
	if o, _, _ := clusterOwner(c.dir); o != self() {
		t.Errorf("owner file says %+v, want %+v", o, self())
	}

	var maxConns int
	if err := connect(t, ctx, srv.DSN()).QueryRow(ctx, "SELECT current_setting('max_connections')::int").Scan(&maxConns); err != nil {
		t.Fatal(err)
	}
	if maxConns != clusterMaxConnections {
		t.Errorf("max_connections %d, want %d", maxConns, clusterMaxConnections)
	}
	// Its shared memory segments are files in its directory, which a crash
	// leaves there, to go with it, and not in /dev/shm.
	var dsm string
	if err := connect(t, ctx, srv.DSN()).QueryRow(ctx, "SHOW dynamic_shared_memory_type").Scan(&dsm); err != nil {
		t.Fatal(err)
	}
	if dsm != "mmap" {
		t.Errorf("dynamic_shared_memory_type %s, want mmap", dsm)
	}

	crashAndRecover(t, ctx, srv, func() string { return c.logSince(0) }, nil)

	if err := srv.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(c.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster directory after Close: %v, want it gone", err)
	}
	if err := srv.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := srv.Crash(ctx); err == nil {
		t.Error("Crash after Close: no error")
	}
}

// deadPID returns the pid of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestLeftoverClustersOfDeadRunsAreRemoved(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)

	// A running cluster whose owner file names a dead process.
	leftover := startCluster(t, ctx)
	lc := leftover.b.(*cluster)
	dead := self()
	dead.pid = deadPID(t)
	info := append(dead.marshal(), "bin="+lc.bin+"\n"...)
	if err := os.WriteFile(filepath.Join(lc.dir, ownerFile), info, 0o644); err != nil {
		t.Fatal(err)
	}
	// The leftover is where clusters are made, in memory on a machine
	// with room there (serverParent); the next ones are in os.TempDir,
	// where TMPDIR puts them: both are looked in.
	t.Logf("leftover cluster in %s", lc.dir)
	// An empty directory of a dead process, killed before its owner file
	// was written.
	early := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-early", clusterDirPrefix, deadPID(t)))
	if err := os.Mkdir(early, 0o700); err != nil {
		t.Fatal(err)
	}
	// A directory of a dead process's pid without an owner file, but not
	// empty: not harmless's, whatever its name says. It must stay.
	foreign := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-notes", clusterDirPrefix, deadPID(t)))
	if err := os.Mkdir(foreign, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(foreign) })
	if err := os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory of a live process (this one), which must stay.
	live, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", clusterDirPrefix, os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(live) })

	var lines []string
	srv, err := Open(ctx, Options{Only: KindCluster, LookupEnv: env(), Logf: func(f string, a ...any) {
		lines = append(lines, fmt.Sprintf(f, a...))
		t.Logf(f, a...)
	}})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	closeServer(t, srv)

	for _, dir := range []string{lc.dir, early} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("leftover %s: %v, want it removed", dir, err)
		}
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the directory of a live process was touched: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(foreign, "notes.txt")); err != nil || string(b) != "mine\n" {
		t.Errorf("a directory named like a cluster's, without an owner file and not empty, was touched: %q, %v", b, err)
	}
	if err := pingOnce(ctx, leftover.DSN()); err == nil {
		t.Errorf("the leftover server at %s still accepts connections", leftover.DSN())
	}
	// The progress line is not asserted: any harmless process that starts a
	// cluster meanwhile (go test runs packages in parallel) may be the one
	// that removes the leftover, and logs it in its own output.
	t.Logf("progress lines: %q", lines)
}

func pingOnce(ctx context.Context, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := serverVersion(ctx, dsn)
	return err
}

func hostPort(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
}
