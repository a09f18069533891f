package provision

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The tests of this file start real pg_auto_failover formations: a
// monitor and two nodes, as the postgres user, on the loopback. Each test
// starts one formation and plays everything it checks on it, in order.

// requireHA skips the test when no formation can be made here (no
// pg_autoctl, or no server binaries with the extension), unless
// HARMLESS_REQUIRE_HA=1, where CI has installed them: then it fails.
func requireHA(t *testing.T) {
	t.Helper()
	st, err := Options{LookupEnv: env()}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := findHATools(t.Context(), st); err != nil {
		if os.Getenv("HARMLESS_REQUIRE_HA") == "1" {
			t.Fatalf("HARMLESS_REQUIRE_HA=1, but no HA formation can be made here: %v", err)
		}
		t.Skipf("no HA formation can be made here (HARMLESS_REQUIRE_HA=1 makes this a failure): %v", err)
	}
}

func startFormation(t *testing.T, ctx context.Context, logf func(string, ...any)) (*Server, *Formation, *formation) {
	t.Helper()
	began := time.Now()
	srv, err := Open(ctx, Options{Only: KindHA, LookupEnv: env(), Logf: logf})
	if err != nil {
		t.Fatalf("Open ha: %v", err)
	}
	closeServer(t, srv)
	t.Logf("formation started in %s: %s", time.Since(began).Round(time.Millisecond), srv)
	fm := srv.Formation()
	if fm == nil {
		t.Fatal("Formation() is nil on a server of KindHA")
	}
	return srv, fm, srv.b.(*formation)
}

