package pgproxy_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/faults/pgproxy"
	"github.com/harmless-dev/harmless/internal/faulttest"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

func TestPassthroughSimpleAndExtended(t *testing.T) {
	e := setup(t)
	conn := e.connect(t, "")
	ctx := t.Context()

	var sum int
	if err := conn.QueryRow(ctx, "SELECT $1::int + $2::int", 40, 2).Scan(&sum); err != nil || sum != 42 {
		t.Fatalf("extended query: %d, %v", sum, err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO "+e.schema+".t (id) VALUES ($1), ($2)", 1, 2); err != nil {
		t.Fatalf("extended exec: %v", err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO "+e.schema+".t (id) VALUES (3); INSERT INTO "+e.schema+".t (id) VALUES (4)"); err != nil {
		t.Fatalf("simple multi-statement exec: %v", err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+e.schema+".t WHERE id > $1", pgx.QueryExecModeSimpleProtocol, 0).Scan(&n); err != nil || n != 4 {
		t.Fatalf("simple-protocol query: %d, %v", n, err)
	}

	// Messages larger than the proxy's buffers, both ways.
	big := bytes.Repeat([]byte("harmless"), 200_000)
	var echoed []byte
	if err := conn.QueryRow(ctx, "SELECT $1::bytea", big).Scan(&echoed); err != nil || !bytes.Equal(echoed, big) {
		t.Fatalf("1.6 MB bytea round trip: %d bytes back, %v", len(echoed), err)
	}
	// Query and Parse messages larger than the proxy's buffers.
	longSQL := "SELECT length($$" + strings.Repeat("x", 100_000) + "$$)"
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		var length int
		if err := conn.QueryRow(ctx, longSQL, mode).Scan(&length); err != nil || length != 100_000 {
			t.Fatalf("a 100 kB statement (%v): %d, %v", mode, length, err)
		}
	}
	var total int64
	if err := conn.QueryRow(ctx, "SELECT sum(g) FROM generate_series(1, 100000) g").Scan(&total); err != nil || total != 5000050000 {
		t.Fatalf("sum: %d, %v", total, err)
	}
	rows, _ := conn.Query(ctx, "SELECT g FROM generate_series(1, 50000) g")
	got, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil || len(got) != 50000 || got[49999] != 50000 {
		t.Fatalf("50000 rows: %d, %v", len(got), err)
	}

	// COPY FROM STDIN.
	copied, err := conn.CopyFrom(ctx, pgx.Identifier{strings.Trim(e.schema, `"`), "t"}, []string{"id"},
		pgx.CopyFromSlice(1000, func(i int) ([]any, error) { return []any{int32(100 + i)}, nil }))
	if err != nil || copied != 1000 {
		t.Fatalf("copy: %d, %v", copied, err)
	}
	if ids := e.rows(t); len(ids) != 1004 {
		t.Fatalf("%d rows in the table, want 1004", len(ids))
	}

	// An error passes through and the connection goes on.
	_, err = conn.Exec(ctx, "INSERT INTO "+e.schema+".t (id) VALUES ($1)", 1)
	if sqlState(err) != "23505" {
		t.Fatalf("duplicate insert: %v, want SQLSTATE 23505", err)
	}
	if err := conn.Ping(ctx); err != nil {
		t.Fatalf("ping after an error: %v", err)
	}

	// The client sees its own backend's pid: BackendKeyData is relayed
	// untouched.
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil || pid != int(conn.PgConn().PID()) {
		t.Fatalf("pg_backend_pid %d, pgconn's pid %d, %v", pid, conn.PgConn().PID(), err)
	}
}

func TestSSLRequestFallsBackToPlaintext(t *testing.T) {
	e := setup(t)
	dsn := strings.Replace(e.dsn, "sslmode=disable", "sslmode=prefer", 1)
	if !strings.Contains(dsn, "sslmode=prefer") {
		t.Fatalf("no sslmode=prefer in %s", dsn)
	}
	conn := faulttest.ConnectTo(t, dsn, e.appPrefix)
	var ssl bool
	if err := conn.QueryRow(t.Context(), "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil {
		t.Fatal(err)
	}
	if ssl {
		t.Error("the connection through the proxy uses TLS")
	}
}

// TestEncryptionRequestsAnsweredN speaks the start of the startup phase by
// hand: an SSLRequest and a GSSEncRequest are each answered 'N', and the
// startup that follows, on the same connection, gets through. pgconn does
// that startup (its DialFunc hands it the connection after the two
// requests), so that it authenticates as the server asks: a server harmless
// starts asks for a SCRAM-SHA-256 password, which a startup written by hand
// would have to implement, and one named by a DSN may trust every login.
func TestEncryptionRequestsAnsweredN(t *testing.T) {
	e := setup(t)
	cfg, err := pgconn.ParseConfig(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing but a plaintext startup on the connection the dial returns:
	// no TLS of pgconn's own, no fallback to another connection.
	cfg.TLSConfig, cfg.Fallbacks = nil, nil
	cfg.RuntimeParams["application_name"] = e.appPrefix
	dials := 0
	listener := e.addr(t)
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials++
		if addr != listener {
			return nil, fmt.Errorf("dial %s, want the proxy at %s", addr, listener)
		}
		nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if err := encryptionRequestsAnsweredN(nc); err != nil {
			nc.Close()
			return nil, err
		}
		return nc, nil
	}
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("startup after the encryption requests: %v", err)
	}
	defer conn.Close(context.Background())
	if dials != 1 {
		t.Errorf("%d dials, want 1", dials)
	}
	if err := conn.Exec(ctx, "SELECT 1").Close(); err != nil {
		t.Fatalf("a query after the startup: %v", err)
	}
}

// encryptionRequestsAnsweredN sends an SSLRequest and then a GSSEncRequest
// on nc and returns an error unless each is answered 'N', the single byte
// of a server that declines.
func encryptionRequestsAnsweredN(nc net.Conn) error {
	if err := nc.SetDeadline(time.Now().Add(testTimeout)); err != nil {
		return fmt.Errorf("set deadline: %w", err)
	}
	fe := pgproto3.NewFrontend(nc, nc)
	for _, req := range []pgproto3.FrontendMessage{&pgproto3.SSLRequest{}, &pgproto3.GSSEncRequest{}} {
		fe.Send(req)
		if err := fe.Flush(); err != nil {
			return fmt.Errorf("send %T: %w", req, err)
		}
		answer := make([]byte, 1)
		if _, err := io.ReadFull(nc, answer); err != nil {
			return fmt.Errorf("read the answer to %T: %w", req, err)
		}
		if answer[0] != 'N' {
			return fmt.Errorf("%T answered %q, want 'N'", req, answer)
		}
	}
	// pgconn sets its own deadlines from here on.
	if err := nc.SetDeadline(time.Time{}); err != nil {
		return fmt.Errorf("clear deadline: %w", err)
	}
	return nil
}

func TestCancelRequestIsForwarded(t *testing.T) {
	e := setup(t)
	cfg, err := pgx.ParseConfig(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	// pgx's default on a cancelled context is to set a deadline on the
	// socket; ask for a cancel request instead, with the deadline later.
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: 5 * time.Second}
	}
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err = conn.Exec(ctx, "SELECT pg_sleep(10)")
	if sqlState(err) != "57014" {
		t.Fatalf("cancelled pg_sleep: %v, want SQLSTATE 57014 (query_canceled): the cancel request did not reach the server", err)
	}
}

