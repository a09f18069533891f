package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// harmlessSchemas lists the schemas of db whose name starts with harmless_.
func harmlessSchemas(t *testing.T, db *pgxpool.Pool) []string {
	t.Helper()
	rows, err := db.Query(t.Context(), `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, 'harmless_') ORDER BY nspname`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// wantPartialOnADSN checks the certificate of a run of the reference on a
// server named by a DSN: partial, every rule passed but those that need a
// server the harness owns, which are not-supported and say so.
func wantPartialOnADSN(t *testing.T, cert certificate.Certificate) {
	t.Helper()
	needsOwned := notRunOnADSN(t, "reference")
	if cert.Status != certificate.StatusPartial || cert.Certified || len(cert.Rules) != len(fixtures.Rules()) {
		t.Errorf("certificate: status %s, certified %t, %d rules; want partial, not certified, %d rules", cert.Status, cert.Certified, len(cert.Rules), len(fixtures.Rules()))
	}
	for _, r := range cert.Rules {
		switch {
		case needsOwned[r.Fixture] != "":
			if r.Verdict != certificate.VerdictNotSupported || !strings.Contains(r.Message, needsOwned[r.Fixture]) {
				t.Errorf("rule %s: %s (%s); want not-supported, as it needs a server the harness owns", r.ID, r.Verdict, r.Message)
			}
		case r.Verdict != certificate.VerdictPass:
			t.Errorf("rule %s: %s (%s); want pass", r.ID, r.Verdict, r.Message)
		}
	}
}

// TestCertifyOnADSNDropsOnlyWhatHarmlessCreated runs certify of the
// reference on a database of the test's own that holds a user's schemas
// named like harmless's: one with a word for the play, one with a play
// number but no marker, one with the marker of another run, and one with
// the right marker that belongs to another role. Each holds a table with a
// row. They all survive the run, row included, and the run says why with
// -v. The leftover of a dead harmless run is dropped, and the run leaves
// none of its own schemas behind.
func TestCertifyOnADSNDropsOnlyWhatHarmlessCreated(t *testing.T) {
	besideOthers(t)
	bin := binary(t)
	other := pgtest.NewRole(t)
	dsn := pgtest.NewDatabase(t)
	db := pgtest.PoolOn(t, dsn)

	users := map[string]string{ // schema: what the log says of it
		"harmless_deadbeef_billing": "its name is not",
		"harmless_deadbeef_s1":      "it carries no marker",
		"harmless_deadbeef_s2":      `its comment "harmless run cafebabe spec s2 v1" is not the marker`,
		"harmless_deadbeef_s3":      fmt.Sprintf("it belongs to role %q", other.Name),
	}
	setup := map[string]string{
		"harmless_deadbeef_billing": "",
		"harmless_deadbeef_s1":      "",
		"harmless_deadbeef_s2":      "COMMENT ON SCHEMA harmless_deadbeef_s2 IS 'harmless run cafebabe spec s2 v1'",
		"harmless_deadbeef_s3": "ALTER SCHEMA harmless_deadbeef_s3 OWNER TO " + pgx.Identifier{other.Name}.Sanitize() +
			"; COMMENT ON SCHEMA harmless_deadbeef_s3 IS 'harmless run deadbeef spec s3 v1'",
	}
	for schema, sql := range setup {
		_, err := db.Exec(t.Context(), fmt.Sprintf(`CREATE SCHEMA %[1]s; %[2]s;
CREATE TABLE %[1]s.invoices (id int PRIMARY KEY, amount numeric NOT NULL);
INSERT INTO %[1]s.invoices VALUES (1, 42.50)`, schema, sql))
		if err != nil {
			t.Fatalf("create the user's schema %s: %v", schema, err)
		}
	}

	// A harmless run that dies without cleaning up, as a killed process
	// would: its play's schema is a leftover, to be dropped.
	gone, err := harness.Start(t.Context(), harness.Options{Provision: provision.Options{DSN: dsn}})
	if err != nil {
		t.Fatal(err)
	}
	play, err := gone.NewPlay(t.Context(), adapters.Adapter{Name: "gone"})
	if err != nil {
		t.Fatal(err)
	}
	leftover := play.Schema()
	// Its connections are cut, and it closes nothing (Run.Close would
	// close its play).
	gone.Admin().Close()
	pgtest.Abandon(t, db, gone.AppNamePrefix())

	path := filepath.Join(t.TempDir(), "c.json")
	code, stdout, stderr := runCertify(t, bin, nil, "-v", "--adapter", "reference", "--dsn", dsn, "--json", path)
	if code != exitPartial {
		t.Fatalf("exit code %d; want %d\nstdout:\n%s\nstderr:\n%s", code, exitPartial, stdout, stderr)
	}
	wantPartialOnADSN(t, readCertificate(t, path))

	for schema, why := range users {
		var amount string
		err := db.QueryRow(t.Context(), "SELECT amount::text FROM "+pgx.Identifier{schema, "invoices"}.Sanitize()+" WHERE id = 1").Scan(&amount)
		if err != nil || amount != "42.50" {
			t.Errorf("after certify, the row of the user's schema %s reads %q (%v); want 42.50", schema, amount, err)
		}
		if want := "left schema " + schema + " in place: " + why; !strings.Contains(stderr, want) {
			t.Errorf("the verbose log does not say %q:\n%s", want, stderr)
		}
	}
	if want := "dropped leftover schema " + leftover; !strings.Contains(stderr, want) {
		t.Errorf("the verbose log does not say %q:\n%s", want, stderr)
	}
	// What is left is the user's, nothing of harmless's.
	var want []string
	for schema := range users {
		want = append(want, schema)
	}
	slices.Sort(want)
	if got := harmlessSchemas(t, db); !slices.Equal(got, want) {
		t.Errorf("schemas named harmless_ after certify: %v; want the user's only, %v", got, want)
	}
}

// TestCertifyAsALeastPrivilegedRole runs certify of the reference on a
// database where its role may connect and create schemas, and nothing else:
// a role with LOGIN and a password, not a superuser, with CONNECT and
// CREATE on the database, where PUBLIC has no privilege on the database or
// on its schema public. Every rule runs and passes but those that crash the
// server, which a DSN never allows; and the role owns nothing afterwards.
func TestCertifyAsALeastPrivilegedRole(t *testing.T) {
	besideOthers(t)
	bin := binary(t)
	role := pgtest.NewRole(t)
	dsn := pgtest.NewDatabase(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := pgtest.PoolOn(t, dsn)
	quoted, database := pgx.Identifier{role.Name}.Sanitize(), pgx.Identifier{cfg.Database}.Sanitize()
	_, err = db.Exec(t.Context(), fmt.Sprintf(`REVOKE ALL ON DATABASE %[1]s FROM PUBLIC;
REVOKE ALL ON SCHEMA public FROM PUBLIC;
GRANT CONNECT, CREATE ON DATABASE %[1]s TO %[2]s`, database, quoted))
	if err != nil {
		t.Fatal(err)
	}
	var attrs string
	err = db.QueryRow(t.Context(), `SELECT concat_ws(' ', rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolcanlogin, rolreplication, rolbypassrls,
	(SELECT count(*) FROM pg_auth_members WHERE member = r.oid))
FROM pg_roles r WHERE rolname = $1`, role.Name).Scan(&attrs)
	if err != nil || attrs != "f t f f t f f 0" {
		t.Fatalf("role %s: superuser, inherit, createrole, createdb, login, replication, bypassrls, memberships = %s (%v); want a plain login role", role.Name, attrs, err)
	}

	path := filepath.Join(t.TempDir(), "c.json")
	code, stdout, stderr := runCertify(t, bin, nil, "--adapter", "reference", "--dsn", role.As(t, dsn), "--json", path)
	if code != exitPartial {
		t.Fatalf("exit code %d; want %d\nstdout:\n%s\nstderr:\n%s", code, exitPartial, stdout, stderr)
	}
	if strings.Contains(stdout+stderr, role.Password) {
		t.Errorf("the output shows the role's password")
	}
	wantPartialOnADSN(t, readCertificate(t, path))

	var owned int
	err = db.QueryRow(t.Context(), `SELECT count(*) FROM pg_namespace WHERE nspowner = (SELECT oid FROM pg_roles WHERE rolname = $1)`, role.Name).Scan(&owned)
	if err != nil || owned != 0 {
		t.Errorf("role %s owns %d schemas after certify (%v); want none: the run drops its own", role.Name, owned, err)
	}
}
