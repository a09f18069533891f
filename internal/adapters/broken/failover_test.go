package broken_test

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
	"github.com/harmless-dev/harmless/internal/connstr"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

// The helpers of the adapters whose bug shows only when the database
// fails over: a lost commit, a first host gone.

// lose deletes ev's marker and its effects behind the adapter's back, as a
// failover to a standby that lacked their commit does.
func (w *world) lose(ev adapters.Event) {
	w.t.Helper()
	pool := pgtest.Pool(w.t)
	tag, err := pool.Exec(w.t.Context(), `DELETE FROM `+kit.Table(w.schema, kit.ProcessedEventsTable)+` WHERE namespace = $1 AND event_id = $2`, ev.Namespace, ev.ID)
	if err != nil || tag.RowsAffected() != 1 {
		w.t.Fatalf("delete the marker of %s: %v, %d rows; want 1", ev, err, tag.RowsAffected())
	}
	if _, err := pool.Exec(w.t.Context(), `DELETE FROM `+ledger.Table(w.schema)+` WHERE namespace = $1 AND event_id = $2`, []byte(ev.Namespace), []byte(ev.ID)); err != nil {
		w.t.Fatalf("delete the effects of %s: %v", ev, err)
	}
}

// sibling returns a world of the built-in adapter called name, in a schema
// of its own, on w's DSN.
func (w *world) sibling(name string) *world {
	w.t.Helper()
	s := newWorld(w.t, name)
	s.dsn = w.dsn
	return s
}

// untilAcknowledged delivers ev to instance n, as the broker would, until a
// delivery is acknowledged, at most five times, and fails unless it is
// acknowledged with want. A first error is allowed: a connection the pool
// held to a server that went away fails once.
func (w *world) untilAcknowledged(n int, ev adapters.Event, want adapters.Outcome) {
	w.t.Helper()
	var errs []error
	for attempt := 1; attempt <= 5; attempt++ {
		got, err := w.deliver(n, ev, attempt)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if got != want {
			w.t.Fatalf("%s: attempt %d of %s on instance %d = %v; want %v", w.adapter.Name, attempt, ev, n, got, want)
		}
		return
	}
	w.t.Fatalf("%s: %s never acknowledged on instance %d: %v", w.adapter.Name, ev, n, errs)
}

// address is the host:port of dsn's (first) server. It skips the test when
// that is a Unix socket, which the tests' other hosts cannot stand beside.
func address(t testing.TB, dsn string) string {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		t.Skipf("the test server is reached on the Unix socket %s; the test needs it on TCP", cfg.Host)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// closedAddress is the address of a port of the loopback nothing listens
// on: a server that is down.
func closedAddress(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// withHosts returns dsn with its servers replaced by addrs (host:port
// each), in order, and target_session_attrs=read-write: the multi-host DSN
// a replicated formation gives, in dsn's form (a URL's list of hosts, or a
// keyword/value string's lists of hosts and ports).
func withHosts(t testing.TB, dsn string, addrs ...string) string {
	t.Helper()
	if connstr.IsURL(dsn) {
		user, _, rest := connstr.SplitURL(dsn)
		dsn = user + strings.Join(addrs, ",") + rest
	} else {
		var hosts, ports []string
		for _, addr := range addrs {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				t.Fatal(err)
			}
			hosts, ports = append(hosts, host), append(ports, port)
		}
		settings, err := connstr.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		settings = connstr.Set(connstr.Set(settings, "host", strings.Join(hosts, ",")), "port", strings.Join(ports, ","))
		dsn = connstr.Format(settings)
	}
	dsn, err := connstr.SetParam(dsn, "target_session_attrs", "read-write")
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// keywordForm returns dsn as a keyword/value string of its first server,
// its user, password and database, with sslmode=prefer, pgx's default: a
// TLS attempt, then a plaintext one, to each host.
func keywordForm(t testing.TB, dsn string) string {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return connstr.Format([]connstr.Setting{
		{Key: "host", Value: cfg.Host}, {Key: "port", Value: strconv.Itoa(int(cfg.Port))},
		{Key: "user", Value: cfg.User}, {Key: "password", Value: cfg.Password}, {Key: "dbname", Value: cfg.Database},
		{Key: "sslmode", Value: "prefer"},
	})
}

// TestSingleHostConnectsOnlyToTheFirstHost gives broken-single-host and
// the reference a DSN of two hosts, in both forms: with the server first
// and a closed port second, both work; with the closed port first, the
// reference finds the server and the broken adapter cannot even set up.
func TestSingleHostConnectsOnlyToTheFirstHost(t *testing.T) {
	server, closed := address(t, pgtest.DSN(t)), closedAddress(t)
	ev := event("orders", "1", "x")
	for _, form := range []struct{ name, dsn string }{
		{"URL", pgtest.DSN(t)},
		{"keyword/value with sslmode=prefer", keywordForm(t, pgtest.DSN(t))},
	} {
		t.Run(form.name+", the server first", func(t *testing.T) {
			for _, name := range []string{singleHost, reference.Name} {
				w := newWorld(t, name)
				w.dsn = withHosts(t, form.dsn, server, closed)
				w.expect(1, ev, 1, adapters.Applied)
				w.expect(1, ev, 2, adapters.Duplicate)
				w.effects(ev, 1)
			}
		})
		t.Run(form.name+", a closed port first", func(t *testing.T) {
			w := newWorld(t, singleHost)
			w.dsn = withHosts(t, form.dsn, closed, server)
			if _, err := w.open(1); err == nil {
				t.Fatalf("%s set up with its first host down; want it to reach no other", singleHost)
			} else {
				t.Logf("New: %v", err)
			}
			ref := w.sibling(reference.Name)
			ref.expect(1, ev, 1, adapters.Applied)
			ref.effects(ev, 1)
		})
	}
}

// TestCachedClaimsExpireAsTheirMarkers: broken-cached-claims's cache
// answers no longer than the markers are kept, so that retention-expiry
// passes: Purge forgets the claims it purged, and a claim another instance
// cached expires with the window, whichever instance purged.
func TestCachedClaimsExpireAsTheirMarkers(t *testing.T) {
	ev := event("orders", "1", "x")
	t.Run("Purge forgets the claims it purged", func(t *testing.T) {
		w := newWorld(t, cachedClaims)
		w.expect(1, ev, 1, adapters.Applied)
		w.purge(1, time.Now().Add(-time.Hour), 0)
		w.expect(1, ev, 2, adapters.Duplicate)
		w.purge(1, time.Now().Add(time.Hour), 1)
		w.expect(1, ev, 3, adapters.Applied)
		w.effects(ev, 2)
	})
	t.Run("a claim another instance cached expires with the window", func(t *testing.T) {
		w := newWorld(t, cachedClaims)
		t0 := time.Now()
		clock := harness.NewManualClock(t0)
		w.clock = clock
		window, eps := reference.Adapter().Declares.RedeliveryWindow, time.Millisecond
		w.expect(1, ev, 1, adapters.Applied)
		w.expect(2, ev, 2, adapters.Duplicate) // instance 2 caches the claim
		clock.Set(t0.Add(window - eps))
		w.purge(1, clock.Now().Add(-window), 0)
		w.expect(2, ev, 3, adapters.Duplicate)
		clock.Set(t0.Add(window + eps))
		w.purge(1, clock.Now().Add(-window), 1)
		w.expect(2, ev, 4, adapters.Applied)
		w.effects(ev, 2)
	})
}
