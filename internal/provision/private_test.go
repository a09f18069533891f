package provision

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The tests of this file check that every server harmless starts lets no
// one in but the holder of its DSN: a password generated for the run,
// asked by SCRAM-SHA-256 on every connection, TCP and unix socket alike; a
// container published on 127.0.0.1 only; a cluster whose directories only
// the server's user can enter.

// oldPassword is the fixed password containers had before: it must be
// refused now.
const oldPassword = "postgres"

func TestNewPasswordIsRandom(t *testing.T) {
	seen := map[string]bool{}
	for range 8 {
		p, err := newPassword()
		if err != nil {
			t.Fatal(err)
		}
		if b, err := hex.DecodeString(p); err != nil || len(b) != passwordBytes {
			t.Errorf("password %q: want %d bytes in hex (%v)", p, passwordBytes, err)
		}
		if seen[p] {
			t.Errorf("password %q generated twice", p)
		}
		seen[p] = true
	}
}

// logRecorder collects progress lines, so that a test can check that none
// of them shows a secret.
type logRecorder struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) logf(format string, args ...any) {
	l.t.Helper()
	line := fmt.Sprintf(format, args...)
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
	l.t.Log(line)
}

func (l *logRecorder) checkHides(secret string) {
	l.t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, secret) {
			l.t.Errorf("a progress line shows the password: %q", line)
		}
	}
}

// checkSecrets checks that the server's DSN carries a generated password,
// that Secrets returns it, and returns it.
func checkSecrets(t *testing.T, srv *Server) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.User != superuser {
		t.Errorf("DSN user %q, want %q", cfg.User, superuser)
	}
	if b, err := hex.DecodeString(cfg.Password); err != nil || len(b) != passwordBytes {
		t.Fatalf("the DSN's password is not a generated one (%d bytes in hex): %d characters, %v", passwordBytes, len(cfg.Password), err)
	}
	if got := srv.Secrets(); !slices.Equal(got, []string{cfg.Password}) {
		t.Errorf("Secrets() returns %d values, want exactly the DSN's password", len(got))
	}
	if s := srv.String(); strings.Contains(s, cfg.Password) {
		t.Errorf("String() shows the password: %s", s)
	}
	return cfg.Password
}

// login connects to dsn with the given password in place of the DSN's
// (none at all if empty; PGPASSWORD and ~/.pgpass cannot fill it in then).
func login(ctx context.Context, dsn, password string) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.Password = password
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.Ping(ctx)
}

// checkRefused checks that the server itself refuses a login with
// password: SQLSTATE 28P01, invalid_password, which only comes once the
// server was reached and asked for a password, so that an unreachable
// server can never pass for a refusal.
func checkRefused(t *testing.T, ctx context.Context, what, dsn, password string) {
	t.Helper()
	err := login(ctx, dsn, password)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "28P01" {
		t.Errorf("%s: %v, want the server to refuse it (SQLSTATE 28P01)", what, err)
		return
	}
	t.Logf("%s: refused: %s", what, pgErr.Message)
}

// checkAuthConfig checks, from the server's own view, that no line of
// pg_hba.conf trusts anyone and that passwords are stored as SCRAM.
func checkAuthConfig(t *testing.T, ctx context.Context, dsn string) {
	t.Helper()
	conn := connect(t, ctx, dsn)
	rows, err := conn.Query(ctx, `SELECT line_number, type, auth_method, coalesce(error, '') FROM pg_hba_file_rules`)
	if err != nil {
		t.Fatal(err)
	}
	type rule struct {
		line               int
		typ, method, error string
	}
	rules, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (rule, error) {
		var x rule
		return x, r.Scan(&x.line, &x.typ, &x.method, &x.error)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) == 0 {
		t.Fatal("pg_hba_file_rules is empty")
	}
	bad := 0
	for _, r := range rules {
		if r.method != "scram-sha-256" || r.error != "" {
			t.Errorf("pg_hba.conf line %d (%s): %s %s, want scram-sha-256", r.line, r.typ, r.method, r.error)
			bad++
		}
	}
	var enc string
	var scram bool
	err = conn.QueryRow(ctx, `SELECT current_setting('password_encryption'),
		(SELECT rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid WHERE rolname = current_user)`).Scan(&enc, &scram)
	if err != nil {
		t.Fatal(err)
	}
	if enc != "scram-sha-256" || !scram {
		t.Errorf("password_encryption %s, superuser's password stored as SCRAM: %v; want scram-sha-256, true", enc, scram)
	}
	if bad == 0 {
		t.Logf("pg_hba.conf: %d lines, all scram-sha-256", len(rules))
	}
}

func TestClusterIsPrivate(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	rec := &logRecorder{t: t}
	srv, err := Open(ctx, Options{Only: KindCluster, LookupEnv: env(), Logf: rec.logf})
	if err != nil {
		t.Fatalf("Open cluster: %v", err)
	}
	closeServer(t, srv)
	c := srv.b.(*cluster)
	password := checkSecrets(t, srv)

	// The directories: 0700, the server's user's.
	wantUID := os.Geteuid()
	if c.as.cred != nil {
		wantUID = c.as.uid
	}
	for _, dir := range []string{c.dir, c.data(), c.socketDir()} {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != fs.ModeDir|0o700 || int(st.Uid) != wantUID {
			t.Errorf("%s: mode %s, owner uid %d; want drwx------, uid %d", dir, fi.Mode(), st.Uid, wantUID)
		}
	}
	if _, err := os.Stat(filepath.Join(c.dir, clusterPwFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the password file is still there: %v", err)
	}
	var socket string
	if err := connect(t, ctx, srv.DSN()).QueryRow(ctx, "SHOW unix_socket_directories").Scan(&socket); err != nil || socket != c.socketDir() {
		t.Errorf("unix_socket_directories %q, %v; want %s", socket, err, c.socketDir())
	}

	checkAuthConfig(t, ctx, srv.DSN())

	// TCP: the DSN gets in, the old fixed password and none do not.
	if err := login(ctx, srv.DSN(), password); err != nil {
		t.Fatalf("TCP with the DSN's password: %v", err)
	}
	checkRefused(t, ctx, "TCP with the old fixed password", srv.DSN(), oldPassword)
	checkRefused(t, ctx, "TCP without a password", srv.DSN(), "")

	// The unix socket: the same.
	sock := fmt.Sprintf("host=%s port=%d user=%s dbname=postgres", c.socketDir(), c.port, superuser)
	if err := login(ctx, sock, password); err != nil {
		t.Fatalf("unix socket with the password: %v", err)
	}
	checkRefused(t, ctx, "unix socket without a password", sock, "")
	checkRefused(t, ctx, "unix socket with the old fixed password", sock, oldPassword)

	// A server named by this DSN reports its password as a secret too.
	named, err := Open(ctx, Options{DSN: srv.DSN(), LookupEnv: env(), Logf: rec.logf})
	if err != nil {
		t.Fatal(err)
	}
	if got := named.Secrets(); !slices.Equal(got, []string{password}) {
		t.Errorf("a server named by the DSN: Secrets() returns %d values, want the DSN's password", len(got))
	}

	// After a restart: the same DSN works, and still nothing else.
	if err := srv.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := login(ctx, srv.DSN(), password); err != nil {
		t.Errorf("the DSN after a restart: %v", err)
	}
	checkRefused(t, ctx, "TCP without a password after a restart", srv.DSN(), "")
	sock = fmt.Sprintf("host=%s port=%d user=%s dbname=postgres", c.socketDir(), c.port, superuser)
	checkRefused(t, ctx, "unix socket without a password after a restart", sock, "")

	rec.checkHides(password)
}