// cutCommit arms a cut at point on the test's connections, runs commit
// on a new one, and checks that the commit failed and that the cut fired
// once, on that connection's backend. It waits for the backend to go.
func (e env) cutCommit(t *testing.T, at pgproxy.Point, commit func(*pgx.Conn) error) {
	t.Helper()
	f := e.arm(t, pgproxy.Rule{Scope: pgproxy.Scope{Client: e.client}, At: at, Action: pgproxy.Cut})
	conn := e.connect(t, "")
	pid := int(conn.PgConn().PID())
	err := commit(conn)
	if err == nil {
		t.Fatal("the client saw its commit succeed through a cut")
	}
	t.Logf("the client's COMMIT: %v", err)
	if fired(t, f) != 1 || !slices.Equal(f.PIDs(), []int{pid}) {
		t.Errorf("fired %d times on %v, want once on [%d]", fired(t, f), f.PIDs(), pid)
	}
	e.waitGone(t, f)
}

func TestCutBeforeCommitRollsBack(t *testing.T) {
	e := setup(t)
	e.cutCommit(t, pgproxy.BeforeCommit, func(conn *pgx.Conn) error { return e.insertAndCommit(t, conn, 1) })
	if ids := e.rows(t); len(ids) != 0 {
		t.Errorf("rows %v committed, want none: the server never saw the COMMIT", ids)
	}
}

func TestCutBeforeCommitOverExtendedProtocol(t *testing.T) {
	for _, tt := range []struct {
		name   string
		commit func(ctx context.Context, pc *pgconn.PgConn) error
	}{
		{"unnamed statement", func(ctx context.Context, pc *pgconn.PgConn) error {
			return pc.ExecParams(ctx, "COMMIT", nil, nil, nil, nil).Read().Err
		}},
		{"prepared statement", func(ctx context.Context, pc *pgconn.PgConn) error {
			if _, err := pc.Prepare(ctx, "harmless_commit", "  End Transaction ;", nil); err != nil {
				return err
			}
			return pc.ExecPrepared(ctx, "harmless_commit", nil, nil, nil).Read().Err
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := setup(t)
			e.cutCommit(t, pgproxy.BeforeCommit, func(conn *pgx.Conn) error {
				ctx := t.Context()
				if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
					t.Fatal(err)
				}
				if _, err := conn.Exec(ctx, "INSERT INTO "+e.schema+".t (id) VALUES ($1)", 1); err != nil {
					t.Fatal(err)
				}
				return tt.commit(ctx, conn.PgConn())
			})
			if ids := e.rows(t); len(ids) != 0 {
				t.Errorf("rows %v committed, want none", ids)
			}
		})
	}
}

