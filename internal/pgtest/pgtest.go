// Package pgtest gives the harness's own tests a real PostgreSQL server.
//
// TEMPORARY STUB: reads HARMLESS_DSN, else DATABASE_URL, else the local
// default server. To be replaced by provisioning through internal/provision.
package pgtest

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// DSN returns a connection string for a real PostgreSQL server.
func DSN(t testing.TB) string {
	t.Helper()
	for _, k := range []string{"HARMLESS_DSN", "DATABASE_URL"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// Pool returns a pool on DSN(t), closed when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), DSN(t))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}
