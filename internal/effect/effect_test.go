package effect_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
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

// TestSQLSurvivesOtherPlaceholderStyles checks what docs/protocol.md
// promises of the statement an exec child gets, for the schema names a run
// uses: each placeholder $1..$N appears once, in order, one per parameter
// (a repeat would be a $ between or after them);
// there is no other $, no % or ? (so that $N can be rewritten to %s or ?
// by text substitution), and no : at all (so that SQLAlchemy's text(),
// which reads :name as a bind parameter, finds none, and no :: cast).
func TestSQLSurvivesOtherPlaceholderStyles(t *testing.T) {
	for _, schema := range []string{"harmless_1a2b3c4d_s3", "harmless_0123456789abcdef_s1234"} {
		sql := ledger.Effect(schema, nil).SQL()
		rest := sql
		for i := range effect.Params() {
			placeholder := fmt.Sprintf("$%d", i+1)
			before, after, ok := strings.Cut(rest, placeholder)
			if !ok {
				t.Errorf("%s: placeholder %s missing or out of order", sql, placeholder)
				break
			}
			if strings.ContainsAny(before, "$%?:") {
				t.Errorf("%s: %q holds $, %%, ? or :", sql, before)
			}
			if after != "" && after[0] >= '0' && after[0] <= '9' {
				t.Errorf("%s: a placeholder beyond $%d", sql, len(effect.Params()))
			}
			rest = after
		}
		if strings.ContainsAny(rest, "$%?:") {
			t.Errorf("%s: %q, after the last placeholder, holds $, %%, ? or :", sql, rest)
		}
	}
}

// TestProtocolPageShowsTheEffect: the setup request that docs/protocol.md
// shows carries the effect a run sends, for the schema it shows.
func TestProtocolPageShowsTheEffect(t *testing.T) {
	page, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	var setup struct {
		Method string
		Params struct {
			Schema string
			Effect struct {
				SQL    string
				Params []effect.Param
			}
		}
	}
	found := false
	for i, block := range strings.Split(string(page), "```") {
		body, ok := strings.CutPrefix(block, "json\n")
		if i%2 == 0 || !ok || !strings.Contains(body, `"method": "setup"`) {
			continue
		}
		if err := json.Unmarshal([]byte(body), &setup); err != nil {
			t.Fatalf("docs/protocol.md's setup request is not JSON: %v\n%s", err, body)
		}
		found = true
		break
	}
	if !found || setup.Method != "setup" {
		t.Fatal(`docs/protocol.md shows no setup request (a json block with "method": "setup")`)
	}
	if want := ledger.Effect(setup.Params.Schema, nil).SQL(); setup.Params.Effect.SQL != want {
		t.Errorf("docs/protocol.md's setup shows the effect\n%s\nwhere a run sends\n%s", setup.Params.Effect.SQL, want)
	}
	if !reflect.DeepEqual(setup.Params.Effect.Params, effect.Params()) {
		t.Errorf("docs/protocol.md's setup shows the params %+v; a run sends %+v", setup.Params.Effect.Params, effect.Params())
	}
}
