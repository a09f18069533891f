package suite

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// claimantChildEnv names, in a child process of TestFailedClaimant, the
// case of claimantCases to run the failed-claimant rule against.
const claimantChildEnv = "HARMLESS_TEST_CLAIMANT"

// lostEvent is what the failed-claimant rule says of a lost event.
var lostEvent = expect{certificate.VerdictFail, "answered Duplicate while the ledger held no effect of the event"}

// claimantCases are implementations whose contenders wait for the
// claimant in ways the database does not all show, which must pass the
// failed-claimant rule, and the shortcuts that answer a busy event
// Duplicate and a marker committed before the effect, which must fail it.
var claimantCases = map[string]struct {
	adapter adapters.Adapter
	want    expect
}{
	// Two connections per instance: most contenders wait for a
	// connection, not for a lock.
	"small-pool": {adapter: smallPoolAdapter(2), want: pass},
	// One connection per instance, used by one delivery at a time: the
	// contenders wait on a mutex in the process.
	"one-connection": {adapter: adapters.Adapter{Name: "one-connection", Declares: reference.Adapter().Declares, New: newOneConn}, want: pass},
	// A busy event, found by pg_try_advisory_xact_lock, is a Duplicate.
	"try-lock": {adapter: tryLockAdapter(), want: lostEvent},
	// A busy event, found by a short lock_timeout, is a Duplicate.
	"broken-busy-is-duplicate": {adapter: mustBuiltin("broken-busy-is-duplicate"), want: lostEvent},
	// The marker is committed before the effect: the others find it.
	"broken-marker-first": {adapter: mustBuiltin("broken-marker-first"), want: lostEvent},
}

func mustBuiltin(name string) adapters.Adapter {
	a, err := builtin.Lookup(name)
	if err != nil {
		panic(err)
	}
	return a
}

// smallPoolAdapter is the reference Store with a pool of conns connections
// per instance.
func smallPoolAdapter(conns int32) adapters.Adapter {
	return adapters.Adapter{
		Name:     "small-pool",
		Declares: reference.Adapter().Declares,
		New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
			cfg, err := pgxpool.ParseConfig(env.DSN)
			if err != nil {
				return nil, err
			}
			cfg.MaxConns = conns
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				return nil, err
			}
			store := reference.NewStore(pool, reference.Config{Schema: env.Schema, Now: env.Clock.Now})
			if err := store.Migrate(ctx); err != nil {
				pool.Close()
				return nil, err
			}
			return storeImpl{pool: pool, store: store, effect: env.Effect}, nil
		},
	}
}

// tryLock is the reference pattern behind pg_try_advisory_xact_lock on the
// event's identity, with the shortcut: an event whose lock is taken is
// busy, and a busy event is answered Duplicate.
type tryLock struct {
	pool   *pgxpool.Pool
	table  string
	effect adapters.Effect
}

func tryLockAdapter() adapters.Adapter {
	return adapters.Adapter{
		Name:     "try-lock",
		Declares: reference.Adapter().Declares,
		New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
			pool, err := pgxpool.New(ctx, env.DSN)
			if err != nil {
				return nil, err
			}
			t := tryLock{pool: pool, table: pgx.Identifier{env.Schema, "try_lock_markers"}.Sanitize(), effect: env.Effect}
			if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+t.table+` (namespace text, event_id text, PRIMARY KEY (namespace, event_id))`); err != nil {
				pool.Close()
				return nil, err
			}
			return t, nil
		},
	}
}

func (t tryLock) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	outcome := adapters.Duplicate
	err := pgx.BeginFunc(ctx, t.pool, func(tx pgx.Tx) error {
		var mine bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtext($1), hashtext($2))`, d.Namespace, d.ID).Scan(&mine); err != nil {
			return err
		}
		if !mine {
			return nil // busy: the shortcut
		}
		var err error
		outcome, err = claimAndApply(ctx, tx, t.table, t.effect, d)
		return err
	})
	if err != nil {
		return 0, err
	}
	return outcome, nil
}

// claimAndApply claims d's event in table, a (namespace, event_id) table
// with a unique key, and applies the effect in tx if the claim succeeded:
// the reference pattern without the payload comparison.
func claimAndApply(ctx context.Context, tx pgx.Tx, table string, effect adapters.Effect, d adapters.Delivery) (adapters.Outcome, error) {
	var claimed bool
	err := tx.QueryRow(ctx, `INSERT INTO `+table+` VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING true`, d.Namespace, d.ID).Scan(&claimed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return adapters.Duplicate, nil
	case err != nil:
		return 0, err
	}
	return adapters.Applied, effect.Apply(ctx, tx, d)
}

func (t tryLock) Close(context.Context) error { t.pool.Close(); return nil }

// TestClaimantChild runs the failed-claimant rule against the case named
// by claimantChildEnv and writes the certificate to childCertEnv. It runs
// only in a child process started by TestFailedClaimant.
func TestClaimantChild(t *testing.T) {
	runChildSuite(t, claimantChildEnv, "TestFailedClaimant", func(name string) (adapters.Adapter, []Option, bool) {
		c, ok := claimantCases[name]
		return c.adapter, nil, ok
	})
}

// TestFailedClaimant runs the failed-claimant variants of
// concurrent-delivery, in a child process each: implementations whose
// contenders wait for a connection or a mutex rather than a lock pass,
// having proved the overlap, and the shortcuts that answer a busy event
// Duplicate fail, saying that the event is lost.
func TestFailedClaimant(t *testing.T) {
	dsn := pgtest.DSN(t)
	for name, c := range claimantCases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cert, output, elapsed := runTestChild(t, "TestClaimantChild", []string{runRule("TestClaimantChild", catalogid.ConcurrentDeliveryFailedClaimantNotLost)},
				[]string{"HARMLESS_DSN=" + dsn, claimantChildEnv + "=" + name}, 0, 1)
			t.Logf("the failed-claimant rule against %s took %s (the child process %s)",
				name, time.Duration(cert.Duration*float64(time.Second)).Round(time.Millisecond), elapsed.Round(time.Millisecond))
			var got *certificate.RuleResult
			for i, r := range cert.Rules {
				if r.ID == catalogid.ConcurrentDeliveryFailedClaimantNotLost {
					got = &cert.Rules[i]
				} else if r.Verdict != certificate.VerdictSkipped {
					t.Errorf("rule %s ran (%s): the label filter did not hold", r.ID, r.Verdict)
				}
			}
			switch {
			case got == nil:
				t.Errorf("the certificate has no verdict of %s", catalogid.ConcurrentDeliveryFailedClaimantNotLost)
			case got.Verdict != c.want.verdict || !strings.Contains(got.Message, c.want.says):
				t.Errorf("rule %s: verdict %s; want %s, saying %q\n%s", got.ID, got.Verdict, c.want.verdict, c.want.says, got.Message)
			}
			if t.Failed() {
				t.Logf("the child's output:\n%s", tail(output, 80))
			}
		})
	}
}