// TestCutAfterCommitCompleteIsAnAmbiguousCommit: the client's COMMIT
// fails, yet the row is there.
func TestCutAfterCommitCompleteIsAnAmbiguousCommit(t *testing.T) {
	e := setup(t)
	e.cutCommit(t, pgproxy.AfterCommitComplete, func(conn *pgx.Conn) error { return e.insertAndCommit(t, conn, 7) })
	if ids := e.rows(t); !slices.Equal(ids, []int{7}) {
		t.Errorf("rows %v, want [7]: the server committed before the cut", ids)
	}
}

func TestCommitOfNoTransactionDoesNotFireAfterCommitComplete(t *testing.T) {
	e := setup(t)
	f := e.arm(t, pgproxy.Rule{Scope: pgproxy.Scope{Client: e.client}, At: pgproxy.AfterCommitComplete, Action: pgproxy.Cut})
	conn := e.connect(t, "")
	// COMMIT with no transaction open only warns; a failed transaction's
	// COMMIT completes as ROLLBACK. Neither commits anything.
	if _, err := conn.Exec(t.Context(), "COMMIT"); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), "SELECT 1/0"); err == nil {
		t.Fatal("1/0 succeeded")
	}
	if err := tx.Commit(t.Context()); !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("commit of a failed transaction: %v, want %v", err, pgx.ErrTxCommitRollback)
	}
	if err := conn.Ping(t.Context()); err != nil {
		t.Fatalf("the connection was cut: %v", err)
	}
	if fired(t, f) != 0 {
		t.Errorf("fired %d times, want 0", fired(t, f))
	}
}

// TestCutAfterStatement runs the reference transaction (BEGIN; claim
// INSERT; effect; COMMIT) with a cut after its first statement: the effect
// never runs, nothing is committed.
func TestCutAfterStatement(t *testing.T) {
	e := setup(t)
	e.exec(t, "CREATE SEQUENCE "+e.schema+".effect_ran")
	store := e.referenceStore(t)
	f := e.arm(t, pgproxy.Rule{Scope: pgproxy.Scope{Client: e.client}, At: pgproxy.AfterStatement, N: 1, Action: pgproxy.Cut})
	_, err := store.Process(t.Context(), event("1"), func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT nextval('"+e.schema+".effect_ran')")
		return err
	})
	if err == nil {
		t.Fatal("the delivery succeeded through a cut")
	}
	if fired(t, f) != 1 {
		t.Errorf("fired %d times, want 1", fired(t, f))
	}
	e.waitGone(t, f)
	var called bool
	if err := e.direct.QueryRow(t.Context(), "SELECT is_called FROM "+e.schema+".effect_ran").Scan(&called); err != nil {
		t.Fatal(err)
	}
	if called {
		t.Error("the effect, the second statement, ran")
	}
	var markers int
	if err := e.direct.QueryRow(t.Context(), "SELECT count(*) FROM "+e.schema+".processed_events").Scan(&markers); err != nil {
		t.Fatal(err)
	}
	if markers != 0 {
		t.Errorf("%d markers committed, want 0", markers)
	}
}

// TestScopes: a rule scoped to a client cuts the connections that came in
// on that client's listener, and only those, whatever application_name
// each carries: the bystander, another client, says it is the victim.
func TestScopes(t *testing.T) {
	e := setup(t)
	victim := faulttest.ConnectTo(t, e.dsnOf(t, "victim"), "bystander")
	bystander := faulttest.ConnectTo(t, e.dsnOf(t, "bystander"), "victim")

	f := e.arm(t, pgproxy.Rule{Scope: pgproxy.Scope{Client: "victim"}, At: pgproxy.BeforeCommit, Action: pgproxy.Cut})
	if err := e.insertAndCommit(t, bystander, 100); err != nil {
		t.Fatalf("the bystander's commit: %v", err)
	}
	if fired(t, f) != 0 {
		t.Fatalf("fired on the bystander")
	}
	if err := e.insertAndCommit(t, victim, 101); err == nil {
		t.Fatal("the victim's commit got through")
	}
	if pids := f.PIDs(); !slices.Equal(pids, []int{int(victim.PgConn().PID())}) {
		t.Errorf("cut %v, want the victim's backend %d", pids, victim.PgConn().PID())
	}
	e.waitGone(t, f)
	if err := bystander.Ping(t.Context()); err != nil {
		t.Errorf("the bystander's connection: %v", err)
	}
	if ids := e.rows(t); slices.Contains(ids, 101) || !slices.Contains(ids, 100) {
		t.Errorf("rows %v, want 100 and not 101", ids)
	}
}

