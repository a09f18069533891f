package connstr_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harmless-dev/harmless/internal/connstr"
)

func TestSetURLParam(t *testing.T) {
	for _, tt := range []struct{ in, key, value, want string }{
		{"postgres://h/db", "application_name", "a b", "postgres://h/db?application_name=a%20b"},
		{"postgres://h/db?", "application_name", "x", "postgres://h/db?application_name=x"},
		// Every other parameter stays byte for byte: %20 is not re-encoded
		// as "+", a literal "+" is not touched.
		{"postgres://h/db?options=-c%20a%3Db&x=1+2&application_name=old", "application_name", "new&=", "postgres://h/db?options=-c%20a%3Db&x=1+2&application_name=new%26%3D"},
		// An escaped key is the same key.
		{"postgres://h/db?application%5Fname=old&&sslmode=disable", "application_name", "n", "postgres://h/db?sslmode=disable&application_name=n"},
		// An '@' before the first '/' ends the user information, even
		// after a '?': the query starts after it.
		{"postgres://?@h?x=1", "application_name", "n", "postgres://?@h?x=1&application_name=n"},
	} {
		got := connstr.SetURLParam(tt.in, tt.key, tt.value)
		if got != tt.want {
			t.Errorf("SetURLParam(%q, %q, %q) = %q, want %q", tt.in, tt.key, tt.value, got, tt.want)
		}
		cfg, err := pgconn.ParseConfig(got)
		if err != nil {
			t.Errorf("SetURLParam(%q, ...) = %q, which pgx does not parse: %v", tt.in, got, err)
		} else if cfg.RuntimeParams[tt.key] != tt.value {
			t.Errorf("pgx reads %s %q from %q, want %q", tt.key, cfg.RuntimeParams[tt.key], got, tt.value)
		}
	}
}

func TestDropQueryParams(t *testing.T) {
	for _, tt := range []struct {
		in   string
		keys []string
		want string
	}{
		{"host=a&port=1&application_name=a%20b&hostaddr=x", []string{"host", "hostaddr", "port"}, "application_name=a%20b"},
		{"ho%73t=a&x=1+2", []string{"host"}, "x=1+2"},
		{"", []string{"host"}, ""},
	} {
		if got := connstr.DropQueryParams(tt.in, tt.keys...); got != tt.want {
			t.Errorf("DropQueryParams(%q, %q) = %q, want %q", tt.in, tt.keys, got, tt.want)
		}
	}
}

func TestSplitURL(t *testing.T) {
	for _, tt := range []struct{ in, user, hosts, rest string }{
		{"postgres://alice:pw@h1:1,h2:2/db?x=1", "postgres://alice:pw@", "h1:1,h2:2", "/db?x=1"},
		{"postgresql://h", "postgresql://", "h", ""},
		{"postgres://?@h?x=1", "postgres://?@", "h", "?x=1"},
		{"postgres://h/a@b", "postgres://", "h", "/a@b"},
		{"postgres://@h#f", "postgres://@", "h", "#f"},
	} {
		user, hosts, rest := connstr.SplitURL(tt.in)
		if user != tt.user || hosts != tt.hosts || rest != tt.rest {
			t.Errorf("SplitURL(%q) = %q, %q, %q; want %q, %q, %q", tt.in, user, hosts, rest, tt.user, tt.hosts, tt.rest)
		}
	}
}
