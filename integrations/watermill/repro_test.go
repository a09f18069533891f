package watermill

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// These tests reproduce, with pgx and watermill alone (no harness), the
// causes of the rules watermill's Deduplicator fails. Each passes while
// watermill behaves so.

// reproDB opens a pool and a schema of its own with one effects table,
// dropped when the test ends.
func reproDB(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn(t))
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	schema := pgx.Identifier{"watermill_repro_" + strings.ToLower(watermill.NewShortUUID())}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema+"; CREATE TABLE "+schema+".effects (event_key text NOT NULL, payload bytea NOT NULL)"); err != nil {
		pool.Close()
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
		pool.Close()
	})
	return pool, schema
}

// consumer is one instance of a service as watermill's docs wire it: its
// own Deduplicator (default repository) whose Middleware wraps a handler
// that inserts the effect in a transaction of its own. fail, when set,
// makes the handler's transaction fail after its insert.
type consumer struct {
	calls   int
	fail    bool
	handler message.HandlerFunc
}

func newConsumer(pool *pgxpool.Pool, schema string) *consumer {
	c := &consumer{}
	d := &middleware.Deduplicator{KeyFactory: middleware.NewMessageHasherFromMetadataField("event_key")}
	c.handler = d.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		c.calls++
		ctx := msg.Context()
		return nil, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO "+schema+".effects (event_key, payload) VALUES ($1, $2)", msg.Metadata.Get("event_key"), []byte(msg.Payload)); err != nil {
				return fmt.Errorf("insert effect: %w", err)
			}
			if c.fail {
				_, err := tx.Exec(ctx, "SELECT 1/0")
				return err
			}
			return nil
		})
	})
	return c
}

// deliver hands the consumer a fresh message (as a broker redelivery
// carries) for the event key with payload.
func (c *consumer) deliver(key, payload string) error {
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	msg.Metadata.Set("event_key", key)
	_, err := c.handler(msg)
	return err
}

func effects(t *testing.T, pool *pgxpool.Pool, schema, key string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+schema+".effects WHERE event_key = $1", key).Scan(&n); err != nil {
		t.Fatalf("count effects: %v", err)
	}
	return n
}

// TestReproDoubleDeliveryAcrossInstances: the default repository is an
// in-memory map per Deduplicator, so a redelivery to a second instance is new
// to it and applies the effect again (double-delivery, concurrent-delivery,
// conflicting-payload.no-second-effect).
//
// Reproduces: double-delivery.redelivery-duplicate, double-delivery.one-effect, concurrent-delivery.one-effect, concurrent-delivery.one-applied, conflicting-payload.no-second-effect
// Cause: the default repository is an in-memory map per Deduplicator, so each instance applies the event once
func TestReproDoubleDeliveryAcrossInstances(t *testing.T) {
	pool, schema := reproDB(t)
	w1, w2 := newConsumer(pool, schema), newConsumer(pool, schema)
	for i, w := range []*consumer{w1, w2, w1, w2} {
		if err := w.deliver("orders/42", `{"total":10}`); err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
	}
	if w1.calls != 1 || w2.calls != 1 {
		t.Fatalf("handler calls: instance 1 %d, instance 2 %d; want 1 each (each instance drops only its own repeats)", w1.calls, w2.calls)
	}
	if n := effects(t, pool, schema, "orders/42"); n != 2 {
		t.Fatalf("effects = %d, want 2: one event applied once per instance", n)
	}
}

// TestReproFailedHandlerLosesEvent: the Deduplicator records the key in its
// repository before it calls the handler and never removes it when the
// handler fails, so the redelivery after a rolled-back transaction is
// dropped as a duplicate, acknowledged with no effect committed, and the
// event is never applied (failure-after-marker.not-acknowledged and
// retry-applies, ambiguous-commit.lost-commit-applies); a copy delivered
// while the handler still runs is dropped the same way
// (concurrent-delivery.failed-claimant-not-lost).
//
// Reproduces: failure-after-marker.not-acknowledged, failure-after-marker.retry-applies, ambiguous-commit.lost-commit-applies, crash-recovery.in-flight-exactly-once, concurrent-delivery.failed-claimant-not-lost
// Cause: the key is recorded before the handler runs and kept when the handler fails (an error, a cut connection, a crashed server), so a redelivery, or a copy delivered while the handler runs, is dropped as a duplicate with no effect committed, and the event is lost
func TestReproFailedHandlerLosesEvent(t *testing.T) {
	pool, schema := reproDB(t)
	w := newConsumer(pool, schema)
	w.fail = true
	err := w.deliver("orders/43", `{"total":10}`)
	var pgErr interface{ SQLState() string }
	if !errors.As(err, &pgErr) || pgErr.SQLState() != "22012" {
		t.Fatalf("first delivery: err = %v, want division_by_zero from the handler's transaction", err)
	}
	w.fail = false
	if err := w.deliver("orders/43", `{"total":10}`); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	if w.calls != 1 {
		t.Fatalf("handler calls = %d, want 1: the redelivery was dropped before the handler", w.calls)
	}
	if n := effects(t, pool, schema, "orders/43"); n != 0 {
		t.Fatalf("effects = %d, want 0: the event is lost", n)
	}
}

// TestReproConflictingPayloadDroppedSilently: the Deduplicator compares
// only the key, so a copy with the same identity and a different payload
// is dropped exactly as a duplicate is, with nil error and no signal of a
// conflict (conflicting-payload.conflict-detected).
//
// Reproduces: conflicting-payload.conflict-detected
// Cause: only the key is compared, so a conflicting copy is dropped like a duplicate, with no signal
func TestReproConflictingPayloadDroppedSilently(t *testing.T) {
	pool, schema := reproDB(t)
	w := newConsumer(pool, schema)
	if err := w.deliver("orders/44", `{"total":10}`); err != nil {
		t.Fatalf("first delivery: %v", err)
	}
	if err := w.deliver("orders/44", `{"total":99}`); err != nil {
		t.Fatalf("conflicting copy: err = %v, want nil (dropped as a duplicate)", err)
	}
	if w.calls != 1 {
		t.Fatalf("handler calls = %d, want 1", w.calls)
	}
	var payload string
	if err := pool.QueryRow(context.Background(), "SELECT convert_from(payload, 'UTF8') FROM "+schema+".effects WHERE event_key = 'orders/44'").Scan(&payload); err != nil {
		t.Fatalf("read effect: %v", err)
	}
	if payload != `{"total":10}` {
		t.Fatalf("stored payload = %s, want the first", payload)
	}
}
