package connstr

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// pgEnv are the environment variables pgx reads a setting from when the
// connection string has none. The tests clear them, so that what pgx
// reads comes from the string alone, as PartsOf's does.
var pgEnv = []string{"PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGAPPNAME", "PGCONNECT_TIMEOUT",
	"PGSSLMODE", "PGSSLKEY", "PGSSLCERT", "PGSSLCERTMODE", "PGSSLSNI", "PGSSLROOTCERT", "PGSSLPASSWORD", "PGSSLNEGOTIATION",
	"PGTARGETSESSIONATTRS", "PGSERVICE", "PGSERVICEFILE", "PGTZ", "PGOPTIONS", "PGMINPROTOCOLVERSION", "PGMAXPROTOCOLVERSION",
	"PGCHANNELBINDING", "PGREQUIREAUTH"}

// clearPGEnv empties every variable of pgEnv, and points pgx's password
// file at one that does not exist, for the rest of the test.
func clearPGEnv(tb interface{ Setenv(k, v string) }) {
	for _, k := range pgEnv {
		tb.Setenv(k, "")
	}
	tb.Setenv("PGPASSFILE", "/nonexistent/harmless-test-pgpass")
}

func TestPartsOf(t *testing.T) {
	clearPGEnv(t)
	type parts struct {
		hosts              []string
		ports              []int
		user, pw, database string
		params             map[string]string
	}
	for _, tc := range []struct {
		dsn  string
		want parts
	}{
		// The DSN of one server, as harmless gives it.
		{"postgres://postgres:s3cret@127.0.0.1:41001/postgres?sslmode=disable&application_name=harmless-1a2b-s3-i1",
			parts{[]string{"127.0.0.1"}, []int{41001}, "postgres", "s3cret", "postgres", map[string]string{"sslmode": "disable", "application_name": "harmless-1a2b-s3-i1"}}},
		// A formation: every host, in order, each with its port.
		{"postgres://postgres:pw@127.0.0.1:41001,127.0.0.1:41002/postgres?sslmode=disable&target_session_attrs=read-write",
			parts{[]string{"127.0.0.1", "127.0.0.1"}, []int{41001, 41002}, "postgres", "pw", "postgres", map[string]string{"sslmode": "disable", "target_session_attrs": "read-write"}}},
		{"host=127.0.0.1,127.0.0.1 port=41001,41002 user=postgres password=pw dbname=postgres target_session_attrs=read-write",
			parts{[]string{"127.0.0.1", "127.0.0.1"}, []int{41001, 41002}, "postgres", "pw", "postgres", map[string]string{"target_session_attrs": "read-write"}}},
		// One port for every host; a host without a port has 5432.
		{"host=a,b port=6000 user=u", parts{[]string{"a", "b"}, []int{6000, 6000}, "u", "", "", map[string]string{}}},
		{"postgresql://a,b:6001/db", parts{[]string{"a", "b"}, []int{5432, 6001}, "", "", "db", map[string]string{}}},
		// Passwords percent-encoded in a URL, quoted and escaped in
		// keywords, are given decoded.
		{"postgres://al%69ce:p%40ss%3Aw%2Fo%20rd%25@h/d%62", parts{[]string{"h"}, []int{5432}, "alice", "p@ss:w/o rd%", "db", map[string]string{}}},
		{`user=alice password='it\'s a \\ pw' dbname=db host=h`, parts{[]string{"h"}, []int{5432}, "alice", `it's a \ pw`, "db", map[string]string{}}},
		// IPv6 hosts, in brackets in a URL, bare in keywords.
		{"postgres://u@[::1]:5433,[fe80::1%25eth0]/db", parts{[]string{"::1", "fe80::1%eth0"}, []int{5433, 5432}, "u", "", "db", map[string]string{}}},
		{"host=::1 port=5433", parts{[]string{"::1"}, []int{5433}, "", "", "", map[string]string{}}},
		// A Unix-socket directory: in a URL percent-encoded or in the query.
		{"postgres://%2Fvar%2Frun%2Fpostgresql:5433/db", parts{[]string{"/var/run/postgresql"}, []int{5433}, "", "", "db", map[string]string{}}},
		{"postgres:///db?host=/tmp&port=5439&user=me", parts{[]string{"/tmp"}, []int{5439}, "me", "", "db", map[string]string{}}},
		{"host=/var/run/postgresql dbname=db", parts{[]string{"/var/run/postgresql"}, []int{5432}, "", "", "db", map[string]string{}}},
		// No host: one empty host, the driver's default.
		{"dbname=db", parts{[]string{""}, []int{5432}, "", "", "db", map[string]string{}}},
		{"postgres://", parts{[]string{""}, []int{5432}, "", "", "", map[string]string{}}},
		// The query overrides the rest; the last repeated key wins; an
		// empty user is no user; ssl=true is sslmode=require.
		{"postgres://a:b@h/d?user=c&password=e&dbname=f&sslmode=disable&ssl=true", parts{[]string{"h"}, []int{5432}, "c", "e", "f", map[string]string{"sslmode": "require"}}},
		{"user=a user='' password=x password=y options='-c a=b'", parts{[]string{""}, []int{5432}, "a", "y", "", map[string]string{"options": "-c a=b"}}},
	} {
		got, err := PartsOf(tc.dsn)
		if err != nil {
			t.Errorf("PartsOf(%q): %v", tc.dsn, err)
			continue
		}
		w := tc.want
		if !slices.Equal(got.Hosts, w.hosts) || !slices.Equal(got.Ports, w.ports) || got.User != w.user || got.Password != w.pw ||
			got.Database != w.database || !maps.Equal(got.Params, w.params) {
			t.Errorf("PartsOf(%q) = %+v; want %+v", tc.dsn, got, w)
		}
		checkAsPgx(t, tc.dsn, got)
	}
}

