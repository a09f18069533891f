package pgproxy_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harmless-dev/harmless/faults/pgproxy"
)

// Put a proxy in front of the server a DSN names, cut the next connection
// that sends COMMIT before the server sees it, and check that the client's
// commit failed and the cut was counted.
func Example() {
	ctx := context.Background()
	dsn := os.Getenv("DATABASE_URL") // postgres://app@127.0.0.1:5432/app, say

	// The proxy forwards to the server's host:port.
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		log.Fatal(err)
	}
	proxy, err := pgproxy.New(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := proxy.Close(); err != nil {
			log.Print(err)
		}
	}()

	// Cut once, on the connections the code under test names itself by.
	cut, err := proxy.Arm(pgproxy.Rule{
		Scope:  pgproxy.Scope{ApplicationNamePrefix: "orders-consumer"},
		At:     pgproxy.BeforeCommit,
		Action: pgproxy.Cut,
		Times:  1,
	})
	if err != nil {
		log.Fatal(err)
	}

	// The code under test connects through the proxy: the same DSN, with
	// the proxy's address.
	through, err := proxy.DSN(dsn)
	if err != nil {
		log.Fatal(err)
	}
	connCfg, err := pgx.ParseConfig(through)
	if err != nil {
		log.Fatal(err)
	}
	connCfg.RuntimeParams["application_name"] = "orders-consumer-1"
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
// the broker redelivers. A cut that never fired proves nothing; the
// fault's statement counts say whether the code committed in autocommit,
// where no COMMIT passes.
func Example_ambiguousCommit() {
	proxy, err := pgproxy.New("127.0.0.1:5432")
	if err != nil {
		log.Fatal(err)
	}
	defer proxy.Close()
	cut, err := proxy.Arm(pgproxy.Rule{
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

	// ... the code under test handles an event through the proxy ...

	if fired, _ := cut.Fired(context.Background()); fired == 0 {
		inTx, autocommit := cut.Statements()
		fmt.Printf("no cut: %d statements in transactions, %d in autocommit\n", inTx, autocommit)
	}
}

// Cut the connection in the middle of a transaction, after its first
// statement (the claim of the event's marker, say) has completed.
func ExampleRule_afterStatement() {
	proxy, err := pgproxy.New("127.0.0.1:5432")
	if err != nil {
		log.Fatal(err)
	}
	defer proxy.Close()
	if _, err := proxy.Arm(pgproxy.Rule{At: pgproxy.AfterStatement, N: 1, Action: pgproxy.Cut, Times: 1}); err != nil {
		log.Fatal(err)
	}
	// ... the code under test handles an event through the proxy ...
}

// Point code under test that is configured by host and port, here a
// consumer written in another language that reads libpq's environment,
// at the proxy.
func ExampleProxy_Addr() {
	proxy, err := pgproxy.New("127.0.0.1:5432")
	if err != nil {
		log.Fatal(err)
	}
	defer proxy.Close()
	host, port, err := net.SplitHostPort(proxy.Addr())
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
// port: the proxy's address stays, and its new connections go to the
// restarted server.
func ExampleProxy_SetUpstream() {
	proxy, err := pgproxy.New("127.0.0.1:5432")
	if err != nil {
		log.Fatal(err)
	}
	defer proxy.Close()

	// ... crash and restart the server, which now listens on 5433 ...

	if err := proxy.SetUpstream("127.0.0.1:5433"); err != nil {
		log.Fatal(err)
	}
}
