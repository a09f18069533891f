package faults_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

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

// Fail the COMMIT of the transaction that applies an event's effect,
// after everything the code under test did in it, and check that nothing
// of it stayed: the effect rolled back with the rest.
func Example_atCommit() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	// Install has run in schema orders_test, as in the package example.
	if _, err := faults.Arm(ctx, pool, "orders_test", faults.Plan{
		Namespace: "orders", ID: "42", Times: 1, Point: faults.AtCommit, Action: faults.Raise,
	}); err != nil {
		log.Fatal(err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO orders_test.harmless_effects (namespace, event_id, payload_digest, attempt) VALUES ($1, $2, $3, $4)`,
		[]byte("orders"), []byte("42"), adapters.PayloadDigest([]byte(`{"total": 10}`)), 1); err != nil {
		log.Fatal(err)
	}
	err = tx.Commit(ctx)
	fmt.Println("commit failed with the injected error:", faults.IsInjected(err))

	var effects int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM orders_test.harmless_effects").Scan(&effects); err != nil {
		log.Fatal(err)
	}
	fmt.Println("effects:", effects)
}

// Hold the first delivery of an event inside its transaction, without a
// lock, while the test delivers it again, then let it go on: the two
// deliveries overlap for certain, whatever their timing.
func ExampleFault_Open() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	// Held for a minute at most, should the test never open it.
	gate, err := faults.Arm(ctx, pool, "orders_test", faults.Plan{
		Namespace: "orders", ID: "42", Attempt: 1, Point: faults.AtEffect, Action: faults.Gate, Sleep: time.Minute,
	})
	if err != nil {
		log.Fatal(err)
	}

	// ... deliver attempt 1 of orders/42 in the background ...
	for {
		held, err := gate.Held(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if held == 1 {
			break // attempt 1 is inside its transaction, at its effect
		}
		time.Sleep(10 * time.Millisecond)
	}
	// ... deliver attempt 2 while attempt 1 is held ...
	if err := gate.Open(ctx); err != nil {
		log.Fatal(err)
	}
}

// Widen the race window between two concurrent deliveries of one event by
// holding each at its effect for a while; kill the backend of a third
// delivery of the same event as it commits, and of another event's
// claimant that holds the event and then fails; disarm the sleep once the
// race is over, so that later deliveries run at full speed.
func ExampleFault_Disarm() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	arm := func(p faults.Plan) *faults.Fault {
		f, err := faults.Arm(ctx, pool, "orders_test", p)
		if err != nil {
			log.Fatal(err)
		}
		return f
	}
	sleep := arm(faults.Plan{Namespace: "orders", ID: "42", Point: faults.AtEffect, Action: faults.Sleep, Sleep: 200 * time.Millisecond})
	// Attempt 3 only: the server ends the backend, the client sees its
	// connection closed (SQLSTATE 57P01), and the transaction is gone.
	arm(faults.Plan{Namespace: "orders", ID: "42", Attempt: 3, Point: faults.AtCommit, Action: faults.Terminate})
	// The first claimant of orders/43 holds it for a second, then fails:
	// a competitor waiting on its lock must take over.
	arm(faults.Plan{Namespace: "orders", ID: "43", Times: 1, Point: faults.AtEffect, Action: faults.SleepThenRaise, Sleep: time.Second})

	// ... deliver orders/42 twice at once, and so on ...

	if err := sleep.Disarm(ctx); err != nil {
		log.Fatal(err)
	}
	// The firings before the disarm stay counted.
	fired, err := sleep.Fired(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deliveries slowed down:", fired)
}