func TestPartsOfRefusesWhatPgxRefuses(t *testing.T) {
	clearPGEnv(t)
	for _, dsn := range []string{
		"host=a,b,c port=1,2", "host=a port=1,2", "postgres://a:1,b:2,c/db?port=1,2", "port=0", "port=65536", "port=x",
		"postgres://h:notaport/db", "postgres://[::1/db", "postgres://[]/db", "postgres://[::1]x/db",
		"postgres://u:p%2@h/db", "postgres://u:p%00@h/db", "postgres://u:p w@h/db", "postgres://h/db?x", "postgres://h/db?a=b=c",
		"user='unterminated", "postgres://h/db?x=1\x00",
	} {
		if got, err := PartsOf(dsn); err == nil {
			t.Errorf("PartsOf(%q) = %+v; want an error", dsn, got)
		}
		if _, err := pgconn.ParseConfig(dsn); err == nil {
			t.Errorf("pgx accepts %q, which PartsOf refuses", dsn)
		}
	}
}

// TestPartsOfHidesThePassword: an error about a malformed password does
// not quote it.
func TestPartsOfHidesThePassword(t *testing.T) {
	for _, dsn := range []string{"postgres://u:Secret%zz@h/db", "postgres://u:Sec ret@h/db", "postgres://h/db?password=Secret%00"} {
		_, err := PartsOf(dsn)
		if err == nil || strings.Contains(err.Error(), "Sec") {
			t.Errorf("PartsOf(%q): %v; want an error that does not quote the password", dsn, err)
		}
	}
}

