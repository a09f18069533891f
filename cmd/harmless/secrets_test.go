package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/connstr"
	"github.com/harmless-dev/harmless/internal/execchild"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/redact"
	"github.com/harmless-dev/harmless/suite/certificate"
	"github.com/jackc/pgx/v5"
)

// secretRole is a role made for one test, with a random password whose
// core (random hex, the same in every spelling of the password: as is,
// percent-encoded, quoted) must appear in no output.
type secretRole struct {
	name, password, core string
	host, database       string
	port                 uint16
}

// shortPassword is a password too short to mask: certify shows it where it
// is quoted, and warns.
const shortPassword = "abc"

// newSecretRole creates a role that may log in with a random password and
// create schemas in the shared server's database; a second one, named by
// nologin, that may not log in at all; and a third, named by short, that
// may do what the first may with shortPassword. All are dropped when the
// test ends. The password holds a space, a quote and an '@', so that every
// spelling of it (percent-encoded in a URL, escaped in a keyword/value
// string, quoted by %q) differs from it. Each role that logs in has a
// password of its own because the server may ask for it: a server harmless
// starts asks every login for its password by SCRAM-SHA-256.
func newSecretRole(t *testing.T) (role secretRole, nologin, short string) {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	random := func(n int) string {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	}
	core := random(12)
	r := secretRole{name: "harmless_secret_" + random(4), password: "Pw-" + core + " 'q@x", core: core,
		host: cfg.Host, port: cfg.Port, database: cfg.Database}
	nologin, short = r.name+"_nologin", r.name+"_short"
	pool := pgtest.Pool(t)
	ident := func(s string) string { return pgx.Identifier{s}.Sanitize() }
	for _, sql := range []string{
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", ident(r.name), strings.ReplaceAll(r.password, "'", "''")),
		fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s", ident(r.database), ident(r.name)),
		fmt.Sprintf("CREATE ROLE %s NOLOGIN PASSWORD '%s'", ident(nologin), random(12)),
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", ident(short), shortPassword),
		fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s", ident(r.database), ident(short)),
	} {
		if _, err := pool.Exec(t.Context(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, sql := range []string{
			fmt.Sprintf("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename IN ('%s', '%s')", r.name, short),
			fmt.Sprintf("DROP OWNED BY %s, %s", ident(r.name), ident(short)),
			fmt.Sprintf("DROP ROLE %s", ident(r.name)),
			fmt.Sprintf("DROP ROLE %s", ident(nologin)),
			fmt.Sprintf("DROP ROLE %s", ident(short)),
		} {
			if _, err := pool.Exec(ctx, sql); err != nil {
				t.Errorf("%s: %v", sql, err)
			}
		}
	})
	return r, nologin, short
}

// url is a connection URL for user with password, on port.
func (r secretRole) url(user, password string, port uint16) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(user, password), Host: net.JoinHostPort(r.host, strconv.Itoa(int(port))),
		Path: "/" + r.database, RawQuery: "sslmode=disable"}
	return u.String()
}

// keywords is a keyword/value connection string for the role.
func (r secretRole) keywords() string {
	return connstr.Format([]connstr.Setting{{Key: "host", Value: r.host}, {Key: "port", Value: strconv.Itoa(int(r.port))},
		{Key: "user", Value: r.name}, {Key: "password", Value: r.password}, {Key: "dbname", Value: r.database}, {Key: "sslmode", Value: "disable"}})
}

// reportPaths are the files a run writes its reports to, in a directory
// of their own.
type reportPaths struct {
	dir, json, junit, markdown, summary string
}

func newReportPaths(t *testing.T) reportPaths {
	dir := t.TempDir()
	return reportPaths{dir, filepath.Join(dir, "c.json"), filepath.Join(dir, "c.xml"), filepath.Join(dir, "c.md"), filepath.Join(dir, "summary.md")}
}

// args are the flags that write every report.
func (p reportPaths) args() []string {
	return []string{"--json", p.json, "--junit", p.junit, "--markdown", p.markdown}
}

// env sets $GITHUB_STEP_SUMMARY, so that the run appends its summary there.
func (p reportPaths) env() []string { return []string{stepSummaryEnv + "=" + p.summary} }

// checkNoSecret fails the test when stdout, stderr or any file in the
// reports' directory holds core, and returns how many files it read.
func checkNoSecret(t *testing.T, core, stdout, stderr string, p reportPaths) int {
	t.Helper()
	for name, out := range map[string]string{"stdout": stdout, "stderr": stderr} {
		if strings.Contains(out, core) {
			t.Errorf("%s shows the password:\n%s", name, out)
		}
	}
	files, err := os.ReadDir(p.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(p.dir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), core) {
			t.Errorf("%s shows the password:\n%s", f.Name(), data)
		}
	}
	return len(files)
}

