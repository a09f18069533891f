package pgproxy_test

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/faults/pgproxy"
)

// connectNamed opens a connection through dsn that names itself as a
// client chooses: startup is the application_name of its StartupMessage
// (none when empty), and set, when not empty, the one it sets right after
// connecting, as pgjdbc does at its default settings.
func connectNamed(t *testing.T, dsn, startup, set string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	delete(cfg.RuntimeParams, "application_name")
	if startup != "" {
		cfg.RuntimeParams["application_name"] = startup
	}
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if set != "" {
		if _, err := conn.Exec(t.Context(), "SET application_name = '"+set+"'"); err != nil {
			t.Fatal(err)
		}
	}
	return conn
}

// TestAConnectionIsItsListenersClient: whatever a client says about
// itself (its application_name in a SET after the startup, as pgjdbc
// sends it; a name of its own in the startup; no name at all), a rule
// scoped to a client cuts the connections that came in on that client's
// listener, and no other, even one that carries the same name. What the
// proxy saw of each client (connections, statements, names, backends) is
// that client's.
func TestAConnectionIsItsListenersClient(t *testing.T) {
	e := setup(t)
	mine := e.dsnOf(t, "instance 1")
	styles := map[string]*pgx.Conn{
		"a SET after the startup":    connectNamed(t, mine, "", "orders-consumer"),
		"a name of its own":          connectNamed(t, mine, "billing-consumer", ""),
		"no name":                    connectNamed(t, mine, "", ""),
		"its DSN's name, then a SET": connectNamed(t, mine, "harmless-x-i1", "renamed"),
	}
	// Another client that says it is the first one's.
	other := connectNamed(t, e.dsnOf(t, "instance 2"), "billing-consumer", "orders-consumer")

	var pids []int
	for _, c := range styles {
		pids = append(pids, int(c.PgConn().PID()))
	}
	slices.Sort(pids)
	seen := e.proxy.Seen("instance 1")
	if seen.Opened != len(styles) || seen.Open != len(styles) || !slices.Equal(seen.PIDs, pids) {
		t.Errorf("Seen = %+v; want %d connections open, backends %v", seen, len(styles), pids)
	}
	for _, name := range []string{"orders-consumer", "billing-consumer", "harmless-x-i1", "renamed"} {
		if !slices.Contains(seen.ApplicationNames, name) {
			t.Errorf("the application names seen, %q, lack %q", seen.ApplicationNames, name)
		}
	}
	if len(seen.ApplicationNames) != 4 {
		t.Errorf("application names %q; want the 4 the connections carried, no empty one", seen.ApplicationNames)
	}
	if s := e.proxy.Seen("instance 2"); s.Opened != 1 || !slices.Equal(s.PIDs, []int{int(other.PgConn().PID())}) {
		t.Errorf("Seen of instance 2 = %+v; want its one connection", s)
	}
	if s := e.proxy.Seen(""); s.Opened != len(styles)+1 {
		t.Errorf("Seen of every client = %+v; want %d connections", s, len(styles)+1)
	}

	f := e.arm(t, pgproxy.Rule{Scope: pgproxy.Scope{Client: "instance 1"}, At: pgproxy.BeforeCommit, Action: pgproxy.Cut})
	if err := e.insertAndCommit(t, other, 100); err != nil {
		t.Fatalf("the other client's commit: %v", err)
	}
	id := 0
	for style, c := range styles {
		id++
		if err := e.insertAndCommit(t, c, id); err == nil {
			t.Errorf("%s: the commit got through the cut", style)
		}
	}
	if n := fired(t, f); n != int64(len(styles)) {
		t.Errorf("fired %d times, want %d, once per connection of instance 1", n, len(styles))
	}
	if got := slices.Sorted(slices.Values(f.PIDs())); !slices.Equal(got, pids) {
		t.Errorf("cut backends %v, want %v", got, pids)
	}
	e.waitGone(t, f)
	if ids := e.rows(t); !slices.Equal(ids, []int{100}) {
		t.Errorf("rows %v, want only the other client's 100", ids)
	}
	eventually(t, "the cut connections to be counted closed", func() bool { return e.proxy.Seen("instance 1").Open == 0 })
	if s := e.proxy.Seen("instance 1"); s.Opened != len(styles) || len(s.PIDs) != 0 || s.InTransaction < int64(len(styles)) {
		t.Errorf("after the cuts, Seen = %+v; want %d opened, none open, a statement in a transaction on each", s, len(styles))
	}
}