func TestTimesLimitsFirings(t *testing.T) {
	e := setup(t)
	f := e.arm(t, pgproxy.Rule{Scope: pgproxy.Scope{Client: e.client}, At: pgproxy.BeforeCommit, Action: pgproxy.Cut, Times: 1})
	if err := e.insertAndCommit(t, e.connect(t, "-1"), 1); err == nil {
		t.Fatal("the first commit got through")
	}
	if err := e.insertAndCommit(t, e.connect(t, "-2"), 2); err != nil {
		t.Fatalf("the second commit, after the rule's one firing: %v", err)
	}
	if fired(t, f) != 1 || len(f.PIDs()) != 1 {
		t.Errorf("fired %d times, want 1", fired(t, f))
	}
	e.waitGone(t, f)
	if ids := e.rows(t); !slices.Equal(ids, []int{2}) {
		t.Errorf("rows %v, want [2]", ids)
	}
}

func TestCloseEndsEverything(t *testing.T) {
	e := setup(t)
	idle := e.connect(t, "-idle")
	inTx := e.connect(t, "-in-tx")
	if _, err := inTx.Exec(t.Context(), "BEGIN"); err != nil {
		t.Fatal(err)
	}
	// A client that connected and said nothing.
	mute, err := net.Dial("tcp", e.addr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()

	closed := make(chan error, 1)
	go func() { closed <- e.proxy.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Close did not return")
	}
	for name, c := range map[string]*pgx.Conn{"idle": idle, "in a transaction": inTx} {
		if err := c.Ping(t.Context()); err == nil {
			t.Errorf("the %s connection still works after Close", name)
		}
	}
	if err := mute.SetReadDeadline(time.Now().Add(testTimeout)); err != nil {
		t.Fatal(err)
	}
	if _, err := mute.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Error("the mute client's connection is still open after Close")
	}
	if _, err := net.Dial("tcp", e.addr(t)); err == nil {
		t.Error("the proxy still accepts connections after Close")
	}
	if err := e.proxy.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// setup's leak check runs when the test ends.
}

func TestSetUpstreamRedirectsNewConnections(t *testing.T) {
	dsn := pgtest.DSN(t)
	checkLeaks(t)
	// An address where nothing listens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()

	l, err := newProxy(t).Listen("app", dead)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(l.Addr())
	p, _ := strconv.Atoi(port)
	cfg.Host, cfg.Port, cfg.Fallbacks = host, uint16(p), nil
	if _, err := pgx.ConnectConfig(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "cannot reach the upstream server") {
		t.Fatalf("connect to a dead upstream: %v", err)
	}
	if err := l.SetUpstream(upstreamOf(t, dsn)); err != nil {
		t.Fatal(err)
	}
	if l.Upstream() != upstreamOf(t, dsn) {
		t.Errorf("Upstream() = %s after SetUpstream(%s)", l.Upstream(), upstreamOf(t, dsn))
	}
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := l.SetUpstream("no port"); err == nil {
		t.Error("SetUpstream took an address without a port")
	}
}

