package pgproxy_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/faults/pgproxy"
)

// Put a proxy in front of the server a DSN names, cut the next connection
// of the code under test that sends COMMIT before the server sees it, and
// check that the client's commit failed and the cut was counted. The code
// under test is recognised by the listener it connects to, whatever
// application_name it gives its connections.
func Example() {
	ctx := context.Background()
	dsn := os.Getenv("DATABASE_URL") // postgres://app@127.0.0.1:5432/app, say

	proxy := pgproxy.New()
	defer func() {
		if err := proxy.Close(); err != nil {
			log.Print(err)
		}
	}()

	// The code under test connects through listeners of its own: the same
	// DSN, with their addresses.
	through, err := proxy.DSN("orders-consumer", dsn)
	if err != nil {
		log.Fatal(err)
	}

	// Cut once, on its connections only.
	cut, err := proxy.Arm(pgproxy.Rule{
		Scope:  pgproxy.Scope{Client: "orders-consumer"},
		At:     pgproxy.BeforeCommit,
		Action: pgproxy.Cut,
		Times:  1,
	})
	if err != nil {
		log.Fatal(err)
	}

	connCfg, err := pgx.ParseConfig(through)
	if err != nil {
		log.Fatal(err)
	}
	connCfg.RuntimeParams["application_name"] = "whatever-it-likes"
	conn, err := pgx.ConnectConfig(ctx, connCfg)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)

	tx, err := conn.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		log.Fatal(err)
	}
	// The server never sees the COMMIT: it rolls the transaction back.
	err = tx.Commit(ctx)
	fmt.Println("commit failed:", err != nil)

	fired, err := cut.Fired(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cuts:", fired, "backends cut:", len(cut.PIDs()))
}

// Produce the ambiguous commit: the server commits the transaction that
// writes the orders table, and the connection breaks before the client
// hears of it. The code under test must not apply the effect again when
// the broker redelivers. A cut that never fired proves nothing; what the
// proxy saw of the client says why: no connection through its listeners
// (it connected to the server some other way), or statements in autocommit
// only, where no COMMIT passes.
func Example_ambiguousCommit() {
	proxy := pgproxy.New()
	defer proxy.Close()
	dsn, err := proxy.DSN("consumer", "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	cut, err := proxy.Arm(pgproxy.Rule{
		Scope:  pgproxy.Scope{Client: "consumer"},
		At:     pgproxy.AfterCommitComplete,
		Action: pgproxy.Cut,
		Times:  1,
		// Not the commit of a claim or a lease before it: the one of the
		// transaction that mentions the orders table.
		Within: "orders",
	})
	if err != nil {
		log.Fatal(err)
	}

	// ... the code under test handles an event, connecting with dsn ...
	_ = dsn

	if fired, _ := cut.Fired(context.Background()); fired == 0 {
		seen := proxy.Seen("consumer")
		if seen.Statements() == 0 {
			fmt.Printf("no cut: the code under test never came through the proxy (%d connections, application names %q): it ignored the DSN's hosts\n",
				seen.Opened, seen.ApplicationNames)
			return
		}
		inTx, autocommit := cut.Statements()
		fmt.Printf("no cut: since the rule was armed, %d statements in transactions and %d in autocommit (%d and %d in all)\n",
			inTx, autocommit, seen.InTransaction, seen.Autocommit)
	}
}

// Cut the connection in the middle of a transaction, after its first
// statement (the claim of the event's marker, say).
func ExampleRule_afterStatement() {
	proxy := pgproxy.New()
	defer proxy.Close()
	if _, err := proxy.Arm(pgproxy.Rule{At: pgproxy.AfterStatement, N: 1, Action: pgproxy.Cut, Times: 1}); err != nil {
		log.Fatal(err)
	}
	// ... the code under test handles an event through the proxy ...
}

// Two instances of one program, each connecting through listeners of its
// own: a rule scoped to one never fires on the other, though both send
// the same application_name.
func ExampleScope() {
	proxy := pgproxy.New()
	defer proxy.Close()
	const server = "postgres://app@127.0.0.1:5432/app?application_name=orders"
	first, err := proxy.DSN("instance 1", server)
	if err != nil {
		log.Fatal(err)
	}
	second, err := proxy.DSN("instance 2", server)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := proxy.Arm(pgproxy.Rule{Scope: pgproxy.Scope{Client: "instance 1"}, At: pgproxy.BeforeCommit, Action: pgproxy.Cut, Times: 1}); err != nil {
		log.Fatal(err)
	}
	// ... start the program twice, once with first and once with second ...
	_, _ = first, second
}

// Point code under test that is configured by host and port, here a
// consumer written in another language that reads libpq's environment, at
// a listener of its own.
func ExampleProxy_Listen() {
	proxy := pgproxy.New()
	defer proxy.Close()
	l, err := proxy.Listen("consumer", "127.0.0.1:5432")
	if err != nil {
		log.Fatal(err)
	}
	host, port, err := net.SplitHostPort(l.Addr())
	if err != nil {
		log.Fatal(err)
	}
	consumer := exec.Command("python3", "consumer.py")
	consumer.Env = append(os.Environ(), "PGHOST="+host, "PGPORT="+port)
	if err := consumer.Run(); err != nil {
		log.Fatal(err)
	}
}

// Keep the code under test's DSN across a server restart that moves the
// server to another port, as restarting a container does to its mapped
// port: the listeners' addresses stay, and their new connections go to the
// restarted server.
func ExampleListener_SetUpstream() {
	proxy := pgproxy.New()
	defer proxy.Close()
	dsn, err := proxy.DSN("consumer", "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	_ = dsn // ... the code under test connects with it ...

	// ... crash and restart the server, which now listens on 5433 ...

	for _, l := range proxy.Listeners("consumer") {
		if err := l.SetUpstream("127.0.0.1:5433"); err != nil {
			log.Fatal(err)
		}
		log.Printf("%s's listener %s now leads to %s", l.Client(), l.Addr(), l.Upstream())
	}
}

// Find the server backends of a client's connections in pg_stat_activity
// by the pids the proxy saw, whatever application_name they carry.
func ExampleProxy_Seen() {
	ctx := context.Background()
	proxy := pgproxy.New()
	defer proxy.Close()
	const server = "postgres://app@127.0.0.1:5432/app"
	// ... the code under test connects with proxy.DSN("consumer", server) ...

	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		log.Fatal(err)
	}
	defer admin.Close(ctx)
	seen := proxy.Seen("consumer")
	rows, err := admin.Query(ctx, "SELECT pid, state FROM pg_stat_activity WHERE pid = ANY($1)", seen.PIDs)
	if err != nil {
		log.Fatal(err)
	}
	states, err := pgx.CollectRows(rows, pgx.RowToMap)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d of the consumer's %d connections open: %v\n", len(states), seen.Open, states)
}
