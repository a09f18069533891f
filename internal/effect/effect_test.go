package effect_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/effect"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var schemas atomic.Int64

// newLedger creates a schema with the harness's ledger and returns it.
func newLedger(t *testing.T) string {
	t.Helper()
	pool := pgtest.Pool(t)
	schema := fmt.Sprintf("harmless_test_effect_%d_%d", time.Now().UnixNano(), schemas.Add(1))
	ctx := t.Context()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	if err := ledger.Install(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	return schema
}

// TestApplyRecordsTheDeliveryAndHookFailuresApplyNothing checks both ways an
// implementation applies the effect: each records exactly the delivery's
// namespace, id, payload digest and attempt, and a failing hook leaves the
// ledger untouched and is reported wrapped.
func TestApplyRecordsTheDeliveryAndHookFailuresApplyNothing(t *testing.T) {
	schema := newLedger(t)
	ctx := t.Context()
	pool := pgtest.Pool(t)
	boom := errors.New("boom")
	hook := func(_ context.Context, d adapters.Delivery) error {
		if d.Attempt == 2 {
			return boom
		}
		return nil
	}
	var eff adapters.Effect = ledger.Effect(schema, hook)
	ev := adapters.Event{Namespace: "ns", ID: "id/1", Payload: []byte("payload")}

	// Attempt 1 through pgx, attempt 2 fails in the hook, attempt 3
	// through database/sql.
	for attempt := 1; attempt <= 2; attempt++ {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return eff.Apply(ctx, tx, adapters.Delivery{Event: ev, Attempt: attempt})
		})
		if want := attempt == 2; (err != nil) != want || (want && !errors.Is(err, boom)) {
			t.Errorf("Apply attempt %d: %v; want error %t wrapping %v", attempt, err, want, boom)
		}
	}
	db, err := sql.Open("pgx", pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := eff.ApplySQL(ctx, tx, adapters.Delivery{Event: ev, Attempt: 3}); err != nil {
		t.Fatalf("ApplySQL: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	entries, err := ledger.Entries(ctx, pool, schema, ev.Namespace, ev.ID)
	if err != nil {
		t.Fatal(err)
	}
	var attempts []int
	for _, e := range entries {
		if e.PayloadDigest != adapters.PayloadDigest(ev.Payload) {
			t.Errorf("entry of attempt %d has digest %s, want %s", e.Attempt, e.PayloadDigest, adapters.PayloadDigest(ev.Payload))
		}
		attempts = append(attempts, e.Attempt)
	}
	if fmt.Sprint(attempts) != "[1 3]" {
		t.Errorf("ledger holds attempts %v, want [1 3]", attempts)
	}
}

// TestOfRecognisesOnlyTheHarnessEffect checks that the exec adapter can tell
// the harness's effect from a stand-in, and that the statement it would send
// has one placeholder per described parameter.
func TestOfRecognisesOnlyTheHarnessEffect(t *testing.T) {
	eff, ok := effect.Of(ledger.Effect("s", nil))
	if !ok || eff.Table() != ledger.Table("s") {
		t.Fatalf("Of(the harness's effect) = %q, %t; want table %q, true", eff.Table(), ok, ledger.Table("s"))
	}
	if _, ok := effect.Of(nil); ok {
		t.Error("Of(nil) reports the harness's effect")
	}
	args := eff.Args(adapters.Delivery{Event: adapters.Event{ID: "x"}, Attempt: 1})
	if len(args) != len(effect.Params()) {
		t.Errorf("%d arguments, %d described parameters", len(args), len(effect.Params()))
	}
}
