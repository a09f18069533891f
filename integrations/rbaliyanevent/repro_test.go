package rbaliyanevent_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/rbaliyan/event/v3/idempotency"
	"github.com/rbaliyan/event/v3/transaction"
)

// These tests reproduce, with rbaliyan/event and pgx alone (no harness),
// the causes of the rules its PostgreSQL idempotency store fails. Each
// passes while the library behaves so.

// message is what the repro's consumer handles: a key, a payload, and
// optionally a pair of channels that hold the handler inside its
// transaction (after the library's duplicate check, before the effect).
type message struct {
	key, payload string
	inHandler    chan<- struct{}
	proceed      <-chan struct{}
}

// consumer is a TransactionalHandler wired as the library's godoc wires
// it: transaction.NewSQLManager(db), idempotency.NewPostgresStore(db), and
// a handler that inserts the effect with the manager's *sql.Tx.
type consumer struct {
	db      *sql.DB
	calls   atomic.Int32
	handler *transaction.TransactionalHandler[message]
}

// newConsumer opens database/sql (pgx's stdlib driver) on $HARMLESS_DSN
// with search_path set to a schema of its own, dropped when the test ends;
// creates the store's table with CreateTable and an effects table.
func newConsumer(t *testing.T) *consumer {
	t.Helper()
	dsn := os.Getenv("HARMLESS_DSN")
	if dsn == "" {
		t.Skip("HARMLESS_DSN is not set: the repro needs a PostgreSQL server")
	}
	ctx := context.Background()
	schema := pgx.Identifier{"rbaliyan_repro_" + strings.ToLower(t.Name())}.Sanitize()
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	if _, err := admin.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = schema
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = db.Close() })
	store, err := idempotency.NewPostgresStore(db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	if err := store.CreateTable(ctx); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE effects (key text NOT NULL, payload text NOT NULL)"); err != nil {
		t.Fatalf("create effects: %v", err)
	}
	manager, err := transaction.NewSQLManager(db)
	if err != nil {
		t.Fatal(err)
	}
	c := &consumer{db: db}
	c.handler = transaction.NewTransactionalHandler(
		func(ctx context.Context, tx transaction.Transaction, m message) error {
			c.calls.Add(1)
			if m.inHandler != nil {
				close(m.inHandler)
				select {
				case <-m.proceed:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			sqlTx := tx.(transaction.SQLTransactionProvider).Tx()
			_, err := sqlTx.ExecContext(ctx, "INSERT INTO effects (key, payload) VALUES ($1, $2)", m.key, m.payload)
			return err
		},
		manager, store,
		func(m message) string { return m.key },
	)
	return c
}

// effects returns the payloads of the effects applied for key.
func (c *consumer) effects(t *testing.T, key string) []string {
	t.Helper()
	rows, err := c.db.QueryContext(context.Background(), "SELECT payload FROM effects WHERE key = $1 ORDER BY payload", key)
	if err != nil {
		t.Fatalf("read effects: %v", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReproConcurrentDeliveriesBothApply shows that TransactionalHandler,
// which its godoc says detects duplicates "atomically (no race
// conditions)", lets two deliveries of one key apply two effects when the
// second arrives while the first is still inside its transaction:
// IsDuplicateTx is a plain SELECT EXISTS that takes no lock and sees no
// uncommitted row, and MarkProcessedTx is an INSERT ... ON CONFLICT
// (message_id) DO UPDATE, so the later marker overwrites the earlier one
// instead of failing. Both Handle calls return nil; it is the same with a
// conflicting payload, and a claimant that fails does not matter since
// the others never waited for it.
//
// Reproduces: concurrent-delivery.one-effect, concurrent-delivery.one-applied, concurrent-delivery.failed-claimant-not-lost, conflicting-payload.no-second-effect
// Cause: the duplicate check is a plain SELECT with no lock and the marker is an upsert, so deliveries that overlap all pass the check and all commit their effect
func TestReproConcurrentDeliveriesBothApply(t *testing.T) {
	for _, tc := range []struct{ name, second string }{
		{"same payload", `{"total":10}`},
		{"conflicting payload", `{"total":99}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newConsumer(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			inHandler, proceed := make(chan struct{}), make(chan struct{})
			first := make(chan error, 1)
			go func() {
				first <- c.handler.Handle(ctx, message{key: "orders/42", payload: `{"total":10}`, inHandler: inHandler, proceed: proceed})
			}()
			// The first delivery has passed IsDuplicateTx and holds its
			// transaction open in the handler.
			select {
			case <-inHandler:
			case <-ctx.Done():
				t.Fatalf("first delivery never reached the handler: %v", ctx.Err())
			}
			if err := c.handler.Handle(ctx, message{key: "orders/42", payload: tc.second}); err != nil {
				t.Fatalf("second delivery: %v", err)
			}
			close(proceed)
			select {
			case err := <-first:
				if err != nil {
					t.Fatalf("first delivery: %v", err)
				}
			case <-ctx.Done():
				t.Fatalf("first delivery did not return: %v", ctx.Err())
			}
			if n := c.calls.Load(); n != 2 {
				t.Fatalf("handler calls = %d, want 2", n)
			}
			got := c.effects(t, "orders/42")
			if len(got) != 2 {
				t.Fatalf("effects = %v, want two: both deliveries applied", got)
			}
			t.Logf("both Handle calls returned nil; effects for orders/42: %v", got)
		})
	}
}

// TestReproConflictingPayloadDuplicate shows that the store keys only on
// the message id: a later copy with the same key and another payload is
// skipped exactly as a duplicate is, Handle returning nil with no sign of
// a conflict.
//
// Reproduces: conflicting-payload.conflict-detected
// Cause: the store compares only the key, so a copy with another payload is skipped as a duplicate with a nil error
func TestReproConflictingPayloadDuplicate(t *testing.T) {
	c := newConsumer(t)
	ctx := context.Background()
	for _, p := range []string{`{"total":10}`, `{"total":99}`} {
		if err := c.handler.Handle(ctx, message{key: "orders/43", payload: p}); err != nil {
			t.Fatalf("deliver %s: %v", p, err)
		}
	}
	if n := c.calls.Load(); n != 1 {
		t.Fatalf("handler calls = %d, want 1: the conflicting copy was skipped", n)
	}
	if got := c.effects(t, "orders/43"); len(got) != 1 || got[0] != `{"total":10}` {
		t.Fatalf("effects = %v, want only the first payload", got)
	}
}

// TestReproKeyTooLong shows that the table CreateTable makes has
// message_id VARCHAR(255) and the store checks no length: a key of 255
// characters works, one of 256 fails at MarkProcessedTx with SQLSTATE
// 22001 on every delivery, after the handler ran, so the transaction rolls
// back and the event is neither applied nor refused as bad input.
//
// Reproduces: bad-input.exactly-once-or-rejected, identity-fidelity.length-kept
// Cause: CreateTable makes message_id VARCHAR(255) and the store checks no length, so a longer key fails with SQLSTATE 22001 on every delivery
func TestReproKeyTooLong(t *testing.T) {
	c := newConsumer(t)
	ctx := context.Background()
	ok := strings.Repeat("k", 255)
	if err := c.handler.Handle(ctx, message{key: ok, payload: "p"}); err != nil {
		t.Fatalf("255-character key: %v", err)
	}
	long := strings.Repeat("k", 256)
	for attempt := 1; attempt <= 2; attempt++ {
		err := c.handler.Handle(ctx, message{key: long, payload: "p"})
		if !isSQLState(err, "22001") {
			t.Fatalf("256-character key, attempt %d: err = %v, want SQLSTATE 22001", attempt, err)
		}
		t.Logf("256-character key, attempt %d: %v", attempt, err)
	}
	if got := c.effects(t, long); len(got) != 0 {
		t.Fatalf("effects = %d, want 0 (rolled back)", len(got))
	}
}

// TestReproKeyNotText shows that the store keeps the key in a text column
// (VARCHAR) and passes it through unchecked: a key with an invalid UTF-8
// byte or a NUL byte fails already at IsDuplicateTx with SQLSTATE 22021 on
// every delivery, so such an event is never applied nor refused as bad
// input, and ids that differ only in such bytes can never be told apart.
//
// Reproduces: bad-input.exactly-once-or-rejected, identity-fidelity.bytes-kept, identity-fidelity.namespace-kept, namespace-isolation.unambiguous-identity
// Cause: the key is stored as text and passed through unchecked, so a key with invalid UTF-8 or a NUL byte fails with SQLSTATE 22021 on every delivery
func TestReproKeyNotText(t *testing.T) {
	c := newConsumer(t)
	ctx := context.Background()
	for _, key := range []string{"a\xff", "caf\xe9", "nul-\x00-id", "orders\x0042"} {
		for attempt := 1; attempt <= 2; attempt++ {
			err := c.handler.Handle(ctx, message{key: key, payload: "p"})
			if !isSQLState(err, "22021") {
				t.Fatalf("key %q, attempt %d: err = %v, want SQLSTATE 22021", key, attempt, err)
			}
			t.Logf("key %q, attempt %d: %v", key, attempt, err)
		}
	}
	if n := c.calls.Load(); n != 0 {
		t.Fatalf("handler calls = %d, want 0", n)
	}
}

func isSQLState(err error, code string) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == code
}