func TestListenOnlyOnLoopback(t *testing.T) {
	checkLeaks(t)
	p := newProxy(t)
	l, err := p.Listen("app", "127.0.0.1:5432")
	if err != nil {
		t.Fatal(err)
	}
	if host, _, _ := net.SplitHostPort(l.Addr()); !net.ParseIP(host).IsLoopback() {
		t.Errorf("listening on %s", l.Addr())
	}
	if l.Client() != "app" || l.Upstream() != "127.0.0.1:5432" {
		t.Errorf("listener of client %q to %s, want app's to 127.0.0.1:5432", l.Client(), l.Upstream())
	}
	if _, err := p.Listen("app", "nowhere"); err == nil {
		t.Error("Listen took an upstream without a port")
	}
	if _, err := p.Listen("", "127.0.0.1:5432"); err == nil {
		t.Error("Listen took a listener without a client")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Listen("app", "127.0.0.1:5432"); err == nil {
		t.Error("Listen opened a listener on a closed proxy")
	}
}

func TestArmRefusesBadRules(t *testing.T) {
	checkLeaks(t)
	p := newProxy(t)
	for _, r := range []pgproxy.Rule{
		{},
		{At: pgproxy.BeforeCommit},
		{At: "somewhere", Action: pgproxy.Cut},
		{At: pgproxy.AfterStatement, Action: pgproxy.Cut},
		{At: pgproxy.BeforeCommit, Action: pgproxy.Cut, N: 2},
		{At: pgproxy.BeforeCommit, Action: "delay"},
		{At: pgproxy.BeforeCommit, Action: pgproxy.Cut, Times: -1},
	} {
		if _, err := p.Arm(r); err == nil {
			t.Errorf("Arm(%+v) took it", r)
		}
	}
	f, err := p.Arm(pgproxy.Rule{At: pgproxy.AfterStatement, N: 2, Action: pgproxy.Cut, Times: 3,
		Scope: pgproxy.Scope{Client: "instance 2"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `cut after statement 2 on the connections of instance 2, at most 3 times`; f.String() != want {
		t.Errorf("String() = %q, want %q", f.String(), want)
	}
	if want := "proxy:cut@after-statement"; f.Kind() != want {
		t.Errorf("Kind() = %q, want %q", f.Kind(), want)
	}
}

func TestDSN(t *testing.T) {
	checkLeaks(t)
	p := newProxy(t)
	// listener is the address of client's listener to upstream.
	listener := func(client, upstream string) string {
		for _, l := range p.Listeners(client) {
			if l.Upstream() == upstream {
				return l.Addr()
			}
		}
		t.Fatalf("client %s has no listener to %s", client, upstream)
		return ""
	}
	for _, tt := range []struct {
		in                            string
		upstreams                     []string
		user, password, database, app string
	}{
		{"postgres://alice:s%40cret@db.example:6543/shop?sslmode=disable&application_name=x", []string{"db.example:6543"}, "alice", "s@cret", "shop", "x"},
		{"postgresql://alice@h1:1,h2:2/shop?target_session_attrs=read-write", []string{"h1:1", "h2:2"}, "alice", "", "shop", ""},
		{"postgres://alice@h", []string{"h:5432"}, "alice", "", "", ""},
		{"postgres://?@h?application_name=q", []string{"h:5432"}, "?", "", "", "q"},
		{"host=db.example port=6543 user=alice password='s p\\'a\\\\ce' dbname=shop application_name=z", []string{"db.example:6543"}, "alice", "s p'a\\ce", "shop", "z"},
		{"host=db.example hostaddr=10.0.0.1 user=alice dbname = shop sslmode=prefer", []string{"db.example:5432"}, "alice", "", "shop", ""},
		{"host=a,b port=1,2 user=alice dbname=shop target_session_attrs=read-write", []string{"a:1", "b:2"}, "alice", "", "shop", ""},
	} {
		got, err := p.DSN("app", tt.in)
		if err != nil {
			t.Errorf("DSN(%q): %v", tt.in, err)
			continue
		}
		cfg, err := pgconn.ParseConfig(got)
		if err != nil {
			t.Errorf("DSN(%q) = %q, which does not parse: %v", tt.in, got, err)
			continue
		}
		var hosts []string
		for _, h := range append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port}}, cfg.Fallbacks...) {
			if a := net.JoinHostPort(h.Host, strconv.Itoa(int(h.Port))); !slices.Contains(hosts, a) {
				hosts = append(hosts, a)
			}
		}
		var want []string
		for _, up := range tt.upstreams {
			want = append(want, listener("app", up))
		}
		if !slices.Equal(hosts, want) {
			t.Errorf("DSN(%q) = %q: hosts %v, want the listeners %v, for %v in that order", tt.in, got, hosts, want, tt.upstreams)
		}
		if cfg.User != tt.user || cfg.Password != tt.password || cfg.Database != tt.database || cfg.RuntimeParams["application_name"] != tt.app {
			t.Errorf("DSN(%q) = %q: user %q password %q database %q application_name %q", tt.in, got, cfg.User, cfg.Password, cfg.Database, cfg.RuntimeParams["application_name"])
		}
		if strings.Contains(tt.in, "target_session_attrs") && cfg.ValidateConnect == nil {
			t.Errorf("DSN(%q) = %q lost target_session_attrs", tt.in, got)
		}
		if strings.Contains(got, "hostaddr") {
			t.Errorf("DSN(%q) = %q kept hostaddr", tt.in, got)
		}
	}
	// One listener per client and upstream: asked again, the same ones; for
	// another client, others.
	again, err := p.DSN("app", "postgres://alice@h2:2,h1:1/shop")
	if err != nil {
		t.Fatal(err)
	}
	if want := "postgres://alice@" + listener("app", "h2:2") + "," + listener("app", "h1:1") + "/shop"; again != want {
		t.Errorf("DSN of the same hosts in another order = %q, want %q", again, want)
	}
	other, err := p.DSN("other", "postgres://alice@h1:1/shop")
	if err != nil {
		t.Fatal(err)
	}
	if other == "postgres://alice@"+listener("app", "h1:1")+"/shop" || len(p.Listeners("other")) != 1 {
		t.Errorf("client other got %q and %d listeners; want one listener of its own", other, len(p.Listeners("other")))
	}
	// The URL's other parameters stay byte for byte: re-encoded, "%20"
	// would become "+", which libpq reads as a plus.
	in := "postgres://alice@h:1/shop?application_name=a%20b&host=other&options=-c%20x%3Dy"
	got, err := p.DSN("app", in)
	if want := "postgres://alice@" + listener("app", "other:1") + "/shop?application_name=a%20b&options=-c%20x%3Dy"; err != nil || got != want {
		t.Errorf("DSN(%q) = %q, %v; want %q", in, got, err, want)
	}
	for _, in := range []string{
		"postgres://h/db?sslmode=require",
		"host=h sslmode=verify-full",
		"host=h sslmode='verify-ca'",
		"host=h sslnegotiation=direct sslmode=require",
		"host=h password='unterminated",
		"host",
	} {
		if got, err := p.DSN("app", in); err == nil {
			t.Errorf("DSN(%q) = %q, want an error", in, got)
		}
	}
	// A server named by its Unix-domain socket directory is reached over
	// that socket; the client still gets a TCP listener.
	in = "postgres://alice@/shop?host=/var/run/postgresql&port=5433"
	if got, err := p.DSN("app", in); err != nil || got != "postgres://alice@"+listener("app", "/var/run/postgresql/.s.PGSQL.5433")+"/shop" {
		t.Errorf("DSN(%q) = %q, %v; want the listener for the socket /var/run/postgresql/.s.PGSQL.5433", in, got, err)
	}
}

// TestStartupPacketLimits: the proxy drops a client whose first message
// is no startup packet, and goes on serving others.
func TestStartupPacketLimits(t *testing.T) {
	e := setup(t)
	for _, junk := range [][]byte{
		binary.BigEndian.AppendUint32(nil, 1<<20), // too long
		{0, 0, 0, 8, 0, 0, 0, 1},                  // unknown code
		[]byte("GET / HTTP/1.1\r\n\r\n"),
	} {
		nc, err := net.Dial("tcp", e.addr(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.SetDeadline(time.Now().Add(testTimeout)); err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(junk); err != nil {
			t.Fatal(err)
		}
		if n, err := nc.Read(make([]byte, 64)); err == nil {
			t.Errorf("after %q the proxy answered %d bytes", junk, n)
		}
		nc.Close()
	}
	if err := e.connect(t, "").Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func event(id string) adapters.Event {
	return adapters.Event{Namespace: "pgproxy-test", ID: id, Payload: []byte("payload")}
}

// referenceStore is a reference implementation whose pool goes through the
// proxy, its connections named with the test's prefix, and its table in
// the test's schema.
func (e env) referenceStore(t testing.TB) *reference.Store {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = e.appPrefix
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store := reference.NewStore(pool, reference.Config{Schema: e.name})
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return store
}

// BenchmarkReferenceTx runs the reference implementation's transaction
// (BEGIN; claim INSERT ... ON CONFLICT DO NOTHING RETURNING; effect INSERT;
// COMMIT), each on a new event, straight to the server and through a proxy
// with no rule armed, from 1 and from 8 concurrent clients. ns/op is wall
// time over transactions (throughput); latency-ns/tx is the mean time one
// transaction takes.
func BenchmarkReferenceTx(b *testing.B) {
	dsn := pgtest.DSN(b)
	ctx := context.Background()
	direct, err := pgxpool.New(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	schema := "harmless_bench_pgproxy_" + faulttest.Unique(b)
	quoted := pgx.Identifier{schema}.Sanitize()
	if _, err := direct.Exec(ctx, "CREATE SCHEMA "+quoted+"; CREATE TABLE "+quoted+".effects (id text NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if _, err := direct.Exec(ctx, "DROP SCHEMA "+quoted+" CASCADE"); err != nil {
			b.Error(err)
		}
	}()
	if err := reference.NewStore(direct, reference.Config{Schema: schema}).Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	pdsn := proxyDSN(b, dsn)
	for _, clients := range []int{1, 8} {
		for _, via := range []struct{ name, dsn string }{{"direct", dsn}, {"proxy", pdsn}} {
			b.Run(fmt.Sprintf("clients=%d/%s", clients, via.name), func(b *testing.B) {
				benchReferenceTx(b, via.dsn, schema, clients)
			})
		}
	}
}

func benchReferenceTx(b *testing.B, dsn, schema string, clients int) {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = int32(clients)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	store := reference.NewStore(pool, reference.Config{Schema: schema})
	insertEffect := "INSERT INTO " + pgx.Identifier{schema, "effects"}.Sanitize() + " (id) VALUES ($1)"
	prefix := faulttest.Unique(b) + "-"
	var latency atomic.Int64
	// run delivers n new events from the clients.
	run := func(n int, tag string, measure bool) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for i := next.Add(1); i <= int64(n); i = next.Add(1) {
					id := prefix + tag + strconv.FormatInt(i, 10)
					start := time.Now()
					_, err := store.Process(ctx, event(id), func(ctx context.Context, tx pgx.Tx) error {
						_, err := tx.Exec(ctx, insertEffect, id)
						return err
					})
					if err != nil {
						b.Error(err)
						return
					}
					if measure {
						latency.Add(int64(time.Since(start)))
					}
				}
			})
		}
		wg.Wait()
	}
	// Warm up: open every connection and prepare its statements.
	run(4*clients, "warm-", false)
	b.ResetTimer()
	run(b.N, "", true)
	b.StopTimer()
	b.ReportMetric(float64(latency.Load())/float64(b.N), "latency-ns/tx")
}

