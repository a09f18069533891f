package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/internal/connstr"
)

// Role is a role made for one test.
type Role struct {
	Name, Password string
}

// cleanupTimeout bounds what a cleanup does on the server.
const cleanupTimeout = time.Minute

// unique returns n random bytes in hex, for names of a test's own.
func unique(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return hex.EncodeToString(b)
}

// NewRole creates a role that can log in with a random password and has no
// other attribute (not a superuser, no CREATEDB, no CREATEROLE) and no
// privilege beyond what PUBLIC has. When the test ends, the objects it
// owns and the privileges it holds in the default database are dropped, and
// then the role: drop the databases it owns objects in before that (a
// database of [NewDatabase] made after the role is).
func NewRole(t testing.TB) Role {
	t.Helper()
	pool := Pool(t)
	r := Role{Name: "harmless_test_role_" + unique(t, 6), Password: unique(t, 16)}
	name := pgx.Identifier{r.Name}.Sanitize()
	if _, err := pool.Exec(t.Context(), fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", name, r.Password)); err != nil {
		t.Fatalf("pgtest: create role %s: %v", r.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		// Its sessions first: a role whose backends live on cannot be
		// dropped cleanly.
		_, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid, 30000) FROM pg_stat_activity WHERE usename = $1`, r.Name)
		if err == nil {
			_, err = pool.Exec(ctx, "DROP OWNED BY "+name)
		}
		if err == nil {
			_, err = pool.Exec(ctx, "DROP ROLE "+name)
		}
		if err != nil {
			t.Errorf("pgtest: drop role %s: %v", r.Name, err)
		}
	})
	return r
}

// NewDatabase creates an empty database of the test's own, owned by the
// superuser of [DSN], and returns a DSN for it. The database is dropped when
// the test ends, and with it the connections still open to it. A test whose
// subject looks at every schema of a database (the leftovers of other runs)
// or whose roles need privileges on a database uses one, so that no other
// test's objects, nor its own, are in the way.
func NewDatabase(t testing.TB) string {
	t.Helper()
	pool := Pool(t)
	name := "harmless_test_db_" + unique(t, 6)
	quoted := pgx.Identifier{name}.Sanitize()
	if _, err := pool.Exec(t.Context(), "CREATE DATABASE "+quoted); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP DATABASE "+quoted+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	dsn, err := WithSettings(DSN(t), map[string]string{"dbname": name})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return dsn
}

// As returns dsn with r's user name and password.
func (r Role) As(t testing.TB, dsn string) string {
	t.Helper()
	out, err := WithSettings(dsn, map[string]string{"user": r.Name, "password": r.Password})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return out
}

// WithSettings returns dsn, a URL or keyword/value connection string, with
// the settings user, password or dbname replaced by those of set.
func WithSettings(dsn string, set map[string]string) (string, error) {
	if _, err := pgx.ParseConfig(dsn); err != nil {
		return "", fmt.Errorf("invalid connection string: %w", err)
	}
	if connstr.IsURL(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("invalid connection URL: %w", err)
		}
		user, password := u.User.Username(), ""
		if p, ok := u.User.Password(); ok {
			password = p
		}
		for k, v := range set {
			switch k {
			case "user":
				user = v
			case "password":
				password = v
			case "dbname":
				u.Path, u.RawPath = "/"+v, ""
			default:
				return "", fmt.Errorf("WithSettings does not set %q", k)
			}
		}
		u.User = url.UserPassword(user, password)
		return u.String(), nil
	}
	settings, err := connstr.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("invalid connection string: %w", err)
	}
	for k, v := range set {
		settings = connstr.Set(settings, k, v)
	}
	return connstr.Format(settings), nil
}
