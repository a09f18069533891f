package pgproxy_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/internal/faulttest"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/provision"
)

// TestAuthenticationPassesThrough starts a throwaway cluster whose
// pg_hba.conf asks three roles for a password, by SCRAM-SHA-256, md5 and
// cleartext, and logs them in through the proxy: authentication is relayed
// untouched, so the right password gets in and a wrong one is refused by
// the server. It then moves the proxy from the cluster to the shared server
// with SetUpstream, logging in to each with that server's own credentials,
// so that it works whether the shared server trusts every login (a DSN's)
// or asks for its password (a server harmless starts).
func TestAuthenticationPassesThrough(t *testing.T) {
	shared := pgtest.DSN(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	srv, err := provision.Open(ctx, provision.Options{Only: provision.KindCluster, Logf: t.Logf})
	if errors.Is(err, provision.ErrNoDatabase) {
		t.Skipf("no throwaway cluster: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	checkLeaks(t)

	admin, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	roles := map[string]string{ // role: pg_hba method
		"harmless_proxy_scram":    "scram-sha-256",
		"harmless_proxy_md5":      "md5",
		"harmless_proxy_password": "password",
	}
	// Nothing trusted, as in every server harmless starts: the
	// superuser's DSN carries its password.
	hba := []string{"local all all scram-sha-256"}
	for role, method := range roles {
		encryption := "scram-sha-256"
		if method == "md5" {
			encryption = "md5"
		}
		for _, sql := range []string{
			"SET password_encryption = '" + encryption + "'",
			"CREATE ROLE " + role + " LOGIN PASSWORD 'right'",
		} {
			if _, err := admin.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		hba = append(hba, "host all "+role+" 127.0.0.1/32 "+method)
	}
	hba = append(hba, "host all all 127.0.0.1/32 scram-sha-256", "host all all ::1/128 scram-sha-256")
	var hbaFile string
	if err := admin.QueryRow(ctx, "SHOW hba_file").Scan(&hbaFile); err != nil {
		t.Fatal(err)
	}
	// The cluster is this test's own: rewrite its pg_hba.conf from SQL.
	copySQL := "COPY (SELECT l FROM unnest(ARRAY[$$" + strings.Join(hba, "$$, $$") + "$$]) WITH ORDINALITY AS u(l, n) ORDER BY n) TO '" +
		strings.ReplaceAll(hbaFile, "'", "''") + "'"
	if _, err := admin.Exec(ctx, copySQL); err != nil {
		t.Fatalf("rewrite %s: %v", hbaFile, err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}

	p := newProxy(t)
	pdsn, err := p.DSN("auth", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	login := func(role, password string) error {
		cfg, err := pgx.ParseConfig(pdsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.User, cfg.Password = role, password
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		var user string
		if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&user); err != nil {
			t.Fatal(err)
		}
		if user != role {
			t.Errorf("logged in as %s, want %s", user, role)
		}
		return nil
	}
	// The reload is asynchronous: wait until a wrong password is refused.
	eventually(t, "pg_hba.conf to be reloaded", func() bool {
		return sqlState(login("harmless_proxy_scram", "wrong")) == "28P01"
	})
	for role, method := range roles {
		t.Run(method, func(t *testing.T) {
			if err := login(role, "right"); err != nil {
				t.Errorf("%s login with the right password through the proxy: %v", method, err)
			}
			if err := login(role, "wrong"); sqlState(err) != "28P01" {
				t.Errorf("%s login with a wrong password through the proxy: %v, want SQLSTATE 28P01", method, err)
			}
		})
	}

	// SetUpstream: new connections go to the shared server, open ones stay.
	// A connection to the shared server logs in with the shared server's
	// own credentials (its DSN, rewritten to go through the proxy): a
	// server harmless starts has a password of its own, which the
	// cluster's DSN does not carry.
	onCluster := faulttest.ConnectTo(t, pdsn, "harmless-pgproxy-test")
	if err := p.Listeners("auth")[0].SetUpstream(upstreamOf(t, shared)); err != nil {
		t.Fatal(err)
	}
	sharedPDSN, err := p.DSN("auth", shared)
	if err != nil {
		t.Fatal(err)
	}
	onShared := faulttest.ConnectTo(t, sharedPDSN, "harmless-pgproxy-test")
	port := func(c *pgx.Conn) int {
		var port int
		if err := c.QueryRow(ctx, "SELECT inet_server_port()").Scan(&port); err != nil {
			t.Fatal(err)
		}
		return port
	}
	if n := len(p.Listeners("auth")); n != 1 {
		t.Errorf("the client has %d listeners after SetUpstream, want its one, now to the shared server", n)
	}
	clusterPort, sharedPort := port(onCluster), port(onShared)
	if want := upstreamOf(t, srv.DSN()); !strings.HasSuffix(want, ":"+strconv.Itoa(clusterPort)) {
		t.Errorf("the connection opened before SetUpstream is on port %d, want %s", clusterPort, want)
	}
	if want := upstreamOf(t, shared); !strings.HasSuffix(want, ":"+strconv.Itoa(sharedPort)) {
		t.Errorf("the connection opened after SetUpstream is on port %d, want %s", sharedPort, want)
	}
}