// BenchmarkRoundTrip measures one round trip (a prepared SELECT 1) straight
// to the server and through a proxy: what the proxy adds to each of a
// transaction's round trips.
func BenchmarkRoundTrip(b *testing.B) {
	dsn := pgtest.DSN(b)
	pdsn := proxyDSN(b, dsn)
	for _, via := range []struct{ name, dsn string }{{"direct", dsn}, {"proxy", pdsn}} {
		b.Run(via.name, func(b *testing.B) {
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, via.dsn)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close(ctx)
			var one int
			for b.Loop() {
				if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestStatementsTellAutocommitFromTransactions: a rule counts the
// statements completed on the connections in its scope, inside a
// transaction block and outside one, so that a fault at a transaction's
// point that did not fire can be told from one the implementation gave no
// chance: it never opened a transaction.
func TestStatementsTellAutocommitFromTransactions(t *testing.T) {
	e := setup(t)
	f := e.arm(t, pgproxy.Rule{Scope: pgproxy.Scope{Client: e.client}, At: pgproxy.BeforeCommit, Action: pgproxy.Cut})
	other := e.arm(t, pgproxy.Rule{Scope: pgproxy.Scope{Client: "nobody"}, At: pgproxy.BeforeCommit, Action: pgproxy.Cut})
	conn := e.connect(t, "")
	for range 3 {
		if _, err := conn.Exec(t.Context(), "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	if in, out := f.Statements(); in != 0 || out != 3 {
		t.Errorf("after three statements in autocommit: %d in a transaction, %d outside; want 0 and 3", in, out)
	}
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if in, out := f.Statements(); in != 1 || out != 3 {
		t.Errorf("after a statement in a transaction block: %d in a transaction, %d outside; want 1 and 3", in, out)
	}
	if in, out := other.Statements(); in != 0 || out != 0 {
		t.Errorf("a rule whose scope holds no connection counted %d and %d statements; want none", in, out)
	}
}

// TestWithinCutsOnlyTheTransactionThatMentionsIt: a rule confined to the
// transactions that mention a text fires at the COMMIT of such a
// transaction, not at the COMMIT of one before it that does not (a lease
// or a claim committed on its own), nor after a ROLLBACK of one that did.
func TestWithinCutsOnlyTheTransactionThatMentionsIt(t *testing.T) {
	for _, at := range []pgproxy.Point{pgproxy.AfterCommitComplete, pgproxy.BeforeCommit} {
		t.Run(string(at), func(t *testing.T) {
			e := setup(t)
			e.exec(t, "CREATE TABLE "+e.schema+".leases (id int)")
			e.exec(t, "CREATE TABLE "+e.schema+".effects_here (id int)")
			f := e.arm(t, pgproxy.Rule{Scope: pgproxy.Scope{Client: e.client}, At: at, Action: pgproxy.Cut, Times: 1, Within: "effects_here"})
			conn := e.connect(t, "")
			ctx := t.Context()
			inTx := func(sql string, commit bool) error {
				tx, err := conn.Begin(ctx)
				if err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, sql, 1); err != nil {
					return err
				}
				if !commit {
					return tx.Rollback(ctx)
				}
				return tx.Commit(ctx)
			}
			if err := inTx("INSERT INTO "+e.schema+".leases VALUES ($1)", true); err != nil || fired(t, f) != 0 {
				t.Fatalf("the lease's transaction: %v, fired %d; want committed, not cut", err, fired(t, f))
			}
			if err := inTx("INSERT INTO "+e.schema+".effects_here VALUES ($1)", false); err != nil {
				t.Fatal(err)
			}
			if err := inTx("INSERT INTO "+e.schema+".leases VALUES ($1)", true); err != nil || fired(t, f) != 0 {
				t.Fatalf("after a rolled-back mention, the lease's transaction: %v, fired %d; want committed, not cut", err, fired(t, f))
			}
			if err := inTx("INSERT INTO "+e.schema+".effects_here VALUES ($1)", true); err == nil || fired(t, f) != 1 {
				t.Fatalf("the effect's transaction: %v, fired %d; want it cut at %s", err, fired(t, f), at)
			}
		})
	}
}

// TestWithinFiresOnAnAutocommittedStatement: a statement that mentions the
// rule's text outside a transaction block commits on its own; the rule
// cuts before it reaches the server (nothing committed), or after the
// server committed it and before the client hears so (the ambiguous
// commit of a one-statement claim and effect). A statement that failed
// committed nothing, and is not cut after.
func TestWithinFiresOnAnAutocommittedStatement(t *testing.T) {
	for _, tc := range []struct {
		at        pgproxy.Point
		committed bool
	}{{pgproxy.BeforeCommit, false}, {pgproxy.AfterCommitComplete, true}} {
		t.Run(string(tc.at), func(t *testing.T) {
			e := setup(t)
			e.exec(t, "CREATE TABLE "+e.schema+".effects_here (id int PRIMARY KEY)")
			f := e.arm(t, pgproxy.Rule{Scope: pgproxy.Scope{Client: e.client}, At: tc.at, Action: pgproxy.Cut, Times: 1, Within: "effects_here"})
			conn := e.connect(t, "")
			ctx := t.Context()
			if _, err := conn.Exec(ctx, "SELECT 1"); err != nil || fired(t, f) != 0 {
				t.Fatalf("a statement that does not mention the text: %v, fired %d; want it through", err, fired(t, f))
			}
			if tc.at == pgproxy.AfterCommitComplete {
				e.exec(t, "INSERT INTO "+e.schema+".effects_here VALUES (2)")
				if _, err := conn.Exec(ctx, "INSERT INTO "+e.schema+".effects_here VALUES ($1)", 2); err == nil || fired(t, f) != 0 {
					t.Fatalf("a statement that failed: %v, fired %d; want its error, not a cut", err, fired(t, f))
				}
			}
			_, err := conn.Exec(ctx, "INSERT INTO "+e.schema+".effects_here VALUES ($1)", 1)
			if err == nil || fired(t, f) != 1 {
				t.Fatalf("the autocommitted effect: %v, fired %d; want it cut", err, fired(t, f))
			}
			e.waitGone(t, f)
			var n int
			if err := e.direct.QueryRow(ctx, "SELECT count(*) FROM "+e.schema+".effects_here WHERE id = 1").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if committed := n == 1; committed != tc.committed {
				t.Errorf("the statement cut %s committed: %t; want %t", tc.at, committed, tc.committed)
			}
		})
	}
}

// TestBeginOverTheExtendedProtocol: a driver that sends BEGIN as a
// prepared statement, pipelined with the block's first statement in one
// Sync, as pgjdbc does at its default settings, opens a block all the
// same: a rule at BeforeCommit confined to the transactions that mention a
// text lets the statement through and cuts the COMMIT, not the statement
// as if it committed on its own; and after a ROLLBACK sent so, a statement
// outside a block is autocommitted again.
func TestBeginOverTheExtendedProtocol(t *testing.T) {
	e := setup(t)
	e.exec(t, "CREATE TABLE "+e.schema+".effects_here (id int PRIMARY KEY)")
	f := e.arm(t, pgproxy.Rule{Scope: pgproxy.Scope{Client: e.client}, At: pgproxy.BeforeCommit, Action: pgproxy.Cut, Times: 2, Within: "effects_here"})
	conn := e.connect(t, "")
	ctx := t.Context()
	pc := conn.PgConn()
	block := func(id int) error {
		b := &pgconn.Batch{}
		b.ExecParams("BEGIN", nil, nil, nil, nil)
		b.ExecParams("INSERT INTO "+e.schema+".effects_here VALUES ($1)", [][]byte{[]byte(strconv.Itoa(id))}, nil, nil, nil)
		_, err := pc.ExecBatch(ctx, b).ReadAll()
		return err
	}
	if err := block(1); err != nil || fired(t, f) != 0 {
		t.Fatalf("BEGIN and the statement in one pipeline: %v, fired %d; want them through", err, fired(t, f))
	}
	if err := pc.ExecParams(ctx, "ROLLBACK", nil, nil, nil, nil).Read().Err; err != nil || fired(t, f) != 0 {
		t.Fatalf("ROLLBACK: %v, fired %d; want it through", err, fired(t, f))
	}
	if err := pc.ExecParams(ctx, "INSERT INTO "+e.schema+".effects_here VALUES (2)", nil, nil, nil, nil).Read().Err; err == nil || fired(t, f) != 1 {
		t.Fatalf("after the ROLLBACK, a statement outside a block: %v, fired %d; want it cut before its implicit COMMIT", err, fired(t, f))
	}
	e.waitGone(t, f)

	conn = e.connect(t, "")
	pc = conn.PgConn()
	if err := block(3); err != nil || fired(t, f) != 1 {
		t.Fatalf("BEGIN and the statement in one pipeline: %v, fired %d; want them through", err, fired(t, f))
	}
	if err := pc.ExecParams(ctx, "COMMIT", nil, nil, nil, nil).Read().Err; err == nil || fired(t, f) != 2 {
		t.Fatalf("COMMIT: %v, fired %d; want it cut", err, fired(t, f))
	}
	e.waitGone(t, f)
	var n int
	if err := e.direct.QueryRow(ctx, "SELECT count(*) FROM "+e.schema+".effects_here").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d rows committed; want none: the block was rolled back, the autocommitted statement and the last COMMIT cut before the server saw them", n)
	}
}
