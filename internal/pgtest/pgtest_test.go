package pgtest_test

import (
	"testing"

	"github.com/harmless-dev/harmless/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestPoolQueriesTheSharedServer(t *testing.T) {
	pool := pgtest.Pool(t)
	var one int
	if err := pool.QueryRow(t.Context(), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
}

func TestDSNIsSharedWithinTheBinary(t *testing.T) {
	if a, b := pgtest.DSN(t), pgtest.DSN(t); a == "" || a != b {
		t.Fatalf("DSN = %q then %q, want the same server", a, b)
	}
}