// checkAsPgx fails the test unless p is what pgx makes of dsn, in the
// environment clearPGEnv leaves: the same hosts and ports in order (an
// empty host is pgx's default one), user, password and database, and
// the run-time parameters among p.Params.
func checkAsPgx(t *testing.T, dsn string, p Parts) {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return // pgx refuses a value (an sslmode, a missing service file), not the syntax
	}
	// pgx tries each host once per TLS setting (sslmode=prefer: with TLS,
	// then without): such a pair is one host of the string.
	var tried []*pgconn.FallbackConfig
	tried = append(tried, &pgconn.FallbackConfig{Host: cfg.Host, Port: cfg.Port, TLSConfig: cfg.TLSConfig})
	tried = append(tried, cfg.Fallbacks...)
	var hosts []string
	var ports []int
	for i := 0; i < len(tried); i++ {
		f := tried[i]
		hosts, ports = append(hosts, f.Host), append(ports, int(f.Port))
		if i+1 < len(tried) {
			n := tried[i+1]
			if n.Host == f.Host && n.Port == f.Port && (n.TLSConfig == nil) != (f.TLSConfig == nil) {
				i++
			}
		}
	}
	if len(hosts) != len(p.Hosts) || !slices.Equal(ports, p.Ports) {
		t.Fatalf("PartsOf(%q) has hosts %q and ports %v; pgx tries %q, %v", dsn, p.Hosts, p.Ports, hosts, ports)
	}
	for i, h := range p.Hosts {
		if h != "" && h != hosts[i] {
			t.Fatalf("PartsOf(%q) has hosts %q; pgx tries %q", dsn, p.Hosts, hosts)
		}
	}
	if p.User != "" && p.User != cfg.User {
		t.Fatalf("PartsOf(%q) has user %q; pgx %q", dsn, p.User, cfg.User)
	}
	if p.Password != cfg.Password || p.Database != cfg.Database {
		t.Fatalf("PartsOf(%q) has password %q and database %q; pgx %q and %q", dsn, p.Password, p.Database, cfg.Password, cfg.Database)
	}
	for k, v := range cfg.RuntimeParams {
		if p.Params[k] != v {
			t.Fatalf("PartsOf(%q) has parameters %q; pgx's run-time parameters are %q", dsn, p.Params, cfg.RuntimeParams)
		}
	}
	for k, v := range p.Params {
		if rv, ok := cfg.RuntimeParams[k]; ok && rv != v {
			t.Fatalf("PartsOf(%q) has parameters %q; pgx's run-time parameters are %q", dsn, p.Params, cfg.RuntimeParams)
		}
	}
}

// refusesSyntax reports whether pgx's error err refuses a connection
// string for its syntax, its ports or their count, as PartsOf must too,
// rather than for a value it checks when it connects.
func refusesSyntax(err error) bool {
	for _, msg := range []string{"failed to parse as URL", "failed to parse as keyword/value", "port numbers to", "invalid port"} {
		if strings.Contains(err.Error(), msg) {
			return true
		}
	}
	return false
}

// FuzzPartsOf: whatever the string, PartsOf never panics, refuses nothing
// pgx accepts, accepts nothing pgx refuses for its syntax or ports, and
// reads what it accepts as pgx reads it (checkAsPgx);
// its hosts and ports are as many, and every port is a port.
func FuzzPartsOf(f *testing.F) {
	clearPGEnv(f)
	for _, seed := range []string{
		"postgres://postgres:pw@127.0.0.1:41001,127.0.0.1:41002/postgres?sslmode=disable&target_session_attrs=read-write&application_name=a",
		"host=127.0.0.1,127.0.0.1 port=41001,41002 user=postgres password='p w' dbname=postgres sslmode=disable",
		"postgres://al%69ce:p%40ss@[::1]:5433,h/db?ssl=true", "postgres://%2Ftmp/db?host=/var/run&port=1",
		"postgresql://a,b:6001/db", "postgres://?@h?x=1", "host=a,b port=1", "user= dbname=x", "postgres://h/db?a=b=c",
		"postgres://h/?dbname=x&host=a,b&port=1,2&user=u&password=p%20w", "dbname=a dbname=b host=c,d port=1,2,3", "host=a port=1,2",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		p, err := PartsOf(dsn)
		if err != nil {
			if _, perr := pgconn.ParseConfig(dsn); perr == nil {
				t.Fatalf("PartsOf(%q) refused what pgx accepts: %v", dsn, err)
			}
			return
		}
		if _, perr := pgconn.ParseConfig(dsn); perr != nil && refusesSyntax(perr) {
			t.Fatalf("PartsOf(%q) accepted what pgx refuses for its syntax or ports: %v", dsn, perr)
		}
		if len(p.Hosts) == 0 || len(p.Hosts) != len(p.Ports) {
			t.Fatalf("PartsOf(%q) has hosts %q and ports %v", dsn, p.Hosts, p.Ports)
		}
		for _, port := range p.Ports {
			if port < 1 || port > 65535 {
				t.Fatalf("PartsOf(%q) has ports %v", dsn, p.Ports)
			}
		}
		for k := range p.Params {
			if partsKeys[k] || k == "dbname" {
				t.Fatalf("PartsOf(%q) has %q among its parameters", dsn, k)
			}
		}
		checkAsPgx(t, dsn, p)
	})
}