// TestAPoolThatReconnectsStaysTheClients: a pool whose connection was cut
// opens a new one through the same listener, and a rule scoped to the
// client reaches the new connection too.
func TestAPoolThatReconnectsStaysTheClients(t *testing.T) {
	e := setup(t)
	cfg, err := pgxpool.ParseConfig(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	cfg.ConnConfig.RuntimeParams["application_name"] = "pool"
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	insert := func(id int) error {
		return pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(t.Context(), "INSERT INTO "+e.schema+".t (id) VALUES ($1)", id)
			return err
		})
	}
	for round := 1; round <= 3; round++ {
		f := e.arm(t, pgproxy.Rule{Scope: pgproxy.Scope{Client: e.client}, At: pgproxy.AfterStatement, N: 1, Action: pgproxy.Cut, Times: 1})
		if err := insert(round); err == nil || fired(t, f) != 1 {
			t.Fatalf("round %d: the insert: %v, fired %d; want it cut", round, err, fired(t, f))
		}
		e.waitGone(t, f)
		// The pool drops the broken connection and opens another.
		if err := insert(10 + round); err != nil {
			t.Fatalf("round %d: the insert after the cut: %v", round, err)
		}
	}
	if ids := e.rows(t); !slices.Equal(ids, []int{11, 12, 13}) {
		t.Errorf("rows %v, want 11, 12, 13", ids)
	}
	if s := e.proxy.Seen(e.client); s.Opened != 4 || s.Open != 1 {
		t.Errorf("Seen = %+v; want 4 connections opened, one after each cut, and 1 open", s)
	}
}

// TestTwoInstancesOfOneProgram: two instances of the same program, with
// the same settings and the same application_name, each through a
// listener of its own: a rule scoped to one never fires on the other.
func TestTwoInstancesOfOneProgram(t *testing.T) {
	e := setup(t)
	instances := map[string]*pgx.Conn{}
	for _, client := range []string{"instance 1", "instance 2"} {
		instances[client] = connectNamed(t, e.dsnOf(t, client), "orders-consumer", "")
	}
	f := e.arm(t, pgproxy.Rule{Scope: pgproxy.Scope{Client: "instance 2"}, At: pgproxy.AfterCommitComplete, Action: pgproxy.Cut})
	for id := 1; id <= 5; id++ {
		if err := e.insertAndCommit(t, instances["instance 1"], id); err != nil {
			t.Fatalf("instance 1's commit %d: %v", id, err)
		}
	}
	if fired(t, f) != 0 {
		t.Fatal("the rule scoped to instance 2 fired on instance 1")
	}
	if err := e.insertAndCommit(t, instances["instance 2"], 6); err == nil || fired(t, f) != 1 {
		t.Fatalf("instance 2's commit: %v, fired %d; want it cut", err, fired(t, f))
	}
	e.waitGone(t, f)
	one, two := e.proxy.Seen("instance 1"), e.proxy.Seen("instance 2")
	if one.InTransaction != 5 || two.InTransaction != 1 {
		t.Errorf("statements in transactions: %d on instance 1, %d on instance 2; want 5 and 1", one.InTransaction, two.InTransaction)
	}
}

// machineSocket is the Unix-domain socket of the machine's own PostgreSQL
// service, where it runs (CI starts it): a server that a DSN may name by
// its socket directory rather than by a TCP address.
const machineSocket = "/var/run/postgresql/.s.PGSQL.5432"

// TestAUnixSocketUpstream: a listener forwards to a server reached by its
// Unix-domain socket, so a DSN that names a socket directory works as one
// that names a host and port: the client connects to the listener over
// TCP, the proxy to the server over the socket, and a cut still fires.
func TestAUnixSocketUpstream(t *testing.T) {
	if _, err := os.Stat(machineSocket); err != nil {
		t.Skipf("no PostgreSQL socket at %s on this machine: %v", machineSocket, err)
	}
	p := pgproxy.New()
	t.Cleanup(func() { _ = p.Close() })
	dsn, err := p.DSN("instance 1", "host=/var/run/postgresql port=5432 user=postgres dbname=postgres sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	if ls := p.Listeners("instance 1"); len(ls) != 1 || ls[0].Upstream() != machineSocket {
		t.Fatalf("listeners %v; want one whose upstream is %s", ls, machineSocket)
	}
	conn := connectNamed(t, dsn, "", "")
	var one int
	if err := conn.QueryRow(t.Context(), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 through the proxy to a socket: %d, %v", one, err)
	}
	f, err := p.Arm(pgproxy.Rule{Scope: pgproxy.Scope{Client: "instance 1"}, At: pgproxy.BeforeCommit, Action: pgproxy.Cut, Times: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), "COMMIT"); err == nil {
		t.Error("COMMIT succeeded: the cut did not fire on a connection to a socket")
	}
	if n, _ := f.Fired(t.Context()); n != 1 {
		t.Errorf("the cut fired %d times; want once", n)
	}
}

// TestListenersOfEveryClient: Listeners("") lists every client's
// listeners, as Seen("") counts every client's connections: the harness
// points them all at a restarted server.
func TestListenersOfEveryClient(t *testing.T) {
	p := pgproxy.New()
	t.Cleanup(func() { _ = p.Close() })
	for _, client := range []string{"instance 1", "instance 2"} {
		if _, err := p.Listen(client, "127.0.0.1:5432"); err != nil {
			t.Fatal(err)
		}
	}
	if all, one := p.Listeners(""), p.Listeners("instance 2"); len(all) != 2 || len(one) != 1 || one[0].Client() != "instance 2" {
		t.Errorf("Listeners(\"\") = %d listeners, Listeners(\"instance 2\") = %d; want 2 and 1", len(all), len(one))
	}
}
