package pgproxy_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
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
