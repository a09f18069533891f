package harness_test

import (
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/internal/harness"
)

// FuzzWithApplicationName: whatever DSN a user gives (--dsn, HARMLESS_DSN,
// DATABASE_URL), tagging it never panics; a DSN pgx refuses is refused;
// and a DSN pgx accepts comes back as one that connects to the same server,
// as the same user, to the same database, with the same password and the
// other parameters unchanged, and the new application_name.
func FuzzWithApplicationName(f *testing.F) {
	for _, seed := range []string{
		"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		"postgresql://u:p%40ss@h1:1,h2:2/db?application_name=old&options=-c%20x%3Dy",
		"host=127.0.0.1 port=5432 user=postgres dbname=postgres sslmode=disable",
		"host=h user='it''s' password='a \\' b' application_name='old name'",
		"postgres:///db?host=/tmp",
		"user=x password= dbname=",
	} {
		f.Add(seed, "harmless-1a2b3c4d-s1-i1")
	}
	f.Fuzz(func(t *testing.T, dsn, name string) {
		// The harness's names are plain: harmless-<run>-<play>-i<n>.
		if !plainName(name) {
			t.Skip()
		}
		before, parseErr := pgx.ParseConfig(dsn)
		got, err := harness.WithApplicationName(dsn, name)
		switch {
		case parseErr != nil && err == nil:
			t.Fatalf("WithApplicationName accepted %q, which pgx refuses (%v)", dsn, parseErr)
		case parseErr != nil:
			return
		case err != nil:
			t.Fatalf("WithApplicationName refused %q, which pgx accepts: %v", dsn, err)
		}
		after, err := pgx.ParseConfig(got)
		if err != nil {
			t.Fatalf("the tagged DSN %q does not parse: %v (from %q)", got, err, dsn)
		}
		if p := after.RuntimeParams["application_name"]; p != name {
			t.Fatalf("the tagged DSN %q has application_name %q; want %q", got, p, name)
		}
		if before.Host != after.Host || before.Port != after.Port || before.User != after.User ||
			before.Password != after.Password || before.Database != after.Database {
			t.Fatalf("tagging changed where or how it connects: %q became %q", dsn, got)
		}
		for k, v := range before.RuntimeParams {
			if k != "application_name" && after.RuntimeParams[k] != v {
				t.Fatalf("tagging changed parameter %s from %q to %q: %q became %q", k, v, after.RuntimeParams[k], dsn, got)
			}
		}
	})
}

// plainName reports whether name is 1 to 63 printable ASCII characters
// without quotes or backslashes, as the harness's application names are.
func plainName(name string) bool {
	if name == "" || len(name) > 63 || !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		if r < 0x21 || r > 0x7e || r == '\'' || r == '"' || r == '\\' {
			return false
		}
	}
	return true
}