// TestSecretsStayOutOfReports runs certify with DSNs that hold a password
// (a role made for the test, on the shared server) and searches everything
// it writes for the password: stdout and stderr with -v (the suite's log
// among them), the JSON certificate, the JUnit
// and Markdown reports and $GITHUB_STEP_SUMMARY. Every DSN that must log in
// holds the password of its role, so that the test works on a server that
// asks for it (one harmless starts) as on one that trusts every login.
func TestSecretsStayOutOfReports(t *testing.T) {
	besideOthers(t)
	bin := binary(t)
	role, nologin, short := newSecretRole(t)

	t.Run("a whole run", func(t *testing.T) {
		p := newReportPaths(t)
		code, stdout, stderr := runCertify(t, bin, p.env(), append([]string{"-v", "--adapter", "reference", "--dsn", role.url(role.name, role.password, role.port)}, p.args()...)...)
		// On a server named by a DSN the run is partial: it worked.
		if code != exitPartial {
			t.Fatalf("exit code %d; want %d\nstdout:\n%s\nstderr:\n%s", code, exitPartial, stdout, stderr)
		}
		if !strings.Contains(stderr, "PASSED  double-delivery") {
			t.Errorf("-v does not show the suite's log on stderr:\n%s\n%s", stdout, stderr)
		}
		if n := checkNoSecret(t, role.core, stdout, stderr, p); n != 4 {
			t.Errorf("the run wrote %d files; want 4 (JSON, JUnit, Markdown, step summary)", n)
		}
		cert := readCertificate(t, p.json)
		if cert.Count(certificate.VerdictPass) == 0 || cert.Count(certificate.VerdictFail) != 0 {
			t.Errorf("the certificate has %s; want the rules that can run on a DSN to pass", cert.Summary())
		}
	})

	// A child that prints setup's connection (the password a field of its
	// own), the DSN it was given and the password pgx would use, then
	// crashes: every report quotes its stderr, with the password masked.
	// The DSN is given as keywords, the password from it or from
	// $PGPASSWORD.
	for _, tc := range []struct {
		name, dsn string
		env       []string
	}{
		{"a child prints its DSN", role.keywords(), nil},
		{"a child prints $PGPASSWORD", role.url(role.name, "", role.port), []string{"PGPASSWORD=" + role.password}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != nil {
				// url.UserPassword with an empty password still writes ':'.
				tc.dsn = strings.Replace(tc.dsn, role.name+":@", role.name+"@", 1)
			}
			p := newReportPaths(t)
			code, stdout, stderr := runCertify(t, bin, append(p.env(), tc.env...),
				append([]string{"-v", "--exec", execchild.Command(execchild.LeakDSN), "--dsn", tc.dsn, "--label-filter", "fixture:" + catalogid.DoubleDelivery}, p.args()...)...)
			if code != exitNotCertified {
				t.Fatalf("exit code %d; want %d\nstdout:\n%s\nstderr:\n%s", code, exitNotCertified, stdout, stderr)
			}
			checkNoSecret(t, role.core, stdout, stderr, p)
			cert := readCertificate(t, p.json)
			for _, r := range cert.Rules {
				if r.Fixture != catalogid.DoubleDelivery {
					continue
				}
				// The quote is still there, useful, with the password masked.
				if want := `with password "` + redact.Mask + `"`; r.Verdict != certificate.VerdictFail || !strings.Contains(r.Message, want) ||
					!strings.Contains(r.Message, "execchild: connecting to") || !strings.Contains(r.Message, "execchild: setup's connection: {") {
					t.Errorf("%s: %s, want a failure quoting the child's stderr with %q: %s", r.ID, r.Verdict, want, r.Message)
				}
			}
		})
	}

	// A password too short to mask (it would garble every report) is
	// shown where it is quoted, and certify says so, once.
	t.Run("a password too short to mask", func(t *testing.T) {
		code, stdout, stderr := runCertify(t, bin, nil, "--adapter", "reference", "--dsn", role.url(short, shortPassword, role.port),
			"--label-filter", "fixture:"+catalogid.DoubleDelivery)
		if code != exitPartial {
			t.Fatalf("exit code %d; want %d\nstdout:\n%s\nstderr:\n%s", code, exitPartial, stdout, stderr)
		}
		if n := strings.Count(stderr, "too short to mask"); n != 1 {
			t.Errorf("stderr warns %d times of a password too short to mask; want once:\n%s", n, stderr)
		}
	})

	// A DSN that does not work is a setup error, exit code 2, whose message
	// names the server but never the password.
	closed, err := net.Listen("tcp", net.JoinHostPort(role.host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	closedPort := uint16(closed.Addr().(*net.TCPAddr).Port)
	closed.Close()
	for _, tc := range []struct {
		name, dsn, says string
	}{
		{"the server does not listen", role.url(role.name, role.password, closedPort), "connect"},
		{"the server refuses the login", role.url(nologin, role.password, role.port), nologin},
		{"the DSN does not parse", strings.Replace(role.url(role.name, role.password, role.port), strconv.Itoa(int(role.port)), "notaport", 1), "not a valid connection string"},
		// pgx's error quotes a DSN it cannot parse, masking what its own
		// patterns take for the password: for these, only a part of it.
		{"an unclosed quote", "host=" + role.host + " password='Pw " + role.core, "not a valid connection string"},
		{"an unencoded @", "postgres://" + role.name + ":Pw@" + role.core + "@" + role.host + ":notaport/" + role.database, "not a valid connection string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newReportPaths(t)
			code, stdout, stderr := runCertify(t, bin, p.env(), append([]string{"-v", "--adapter", "reference", "--dsn", tc.dsn}, p.args()...)...)
			if code != exitUsage {
				t.Fatalf("exit code %d; want %d\nstdout:\n%s\nstderr:\n%s", code, exitUsage, stdout, stderr)
			}
			if !strings.Contains(stderr, tc.says) {
				t.Errorf("stderr does not say %q:\n%s", tc.says, stderr)
			}
			checkNoSecret(t, role.core, stdout, stderr, p)
		})
	}
}