func TestFormation(t *testing.T) {
	requireHA(t)
	ctx := testCtx(t, 8*time.Minute)
	rec := &logRecorder{t: t}
	srv, fm, f := startFormation(t, ctx, rec.logf)
	password := checkSecrets(t, srv)

	t.Run("server", func(t *testing.T) {
		if srv.Kind != KindHA || !srv.Owned() || srv.Version == "" {
			t.Errorf("kind %s, owned %v, version %q; want ha, owned, a version", srv.Kind, srv.Owned(), srv.Version)
		}
		if parent := filepath.Clean(serverParent(os.Getenv)); filepath.Dir(f.dir) != parent || !strings.HasPrefix(filepath.Base(f.dir), fmt.Sprintf("%s%d-", haDirPrefix, os.Getpid())) {
			t.Errorf("formation directory %s, want %s/%s%d-*", f.dir, parent, haDirPrefix, os.Getpid())
		}
		if o, _, marked := dirOwner(f.dir, haDirPrefix); !marked || o != self() {
			t.Errorf("owner file says %+v (marked %v), want %+v", o, marked, self())
		}
		for _, op := range []func(context.Context) error{srv.Crash, srv.Restart} {
			if err := op(ctx); err == nil || !strings.Contains(err.Error(), "Formation.Failover") {
				t.Errorf("Crash or Restart of a formation: %v, want an error pointing to Formation.Failover", err)
			}
		}
		if (&Server{Kind: KindCluster, b: &cluster{}}).Formation() != nil {
			t.Error("Formation() of a cluster is not nil")
		}
		states, err := fm.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, ok := healthy(states); !ok {
			t.Errorf("State() = %s, want a primary and a secondary", describeStates(states))
		}
		t.Logf("state: %s", describeStates(states))
	})

	t.Run("private", func(t *testing.T) { checkFormationPrivate(t, ctx, f, password) })

	t.Run("multi-host DSN", func(t *testing.T) {
		primary, err := fm.Primary(ctx)
		if err != nil {
			t.Fatal(err)
		}
		checkDSNOrder(t, srv, fm, primary)
		conn := connect(t, ctx, srv.DSN())
		var port int
		var standby bool
		if err := conn.QueryRow(ctx, "SELECT inet_server_port(), pg_is_in_recovery()").Scan(&port, &standby); err != nil {
			t.Fatal(err)
		}
		if port != primary.Port || standby {
			t.Errorf("the DSN reached :%d (in recovery: %v), want the primary %s", port, standby, primary)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE survivor (v text); INSERT INTO survivor VALUES ('before the failovers')"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("controlled failover", func(t *testing.T) {
		before, err := fm.Primary(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fo, err := fm.Failover(ctx, FailoverControlled)
		if err != nil {
			t.Fatalf("Failover: %v", err)
		}
		checkFailover(t, ctx, srv, fm, fo, FailoverControlled, before)
		checkSurvivor(t, ctx, srv)
		waitHealthy(t, ctx, fm)
	})

	t.Run("hard kill", func(t *testing.T) {
		before, err := fm.Primary(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fo, err := fm.Failover(ctx, FailoverHardKill)
		if err != nil {
			t.Fatalf("Failover: %v", err)
		}
		checkFailover(t, ctx, srv, fm, fo, FailoverHardKill, before)
		killed := f.node(before.Port)
		if left := processesIn(killed.data, f.as.serverUID()); len(left) > 0 || killed.run.running() {
			t.Errorf("after the hard kill of %s: processes %v, pg_autoctl running %v; want none", killed.name, left, killed.run.running())
		}
		checkSurvivor(t, ctx, srv)
		waitHealthy(t, ctx, fm)
		states, err := fm.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p, s, ok := healthy(states); !ok || p.Node != fo.After || s.Node != before {
			t.Errorf("after WaitHealthy: %s; want %s primary, %s secondary", describeStates(states), fo.After, before)
		}
	})

	t.Run("synchronous", func(t *testing.T) {
		for _, on := range []bool{false, true} {
			if err := fm.SetSynchronous(ctx, on); err != nil {
				t.Fatalf("SetSynchronous(%v): %v", on, err)
			}
			var names string
			if err := connect(t, ctx, srv.DSN()).QueryRow(ctx, "SHOW synchronous_standby_names").Scan(&names); err != nil {
				t.Fatal(err)
			}
			if (names != "") != on {
				t.Errorf("after SetSynchronous(%v): synchronous_standby_names = %q", on, names)
			}
			t.Logf("SetSynchronous(%v): synchronous_standby_names = %q", on, names)
		}
	})

	t.Run("stalled replication", func(t *testing.T) { checkStall(t, ctx, srv, fm) })

	t.Run("close", func(t *testing.T) {
		began := time.Now()
		if err := srv.Close(ctx); err != nil {
			t.Fatalf("Close: %v", err)
		}
		t.Logf("closed in %s", time.Since(began).Round(time.Millisecond))
		if _, err := os.Stat(f.dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("formation directory after Close: %v, want it gone", err)
		}
		if left := anyProcessNaming(f.dir); len(left) > 0 {
			t.Errorf("processes left after Close: %s", strings.Join(left, "; "))
		}
		if _, err := fm.State(ctx); err == nil {
			t.Error("State after Close: no error")
		}
		if _, err := fm.Failover(ctx, FailoverHardKill); err == nil {
			t.Error("Failover after Close: no error")
		}
	})

	rec.checkHides(password)
}

// waitHealthy calls WaitHealthy and logs how long it took.
func waitHealthy(t *testing.T, ctx context.Context, fm *Formation) {
	t.Helper()
	began := time.Now()
	if err := fm.WaitHealthy(ctx); err != nil {
		t.Fatalf("WaitHealthy: %v", err)
	}
	t.Logf("healthy again after %s", time.Since(began).Round(time.Millisecond))
}

// checkFailover checks a failover's evidence and that the formation and
// the DSN follow it.
func checkFailover(t *testing.T, ctx context.Context, srv *Server, fm *Formation, fo Failover, kind FailoverKind, before Node) {
	t.Helper()
	t.Logf("%s", fo)
	if p := fo.Problem(); p != "" {
		t.Errorf("Problem() = %q, want none", p)
	}
	if fo.Kind != kind || fo.Before != before || fo.After == before || fo.After == (Node{}) {
		t.Errorf("kind %s, before %s, after %s; want %s, %s, another node", fo.Kind, fo.Before, fo.After, kind, before)
	}
	if fo.Started.IsZero() || fo.Writable <= 0 || fo.Writable > time.Minute {
		t.Errorf("started %s, writable after %s", fo.Started, fo.Writable)
	}
	if fo.TimelineAfter <= fo.TimelineBefore || fo.SystemIDBefore == 0 || fo.SystemIDAfter != fo.SystemIDBefore {
		t.Errorf("timeline %d -> %d, system id %d -> %d", fo.TimelineBefore, fo.TimelineAfter, fo.SystemIDBefore, fo.SystemIDAfter)
	}
	primary, err := fm.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if primary != fo.After {
		t.Errorf("Primary() = %s after the failover to %s", primary, fo.After)
	}
	checkDSNOrder(t, srv, fm, fo.After)
}

// checkDSNOrder checks that the DSN names both nodes, primary first, with
// target_session_attrs=read-write.
func checkDSNOrder(t *testing.T, srv *Server, fm *Formation, primary Node) {
	t.Helper()
	dsn := srv.DSN()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	ports := []int{int(cfg.Port)}
	for _, fb := range cfg.Fallbacks {
		ports = append(ports, int(fb.Port))
	}
	var want []int
	want = append(want, primary.Port)
	for _, n := range fm.Nodes() {
		if n != primary {
			want = append(want, n.Port)
		}
	}
	if cfg.Host != "127.0.0.1" || !slices.Equal(ports, want) {
		t.Errorf("the DSN names %s, ports %v; want 127.0.0.1, ports %v (the primary %s first)", cfg.Host, ports, want, primary)
	}
	if !strings.Contains(dsn, "target_session_attrs=read-write") || cfg.ValidateConnect == nil {
		t.Error("the DSN does not ask for target_session_attrs=read-write")
	}
}

// checkSurvivor checks that the row written before the failovers is there.
func checkSurvivor(t *testing.T, ctx context.Context, srv *Server) {
	t.Helper()
	var v string
	if err := connect(t, ctx, srv.DSN()).QueryRow(ctx, "SELECT v FROM survivor").Scan(&v); err != nil {
		t.Errorf("the row committed before: %v", err)
	}
}

// checkFormationPrivate checks the formation's privacy: no trust line,
// the password asked on every TCP login, the directories, the sockets in
// the formation's directory, and listening on 127.0.0.1 only.
func checkFormationPrivate(t *testing.T, ctx context.Context, f *formation, password string) {
	for _, in := range f.instances() {
		// pg_hba.conf as written: no trust; host lines SCRAM, local lines peer.
		b, err := os.ReadFile(filepath.Join(in.data, "pg_hba.conf"))
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(b)) {
			fields := strings.Fields(strings.SplitN(line, "#", 2)[0])
			if len(fields) == 0 {
				continue
			}
			if slices.Contains(fields, "trust") {
				t.Errorf("%s's pg_hba.conf trusts: %s", in.name, strings.TrimSpace(line))
			}
			switch {
			case fields[0] == "local" && !slices.Contains(fields, "peer"):
				t.Errorf("%s's pg_hba.conf: a local line that is not peer: %s", in.name, strings.TrimSpace(line))
			case strings.HasPrefix(fields[0], "host") && (fields[len(fields)-1] != "scram-sha-256" || !slices.Contains([]string{"127.0.0.1/32", "127.0.0.0/8"}, fields[3])):
				t.Errorf("%s's pg_hba.conf: a host line that is not scram-sha-256 from the loopback: %s", in.name, strings.TrimSpace(line))
			}
		}

		dsn := f.nodeDSN(in.port)
		conn := connect(t, ctx, dsn)
		// The server's own view of it.
		var bad int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_hba_file_rules
			WHERE error IS NOT NULL OR (type = 'local') <> (auth_method = 'peer')
			OR (type <> 'local' AND auth_method <> 'scram-sha-256')`).Scan(&bad); err != nil || bad != 0 {
			t.Errorf("%s: %d rules of pg_hba_file_rules are neither local peer nor scram-sha-256 (%v)", in.name, bad, err)
		}
		var sockets, listen string
		if err := conn.QueryRow(ctx, "SELECT current_setting('unix_socket_directories'), current_setting('listen_addresses')").Scan(&sockets, &listen); err != nil {
			t.Fatal(err)
		}
		if sockets != f.socketDir() || listen != "127.0.0.1" {
			t.Errorf("%s: unix_socket_directories %q, listen_addresses %q; want %q, 127.0.0.1", in.name, sockets, listen, f.socketDir())
		}
		if _, err := os.Stat(filepath.Join(f.socketDir(), fmt.Sprintf(".s.PGSQL.%d", in.port))); err != nil {
			t.Errorf("%s: no socket in the formation's socket directory: %v", in.name, err)
		}
		if _, err := os.Stat(fmt.Sprintf("/var/run/postgresql/.s.PGSQL.%d", in.port)); err == nil {
			t.Errorf("%s has a socket in /var/run/postgresql", in.name)
		}
		if addrs := listeners(t, in.port); len(addrs) == 0 || slices.ContainsFunc(addrs, func(a string) bool { return a != "127.0.0.1" }) {
			t.Errorf("%s listens on %v, want 127.0.0.1 only", in.name, addrs)
		}

		// TCP: the password gets in; none, or the old fixed one, does not.
		if err := login(ctx, dsn, password); err != nil {
			t.Errorf("%s: TCP with the password: %v", in.name, err)
		}
		checkRefused(t, ctx, in.name+": TCP without a password", dsn, "")
		checkRefused(t, ctx, in.name+": TCP with the old fixed password", dsn, oldPassword)
	}
	if err := login(ctx, f.monitorDSN(), password); err != nil {
		t.Errorf("autoctl_node on the monitor with the password: %v", err)
	}
	checkRefused(t, ctx, "autoctl_node on the monitor without a password", f.monitorDSN(), "")

	// The directories: 0700, the server's user's; the password file 0600.
	uid := f.as.serverUID()
	home := f.home()
	for _, dir := range append([]string{f.dir, f.socketDir(), home, filepath.Join(home, "run"),
		filepath.Join(home, "config"), filepath.Join(home, "data")}, f.datas()...) {
		checkMode(t, dir, fs.ModeDir|0o700, uid)
	}
	checkMode(t, f.pgpass(), 0o600, uid)

	// The password is nowhere in the directory but in the password file:
	// not in a log, not in pg_autoctl's configuration, not left by initdb.
	err := filepath.WalkDir(f.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() || path == f.pgpass() {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(password)) {
			t.Errorf("%s holds the password", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func checkMode(t *testing.T, path string, mode fs.FileMode, uid int) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != mode || int(fi.Sys().(*syscall.Stat_t).Uid) != uid {
		t.Errorf("%s: mode %s, owner uid %d; want %s, uid %d", path, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, mode, uid)
	}
}

// listeners returns the addresses that listen on TCP port, from
// /proc/net/tcp and tcp6.
func listeners(t *testing.T, port int) []string {
	t.Helper()
	var addrs []string
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// sl local_address rem_address st ...; st 0A is LISTEN.
			if len(fields) < 4 || fields[3] != "0A" {
				continue
			}
			hexAddr, hexPort, ok := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); !ok || err != nil || int(p) != port {
				continue
			}
			addrs = append(addrs, procNetAddr(hexAddr))
		}
		f.Close()
	}
	return addrs
}

// procNetAddr reads an address of /proc/net/tcp (little-endian words).
func procNetAddr(h string) string {
	if len(h) == 8 {
		v, _ := strconv.ParseUint(h, 16, 32)
		return fmt.Sprintf("%d.%d.%d.%d", v&0xff, v>>8&0xff, v>>16&0xff, v>>24)
	}
	return "[" + h + "]" // IPv6: never 127.0.0.1
}

// anyProcessNaming lists every process, of any user, whose command line or
// working directory names dir.
func anyProcessNaming(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var found []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || !alive(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		if bytes.Contains(cmdline, []byte(dir)) || within(cwd, dir) {
			found = append(found, fmt.Sprintf("%d %s (in %s)", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}), cwd))
		}
	}
	return found
}

// checkStall checks StallReplication: a synchronous commit blocks until
// Resume, a local one does not, the standby lags; and a hard kill of the
// primary while it is stalled still fails over, losing what only the
// primary had.
func checkStall(t *testing.T, ctx context.Context, srv *Server, fm *Formation) {
	if _, err := connect(t, ctx, srv.DSN()).Exec(ctx, "CREATE TABLE stalled (v text)"); err != nil {
		t.Fatal(err)
	}
	st, err := fm.StallReplication(ctx)
	if err != nil {
		t.Fatalf("StallReplication: %v", err)
	}
	t.Cleanup(func() { st.Resume() })

	localCommit(t, ctx, srv, "local")
	lag, err := st.Lag(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lag.Bytes <= 0 {
		t.Errorf("Lag() = %+v while stalled, want the standby behind", lag)
	}
	if !lag.Synchronous() {
		t.Errorf("Lag() = %+v while stalled, want the primary still waiting for its standby (synchronous_standby_names set)", lag)
	}
	t.Logf("lag while stalled: %+v", lag)

	// A synchronous commit waits for the standby: it must not return
	// before Resume.
	sync := connect(t, ctx, srv.DSN())
	type result struct {
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go func() {
		_, err := sync.Exec(syncCtx, "INSERT INTO stalled VALUES ('synchronous')")
		done <- result{err, time.Now()}
	}()
	select {
	case r := <-done:
		t.Fatalf("a synchronous commit returned (%v) while the replication was stalled", r.err)
	case <-time.After(3 * time.Second):
	}
	resumed := time.Now()
	if err := st.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	r := <-done
	if r.err != nil || r.at.Before(resumed) {
		t.Fatalf("the synchronous commit: %v at %s, want it to return after Resume (%s)", r.err, r.at, resumed)
	}
	t.Logf("the synchronous commit returned %s after Resume", r.at.Sub(resumed).Round(time.Millisecond))
	if err := st.Resume(); err != nil {
		t.Errorf("a second Resume: %v", err)
	}
	caughtUp(t, ctx, st)

	// A hard kill while stalled: the primary's last commit never reached
	// the standby, and the failover loses it.
	st, err = fm.StallReplication(ctx)
	if err != nil {
		t.Fatalf("StallReplication: %v", err)
	}
	before, err := fm.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	localCommit(t, ctx, srv, "lost")
	if lag, err := st.Lag(ctx); err != nil || lag.Bytes <= 0 {
		t.Errorf("Lag() = %+v, %v before the hard kill, want the standby behind", lag, err)
	}
	fo, err := fm.Failover(ctx, FailoverHardKill)
	if err != nil {
		t.Fatalf("hard kill while stalled: %v", err)
	}
	checkFailover(t, ctx, srv, fm, fo, FailoverHardKill, before)
	if err := st.Resume(); err != nil {
		t.Errorf("Resume after the primary was killed: %v", err)
	}
	var kept []string
	rows, err := connect(t, ctx, srv.DSN()).Query(ctx, "SELECT v FROM stalled ORDER BY v")
	if err == nil {
		kept, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil || !slices.Equal(kept, []string{"local", "synchronous"}) {
		t.Errorf("rows after the failover: %q, %v; want local and synchronous, and lost lost", kept, err)
	}
	waitHealthy(t, ctx, fm)
}

// localCommit commits a row with synchronous_commit = local, which must
// return at once even while the replication is stalled.
func localCommit(t *testing.T, ctx context.Context, srv *Server, v string) {
	t.Helper()
	conn := connect(t, ctx, srv.DSN())
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	began := time.Now()
	if _, err := conn.Exec(ctx, "SET synchronous_commit = local"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO stalled VALUES ($1)", v); err != nil {
		t.Fatalf("a commit with synchronous_commit = local while stalled: %v", err)
	}
	t.Logf("a commit with synchronous_commit = local returned in %s", time.Since(began).Round(time.Millisecond))
}

// caughtUp waits until the standby has what the primary flushed.
func caughtUp(t *testing.T, ctx context.Context, st *ReplicationStall) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		lag, err := st.Lag(ctx)
		if err == nil && lag.Bytes <= 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the standby did not catch up after Resume: %+v, %v", lag, err)
		case <-tick.C:
		}
	}
}

func TestLeftoverFormationsOfDeadRunsAreRemoved(t *testing.T) {
	requireHA(t)
	ctx := testCtx(t, 5*time.Minute)

	// A running formation whose owner file names a dead process.
	_, _, f := startFormation(t, ctx, t.Logf)
	dead := self()
	dead.pid = deadPID(t)
	info := fmt.Appendf(dead.marshal(), "bin=%s\nautoctl=%s\n", f.tools.bin, f.tools.autoctl)
	if err := os.WriteFile(filepath.Join(f.dir, ownerFile), info, 0o644); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, in := range f.instances() {
		pids = append(pids, in.run.pid, postmasterOf(in.data))
	}
	pids = append(pids, processesIn(f.dir, f.as.serverUID())...)
	t.Logf("the leftover's processes: %v", pids)

	// An empty directory of a dead process, killed before its owner file
	// was written; and one that is not empty, without an owner file: not
	// harmless's, whatever its name says.
	early := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-early", haDirPrefix, deadPID(t)))
	if err := os.Mkdir(early, 0o700); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-notes", haDirPrefix, deadPID(t)))
	if err := os.Mkdir(foreign, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(foreign) })
	if err := os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("mine\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Any Open cleans up, even one that then finds no database.
	if _, err := Open(ctx, Options{Only: KindDSN, LookupEnv: env(), Logf: t.Logf}); !errors.Is(err, ErrNoDatabase) {
		t.Fatalf("Open with no DSN: %v, want ErrNoDatabase", err)
	}
	for _, dir := range []string{f.dir, early} {
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("leftover %s: %v, want it removed", dir, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(foreign, "notes.txt")); err != nil || string(b) != "mine\n" {
		t.Errorf("a directory named like a formation's, without an owner file and not empty, was touched: %q, %v", b, err)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d of the leftover is alive", pid)
		}
	}
	if left := anyProcessNaming(f.dir); len(left) > 0 {
		t.Errorf("processes of the leftover: %s", strings.Join(left, "; "))
	}
}

// TestCancelledStartLeavesNothing: a run interrupted while its formation
// starts (the harness cancels ctx) leaves no process and no directory.
func TestCancelledStartLeavesNothing(t *testing.T) {
	requireHA(t)
	mine := func() []string {
		dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), fmt.Sprintf("%s%d-*", haDirPrefix, os.Getpid())))
		return dirs
	}
	before := mine()
	var started []string
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, err := Open(ctx, Options{Only: KindHA, LookupEnv: env(), Logf: func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		t.Log(line)
		// Cancel once the monitor runs, while node1 is being made.
		if strings.Contains(line, "monitor running") {
			cancel()
		}
		if dir, ok := strings.CutPrefix(line, "starting HA formation in "); ok {
			started = append(started, strings.Fields(dir)[0])
		}
	}})
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Open cancelled while starting: %v, want context.Canceled", err)
	}
	t.Logf("Open: %v", err)
	if len(started) != 1 {
		t.Fatalf("progress lines name %d formation directories, want 1", len(started))
	}
	if after := mine(); !slices.Equal(after, before) {
		t.Errorf("formation directories %v after a cancelled start, want %v", after, before)
	}
	if left := anyProcessNaming(started[0]); len(left) > 0 {
		t.Errorf("processes left by a cancelled start: %s", strings.Join(left, "; "))
	}
}
