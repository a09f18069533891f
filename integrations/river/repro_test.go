package river

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// reproClient returns an insert-only River client on a schema of its own,
// migrated with rivermigrate and dropped when the test ends, and its pool.
func reproClient(t *testing.T) (*pgxpool.Pool, *river.Client[pgx.Tx]) {
	t.Helper()
	dsn := os.Getenv("HARMLESS_DSN")
	if dsn == "" {
		t.Skip("HARMLESS_DSN is not set: the River repros need a PostgreSQL server")
	}
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(pool.Close)
	suffix := make([]byte, 6)
	if _, err := rand.Read(suffix); err != nil {
		t.Fatalf("schema name: %v", err)
	}
	schema := "river_repro_" + hex.EncodeToString(suffix)
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		t.Fatalf("migrator: %v", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return pool, client
}

// insertCommitted inserts args as a unique job in a transaction of its own
// and commits it, reporting whether River skipped it as a duplicate.
func insertCommitted(t *testing.T, pool *pgxpool.Pool, client *river.Client[pgx.Tx], args FollowUpArgs) (skipped bool, err error) {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	res, err := client.InsertTx(ctx, tx, args, &river.InsertOpts{UniqueOpts: uniqueOpts})
	if err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return res.UniqueSkippedAsDuplicate, nil
}

// TestReproConflictingPayloadConflictDetected: River's unique key is built from the unique-tagged identity only, so a different payload under a claimed identity is reported as a plain duplicate.
//
// Reproduces: conflicting-payload.conflict-detected
// Cause: the unique key is made of the identity only, so a conflicting copy is skipped as a plain duplicate
func TestReproConflictingPayloadConflictDetected(t *testing.T) {
	pool, client := reproClient(t)
	first := FollowUpArgs{Namespace: "ns", EventID: "ev-1", PayloadDigest: "digest-of-P1"}
	second := FollowUpArgs{Namespace: "ns", EventID: "ev-1", PayloadDigest: "digest-of-P2"}
	if skipped, err := insertCommitted(t, pool, client, first); err != nil || skipped {
		t.Fatalf("first insert: skipped=%v err=%v, want inserted", skipped, err)
	}
	skipped, err := insertCommitted(t, pool, client, second)
	if err != nil {
		t.Fatalf("second insert: %v", err)
	}
	if !skipped {
		t.Fatalf("second insert with another payload was inserted; River now tells conflicts apart")
	}
}

// TestReproIdentityFidelityInvalidUTF8: River JSON-encodes job args with encoding/json, which replaces every invalid UTF-8 byte with U+FFFD, so identities differing only there share one unique key.
//
// Reproduces: identity-fidelity.bytes-kept, identity-fidelity.namespace-kept
// Cause: job args are JSON, which turns every invalid UTF-8 byte into U+FFFD, so two identities share one unique key and the second event is dropped as a duplicate
func TestReproIdentityFidelityInvalidUTF8(t *testing.T) {
	pool, client := reproClient(t)
	for _, tc := range []struct {
		name          string
		first, second FollowUpArgs
	}{
		{"id", FollowUpArgs{Namespace: "ns", EventID: "a\xff"}, FollowUpArgs{Namespace: "ns", EventID: "a\xfe"}},
		{"namespace", FollowUpArgs{Namespace: "a\xff", EventID: "ev"}, FollowUpArgs{Namespace: "a\xfe", EventID: "ev"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if skipped, err := insertCommitted(t, pool, client, tc.first); err != nil || skipped {
				t.Fatalf("first insert %+q: skipped=%v err=%v, want inserted", tc.first, skipped, err)
			}
			skipped, err := insertCommitted(t, pool, client, tc.second)
			if err != nil {
				t.Fatalf("second insert %+q: %v", tc.second, err)
			}
			if !skipped {
				t.Fatalf("second insert %+q was inserted: the identities now get distinct unique keys", tc.second)
			}
		})
	}
}

// TestReproNULInIdentity: job args are stored as jsonb, which rejects the \u0000 that encoding/json writes for a NUL byte, so an identity with a NUL fails InsertTx with SQLSTATE 22P05 on every try instead of being refused as invalid input (bad-input, namespace-isolation, identity-fidelity's NUL pairs).
//
// Reproduces: bad-input.exactly-once-or-rejected, identity-fidelity.bytes-kept, identity-fidelity.namespace-kept, namespace-isolation.unambiguous-identity
// Cause: job args are jsonb, which rejects the \u0000 of a NUL byte, so such an identity fails InsertTx with SQLSTATE 22P05 on every delivery and is never refused
func TestReproNULInIdentity(t *testing.T) {
	pool, client := reproClient(t)
	for _, args := range []FollowUpArgs{
		{Namespace: "ns", EventID: "nul-\x00-id"},
		{Namespace: "ns\x00", EventID: "ev"},
		{Namespace: "harmless\x00p11", EventID: "42"},
	} {
		for try := 1; try <= 2; try++ {
			_, err := insertCommitted(t, pool, client, args)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "22P05" {
				t.Fatalf("insert %+q, try %d: err=%v, want SQLSTATE 22P05 (untranslatable character)", args, try, err)
			}
		}
	}
}
