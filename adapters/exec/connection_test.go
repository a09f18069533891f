package exec

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/exec/protocol"
	"github.com/harmless-dev/harmless/internal/connstr"
	"github.com/harmless-dev/harmless/internal/execchild"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

// TestSetupGivesTheConnectionInParts: setup's connection holds the DSN's
// hosts and ports in order, its user, password and database, and every
// other setting, for a DSN of one host and one of two, each as a URL and
// as keywords, with a password that a URL must percent-encode and
// keywords must quote. A child that connects with the connection alone,
// never the DSN, applies an event through it: on two hosts the first
// refuses connections, and the child connects to the second, as a
// driver that follows a failover must.
func TestSetupGivesTheConnectionInParts(t *testing.T) {
	adapter, _ := probe(t, execchild.FromConnection, Config{})
	cfg, err := pgx.ParseConfig(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	host, port, database := cfg.Host, int(cfg.Port), cfg.Database
	role := pgtest.NewRole(t)
	password := "p@ss:w/o rd%'q\\-" + role.Password
	pool := pgtest.Pool(t)
	alter := fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", pgx.Identifier{role.Name}.Sanitize(), strings.ReplaceAll(password, "'", "''"))
	if _, err := pool.Exec(t.Context(), alter); err != nil {
		t.Fatalf("%s: %v", alter, err)
	}
	closed, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", "0"))
	if err != nil {
		t.Fatal(err)
	}
	refusing := closed.Addr().(*net.TCPAddr).Port
	closed.Close()

	const app = "harmless-connection-test"
	urlOf := func(hosts []string, ports []int, query string) string {
		netlocs := make([]string, len(hosts))
		for i, h := range hosts {
			netlocs[i] = hostForURL(h) + ":" + strconv.Itoa(ports[i])
		}
		return "postgres://" + url.UserPassword(role.Name, password).String() + "@" + strings.Join(netlocs, ",") + "/" + url.PathEscape(database) + "?" + query
	}
	keywordsOf := func(hosts []string, ports []int, extra ...connstr.Setting) string {
		p := make([]string, len(ports))
		for i := range ports {
			p[i] = strconv.Itoa(ports[i])
		}
		return connstr.Format(append([]connstr.Setting{
			{Key: "host", Value: strings.Join(hosts, ",")}, {Key: "port", Value: strings.Join(p, ",")},
			{Key: "user", Value: role.Name}, {Key: "password", Value: password}, {Key: "dbname", Value: database},
		}, extra...))
	}
	one, two := []string{host}, []string{"127.0.0.1", host}
	onePort, twoPorts := []int{port}, []int{refusing, port}
	single := map[string]string{"sslmode": "disable", "application_name": app}
	formation := map[string]string{"sslmode": "disable", "target_session_attrs": "read-write", "application_name": app}
	for _, tc := range []struct {
		name   string
		dsn    string
		hosts  []string
		ports  []int
		params map[string]string
	}{
		{"one host, a URL", urlOf(one, onePort, "sslmode=disable&application_name="+app), one, onePort, single},
		{"one host, keywords", keywordsOf(one, onePort, connstr.Setting{Key: "sslmode", Value: "disable"}, connstr.Setting{Key: "application_name", Value: app}),
			one, onePort, single},
		{"two hosts, a URL", urlOf(two, twoPorts, "sslmode=disable&target_session_attrs=read-write&application_name="+app), two, twoPorts, formation},
		{"two hosts, keywords", keywordsOf(two, twoPorts, connstr.Setting{Key: "sslmode", Value: "disable"},
			connstr.Setting{Key: "target_session_attrs", Value: "read-write"}, connstr.Setting{Key: "application_name", Value: app}), two, twoPorts, formation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := env(t)
			schema, grantee := pgx.Identifier{e.Schema}.Sanitize(), pgx.Identifier{role.Name}.Sanitize()
			for _, grant := range []string{
				fmt.Sprintf("GRANT USAGE, CREATE ON SCHEMA %s TO %s", schema, grantee),
				fmt.Sprintf("GRANT ALL ON ALL TABLES IN SCHEMA %s TO %s", schema, grantee),
				fmt.Sprintf("GRANT ALL ON ALL SEQUENCES IN SCHEMA %s TO %s", schema, grantee),
			} {
				if _, err := pool.Exec(t.Context(), grant); err != nil {
					t.Fatalf("%s: %v", grant, err)
				}
			}
			e.DSN = tc.dsn
			impl := instance(t, adapter, e)
			want := protocol.Connection{Hosts: tc.hosts, Ports: tc.ports, User: role.Name, Password: password, Database: database, Parameters: tc.params}
			if got := impl.setup.Connection; !sameConnection(got, want) {
				t.Errorf("setup's connection for %s is\n%+v; want\n%+v", tc.dsn, got, want)
			}
			if got, err := deliver(t, impl, "1", testTimeout); err != nil || got != adapters.Applied {
				t.Fatalf("a delivery through the connection alone: %v, %v; want applied", got, err)
			}
			entries, err := ledger.Entries(context.Background(), pool, e.Schema, "exec-test", "1")
			if err != nil || len(entries) != 1 {
				t.Errorf("the ledger holds %d effects (%v); want 1", len(entries), err)
			}
			if !slices.ContainsFunc(sessionsOf(t, role.Name), func(a string) bool { return a == app }) {
				t.Errorf("no session of %s is named %q: the child did not keep the parameters", role.Name, app)
			}
		})
	}
}

// hostForURL writes host as a connection URL's host: an IPv6 address in
// brackets, a Unix-socket directory percent-encoded.
func hostForURL(host string) string {
	switch {
	case strings.HasPrefix(host, "/"):
		return url.PathEscape(host)
	case strings.Contains(host, ":"):
		return "[" + host + "]"
	}
	return host
}

func sameConnection(a, b protocol.Connection) bool {
	return slices.Equal(a.Hosts, b.Hosts) && slices.Equal(a.Ports, b.Ports) && a.User == b.User && a.Password == b.Password &&
		a.Database == b.Database && maps.Equal(a.Parameters, b.Parameters)
}

// sessionsOf returns the application_name of each session of role.
func sessionsOf(t *testing.T, role string) []string {
	t.Helper()
	rows, err := pgtest.Pool(t).Query(t.Context(), "SELECT application_name FROM pg_stat_activity WHERE usename = $1", role)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestProtocolPageShowsTheConnection: the setup request that
// docs/protocol.md shows carries the connection a run sends for the DSN
// it shows.
func TestProtocolPageShowsTheConnection(t *testing.T) {
	page, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	var setup struct {
		Method string
		Params protocol.SetupParams
	}
	for i, block := range strings.Split(string(page), "```") {
		body, ok := strings.CutPrefix(block, "json\n")
		if i%2 == 0 || !ok || !strings.Contains(body, `"method": "setup"`) {
			continue
		}
		if err := json.Unmarshal([]byte(body), &setup); err != nil {
			t.Fatalf("docs/protocol.md's setup request is not JSON: %v\n%s", err, body)
		}
		break
	}
	if setup.Method != "setup" {
		t.Fatal(`docs/protocol.md shows no setup request (a json block with "method": "setup")`)
	}
	want, err := connectionOf(setup.Params.DSN)
	if err != nil {
		t.Fatalf("docs/protocol.md's setup shows the DSN %q: %v", setup.Params.DSN, err)
	}
	if !sameConnection(setup.Params.Connection, want) {
		t.Errorf("docs/protocol.md's setup shows the connection\n%+v\nwhere a run sends\n%+v", setup.Params.Connection, want)
	}
}
