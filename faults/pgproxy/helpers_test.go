package pgproxy_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/harmless-dev/harmless/faults/pgproxy"
	"github.com/harmless-dev/harmless/internal/backends"
	"github.com/harmless-dev/harmless/internal/faulttest"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testTimeout bounds each waiting step of a test.
const testTimeout = 30 * time.Second

// checkLeaks fails t if, after its cleanups, goroutines are left that were
// not there when checkLeaks was called. Call it before creating what the
// test must clean up: cleanups run last registered first.
func checkLeaks(t testing.TB) {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
}

// upstreamOf is the host:port of a DSN's (first) server.
func upstreamOf(t testing.TB, dsn string) string {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// env is one test's proxy in front of the shared server, a direct pool on
// that server, and a schema of the test's own.
type env struct {
	proxy     *pgproxy.Proxy
	upstream  string // the shared server's DSN
	client    string // the client the test's connections belong to
	dsn       string // through the client's listener
	direct    *pgxpool.Pool
	name      string // the test's schema
	schema    string // the same, quoted
	appPrefix string // application_name prefix of the test's connections
}

// testClient is the client of env's connections.
const testClient = "instance 1"

func newProxy(t testing.TB) *pgproxy.Proxy {
	t.Helper()
	p := pgproxy.New()
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close proxy: %v", err)
		}
	})
	return p
}

// proxyDSN starts a proxy in front of dsn's server, closed when the test
// ends, and returns dsn rewritten to go through it.
func proxyDSN(t testing.TB, dsn string) string {
	t.Helper()
	pdsn, err := newProxy(t).DSN("bench", dsn)
	if err != nil {
		t.Fatal(err)
	}
	return pdsn
}

func setup(t *testing.T) env {
	t.Helper()
	dsn := pgtest.DSN(t)
	checkLeaks(t)
	e := env{upstream: dsn, client: testClient, direct: pgtest.Pool(t), appPrefix: "harmless-pgproxy-test-" + faulttest.Unique(t)}
	e.proxy = newProxy(t)
	e.dsn = e.dsnOf(t, e.client)
	e.name = "harmless_test_pgproxy_" + faulttest.Unique(t)
	e.schema = pgx.Identifier{e.name}.Sanitize()
	e.exec(t, "CREATE SCHEMA "+e.schema)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if _, err := e.direct.Exec(ctx, "DROP SCHEMA "+e.schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", e.name, err)
		}
	})
	e.exec(t, "CREATE TABLE "+e.schema+".t (id int PRIMARY KEY)")
	return e
}

// dsnOf is the shared server's DSN through client's listener.
func (e env) dsnOf(t testing.TB, client string) string {
	t.Helper()
	dsn, err := e.proxy.DSN(client, e.upstream)
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// addr is the address of the test client's (one) listener.
func (e env) addr(t testing.TB) string {
	t.Helper()
	ls := e.proxy.Listeners(e.client)
	if len(ls) != 1 {
		t.Fatalf("client %s has %d listeners, want 1", e.client, len(ls))
	}
	return ls[0].Addr()
}

// exec runs sql on the direct pool.
func (e env) exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := e.direct.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// connect opens a connection through the proxy named app (after the
// test's prefix), closed when the test ends.
func (e env) connect(t testing.TB, app string) *pgx.Conn {
	t.Helper()
	return faulttest.ConnectTo(t, e.dsn, e.appPrefix+app)
}

// rows lists the ids in the test's table, read directly.
func (e env) rows(t testing.TB) []int {
	t.Helper()
	rows, err := e.direct.Query(t.Context(), "SELECT id FROM "+e.schema+".t ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// insertAndCommit inserts id in a transaction on conn (the INSERT over the
// extended protocol, BEGIN and COMMIT as simple queries, as pgx does) and
// returns the error of the COMMIT. Errors before the COMMIT fail the test.
func (e env) insertAndCommit(t testing.TB, conn *pgx.Conn, id int) error {
	t.Helper()
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), "INSERT INTO "+e.schema+".t (id) VALUES ($1)", id); err != nil {
		t.Fatal(err)
	}
	return tx.Commit(t.Context())
}

func (e env) arm(t testing.TB, r pgproxy.Rule) *pgproxy.Fault {
	t.Helper()
	f, err := e.proxy.Arm(r)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// backendAlive reports whether pid is in pg_stat_activity.
func (e env) backendAlive(t testing.TB, pid int) bool {
	t.Helper()
	var n int
	if err := e.direct.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// waitGone waits for the backends f cut and checks they are gone.
func (e env) waitGone(t testing.TB, f *pgproxy.Fault) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	pinned, err := backends.Backends(ctx, e.direct, f.PIDs()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := backends.WaitGone(ctx, e.direct, pinned...); err != nil {
		t.Fatal(err)
	}
	for _, pid := range f.PIDs() {
		if e.backendAlive(t, pid) {
			t.Errorf("backend %d still in pg_stat_activity after WaitGone", pid)
		}
	}
}

// eventually polls cond until it holds or the test timeout passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// fired is how often f fired.
func fired(t testing.TB, f *pgproxy.Fault) int64 {
	t.Helper()
	n, err := f.Fired(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return n
}
