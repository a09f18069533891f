package connstr

import (
	"maps"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// settingsOf is what pgx makes of a keyword/value string: its parsed
// configuration, as far as a connection string can change it.
func settingsOf(t *testing.T, s string) (*pgconn.Config, error) {
	t.Helper()
	return pgconn.ParseConfig(s)
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Setting
	}{
		{"host=h port=5432", []Setting{{"host", "h"}, {"port", "5432"}}},
		{"  password= dbname=x  ", []Setting{{"password", "dbname=x"}}},
		{"dbname=", []Setting{{"dbname", ""}}},
		{`user='it\'s' application_name = 'a b'`, []Setting{{"user", "it's"}, {"application_name", "a b"}}},
		{`password=a\ b`, []Setting{{"password", "a b"}}},
		{`password=ab\`, []Setting{{"password", "ab"}}},
	} {
		got, err := Parse(tc.in)
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("Parse(%q) = %v; want %v", tc.in, got, tc.want)
			}
		}
	}
	for _, bad := range []string{"no equals", "=x", "a b=c", "user='unterminated", "a=\x00"} {
		if got, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %v; want an error", bad, got)
		}
	}
}

// FuzzFormatParse: whatever a user writes, Parse never panics, refuses what
// pgx refuses, and Format(Parse(s)) means to pgx what s meant; setting a
// key changes that key only.
func FuzzFormatParse(f *testing.F) {
	for _, seed := range []string{
		"host=127.0.0.1 port=5432 user=postgres dbname=postgres sslmode=disable",
		"password= dbname=x", "dbname=", `user='it\'s' password='a \\ b'`, `password=ab\`,
		"host=a,b port=1,2 target_session_attrs=read-write application_name='x y'",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, wantErr := settingsOf(t, s)
		settings, err := Parse(s)
		if err != nil {
			if wantErr == nil {
				t.Fatalf("Parse(%q) refused what pgx accepts: %v", s, err)
			}
			return
		}
		if wantErr != nil {
			return // pgx refuses a value (a bad port, say), not the syntax
		}
		back := Format(settings)
		got, err := settingsOf(t, back)
		if err != nil {
			t.Fatalf("Format(Parse(%q)) = %q does not parse: %v", s, back, err)
		}
		if got.Host != want.Host || got.Port != want.Port || got.User != want.User || got.Password != want.Password ||
			got.Database != want.Database || !maps.Equal(got.RuntimeParams, want.RuntimeParams) {
			t.Fatalf("Format(Parse(%q)) = %q means something else to pgx", s, back)
		}
		tagged := Format(Set(settings, "application_name", "harmless-test"))
		if got, err := settingsOf(t, tagged); err != nil || got.RuntimeParams["application_name"] != "harmless-test" || got.Password != want.Password {
			t.Fatalf("setting application_name in %q gave %q (%v)", s, tagged, err)
		}
	})
}
