package pgaddr

import (
	"slices"
	"testing"
)

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		dsn  string
		want []string
	}{
		{"postgres://u@127.0.0.1:5433/db?sslmode=disable", []string{"127.0.0.1:5433"}},
		{"postgres://u@127.0.0.1:41001,127.0.0.1:41002/db?sslmode=disable&target_session_attrs=read-write", []string{"127.0.0.1:41001", "127.0.0.1:41002"}},
		{"host=/var/run/postgresql port=5432 user=postgres sslmode=disable", []string{"/var/run/postgresql/.s.PGSQL.5432"}},
		{"postgres://u@[::1]:5432/db?sslmode=disable", []string{"[::1]:5432"}},
		// sslmode prefer lists each host twice, with TLS and without.
		{"postgres://u@127.0.0.1:5432/db", []string{"127.0.0.1:5432"}},
	} {
		got, err := Of(tc.dsn)
		if err != nil {
			t.Errorf("%s: %v", tc.dsn, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.dsn, got, tc.want)
		}
	}
	if Network("/tmp/.s.PGSQL.5432") != "unix" || Network("127.0.0.1:5432") != "tcp" {
		t.Error("Network tells a socket from a TCP address wrongly")
	}
	if _, err := Of("postgres://u:secret@%zz"); err == nil {
		t.Error("a bad DSN is read")
	}
}
