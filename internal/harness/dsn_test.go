package harness_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

// keywordDSN rewrites a connection string in keyword/value form, quoting
// every value.
func keywordDSN(t *testing.T, dsn string, extra ...string) string {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	quote := func(s string) string {
		return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
	}
	parts := []string{
		"host=" + quote(cfg.Host),
		fmt.Sprintf("port=%d", cfg.Port),
		"user=" + quote(cfg.User),
		"dbname=" + quote(cfg.Database),
		"sslmode=disable",
	}
	if cfg.Password != "" {
		parts = append(parts, "password="+quote(cfg.Password))
	}
	return strings.Join(append(parts, extra...), " ")
}

// urlDSN returns dsn in URL form with the query parameter key set to value.
func urlDSN(t *testing.T, dsn, key, value string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Skipf("the test server's DSN is not a URL (%v): %s", err, dsn)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

func TestWithApplicationName(t *testing.T) {
	t.Parallel()
	base := pgtest.DSN(t)
	url := urlDSN(t, base, "sslmode", "disable")
	odd := `it's a \ name, with = and spaces`
	// Other parameters must reach the server unchanged.
	withOptions := url + "&options=-c%20search_path%3Dharmless_test_path"
	for _, tc := range []struct {
		name, dsn, app string
		searchPath     string
	}{
		{"url", url, "harmless-test-url", ""},
		{"url with an application_name", urlDSN(t, url, "application_name", "old-name"), "harmless-test-url-override", ""},
		{"url with an odd name", url, odd, ""},
		{"url with other parameters", withOptions, "harmless-test-url-options", "harmless_test_path"},
		{"keyword/value", keywordDSN(t, base), "harmless-test-kv", ""},
		{"keyword/value with an application_name", keywordDSN(t, base, "application_name=old-name"), "harmless-test-kv-override", ""},
		{"keyword/value with a quoted application_name", keywordDSN(t, base, "application_name='old name'"), "harmless-test-kv-override2", ""},
		{"keyword/value with an odd name", keywordDSN(t, base), odd, ""},
		{"keyword/value with other parameters", keywordDSN(t, base, `options='-c search_path=harmless_test_path'`), "harmless-test-kv-options", "harmless_test_path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := harness.WithApplicationName(tc.dsn, tc.app)
			if err != nil {
				t.Fatalf("WithApplicationName(%q): %v", tc.dsn, err)
			}
			cfg, err := pgx.ParseConfig(got)
			if err != nil {
				t.Fatalf("the result %q does not parse: %v", got, err)
			}
			if p := cfg.RuntimeParams["application_name"]; p != tc.app {
				t.Errorf("the result %q parses to application_name %q; want %q", got, p, tc.app)
			}
			var setting, searchPath string
			if err := connect(t, got).QueryRow(t.Context(), `SELECT current_setting('application_name'), current_setting('search_path')`).Scan(&setting, &searchPath); err != nil {
				t.Fatal(err)
			}
			if setting != tc.app {
				t.Errorf("connected with application_name %q; want %q (dsn %q)", setting, tc.app, got)
			}
			if tc.searchPath != "" && searchPath != tc.searchPath {
				t.Errorf("connected with search_path %q; want %q: the other parameters were mangled (dsn %q)", searchPath, tc.searchPath, got)
			}
		})
	}
}

func TestWithApplicationNameRefusesAnInvalidDSN(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"postgres://postgres@127.0.0.1:notaport/postgres",
		"host=127.0.0.1 port=notaport",
		"host=127.0.0.1 user='unterminated",
		"no equals sign here",
	} {
		if got, err := harness.WithApplicationName(dsn, "harmless-test"); err == nil || !strings.Contains(err.Error(), "invalid connection string") {
			t.Errorf("WithApplicationName(%q) = %q, %v; want an invalid connection string error", dsn, got, err)
		}
	}
}
