package faults_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults"
)

// Fail the effect of one event, once, as it is inserted, in a schema of
// the test's own on the test's own database, and check that the fault
// fired.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// The fault points and the ledger they sit on live in the schema:
	// dropping it removes them.
	schema := pgx.Identifier{"orders_test"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		log.Fatal(err)
	}
	defer func() {
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			log.Print(err)
		}
	}()
	if err := faults.Install(ctx, pool, "orders_test"); err != nil {
		log.Fatal(err)
	}

	// Raise when the first effect of event orders/42 is inserted, whatever
	// its delivery attempt.
	fault, err := faults.Arm(ctx, pool, "orders_test", faults.Plan{
		Namespace: "orders",
		ID:        "42",
		Times:     1,
		Point:     faults.AtEffect,
		Action:    faults.Raise,
	})
	if err != nil {
		log.Fatal(err)
	}

	// The code under test applies the event's effect in its transaction:
	// the statement fails, and the transaction with it.
	payload := []byte(`{"total": 10}`)
	_, err = pool.Exec(ctx, "INSERT INTO "+schema+".harmless_effects (namespace, event_id, payload_digest, attempt) VALUES ($1, $2, $3, $4)",
		[]byte("orders"), []byte("42"), adapters.PayloadDigest(payload), 1)
	fmt.Println("injected:", faults.IsInjected(err))

	// A fault that never fired proves nothing.
	fired, err := fault.Fired(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("fired:", fired)
}
