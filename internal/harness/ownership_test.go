package harness_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/provision"
)

// logLines collects what a run logs.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// about returns the lines that mention s.
func (l *logLines) about(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// startOn starts a run on the database of dsn, closed when the test ends.
func startOn(t *testing.T, dsn string, logf func(string, ...any)) *harness.Run {
	t.Helper()
	r, err := harness.Start(t.Context(), harness.Options{
		Provision: provision.Options{DSN: dsn}, DeliveryTimeout: ampleTimeout, Logf: logf,
	})
	if err != nil {
		t.Fatalf("start run: %v", err)
	}
	atEnd(t, "run "+r.ID(), r.Close)
	return r
}

// lookAlike is a schema a user made whose name looks like the harness's,
// with a table holding one row.
type lookAlike struct {
	schema string
	why    string // what makes it not the harness's, as the log says it
	setup  string // SQL after CREATE SCHEMA, %s the quoted schema
	owner  string // the schema's owner, if not the current role
}

func (l lookAlike) create(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	q := pgx.Identifier{l.schema}.Sanitize()
	sql := "CREATE SCHEMA " + q
	if l.owner != "" {
		sql += " AUTHORIZATION " + pgx.Identifier{l.owner}.Sanitize()
	}
	sql += "; " + strings.ReplaceAll(l.setup, "%s", q) + "; CREATE TABLE " + q + ".invoices (id int PRIMARY KEY, amount numeric NOT NULL)" +
		"; INSERT INTO " + q + ".invoices VALUES (1, 42.50)"
	if _, err := db.Exec(t.Context(), sql); err != nil {
		t.Fatalf("create look-alike schema %s: %v", l.schema, err)
	}
}

// intact fails the test unless the look-alike is there with its row.
func (l lookAlike) intact(t *testing.T, db *pgxpool.Pool, after string) {
	t.Helper()
	var amount string
	err := db.QueryRow(t.Context(), "SELECT amount::text FROM "+pgx.Identifier{l.schema, "invoices"}.Sanitize()+" WHERE id = 1").Scan(&amount)
	if err != nil || amount != "42.50" {
		t.Errorf("after %s, the row of the user's schema %s reads %q (%v); want 42.50", after, l.schema, amount, err)
	}
}

// lookAlikes are schemas a user could have that the harness must never
// drop, the owner being other.
func lookAlikes(other string) []lookAlike {
	return []lookAlike{
		{schema: "harmless_deadbeef_billing", why: "its name is not"},
		{schema: "harmless_deadbeef_s1", why: "no marker"},
		{schema: "harmless_deadbeef_s2", why: "not the marker", setup: "COMMENT ON SCHEMA %s IS 'harmless run cafebabe spec s2 v1'"},
		{schema: "harmless_deadbeef_s3", why: fmt.Sprintf("belongs to role %q", other), owner: other,
			setup: "COMMENT ON SCHEMA %s IS 'harmless run deadbeef spec s3 v1'"},
	}
}

// die ends run as a killed process would: its connections are cut and it
// closes nothing (Run.Close would close its plays).
func die(t *testing.T, db *pgxpool.Pool, run *harness.Run) {
	t.Helper()
	run.Admin().Close()
	pgtest.Abandon(t, db, run.AppNamePrefix())
}

// TestStartDropsOnlyTheHarnesssOwnLeftovers: on a database of its own,
// schemas named like the harness's that a user made (a word for the play,
// no marker, the marker of another run, the right marker on another role's
// schema) survive Start with their rows, each logged with the reason; so
// does the schema of a live run, and a leftover that an object outside it
// depends on. The leftovers of a run whose keeper is gone are dropped.
func TestStartDropsOnlyTheHarnesssOwnLeftovers(t *testing.T) {
	t.Parallel()
	other := pgtest.NewRole(t)
	dsn := pgtest.NewDatabase(t)
	db := pgtest.PoolOn(t, dsn)
	users := lookAlikes(other.Name)
	for _, l := range users {
		l.create(t, db)
	}

	// A run that dies without closing its plays, as a killed process
	// would: the leftovers.
	// Nothing of it is closed when the test ends: the database is dropped.
	gone, err := harness.Start(t.Context(), harness.Options{Provision: provision.Options{DSN: dsn}, DeliveryTimeout: ampleTimeout})
	if err != nil {
		t.Fatal(err)
	}
	var leftovers [2]string
	for i := range leftovers {
		play, err := gone.NewPlay(t.Context(), adapterOf("gone", fake{}))
		if err != nil {
			t.Fatal(err)
		}
		leftovers[i] = play.Schema()
	}
	leftover, depended := leftovers[0], leftovers[1]
	// A user's view on the second one's ledger: dropping that schema with
	// CASCADE would drop the view.
	if _, err := db.Exec(t.Context(), "CREATE SCHEMA reports; CREATE VIEW reports.effects AS SELECT count(*) AS n FROM "+ledger.Table(depended)); err != nil {
		t.Fatal(err)
	}
	live := startOn(t, dsn, nil)
	livePlay := newPlay(t, live, adapterOf("live", fake{}))
	die(t, db, gone)

	var log logLines
	startOn(t, dsn, log.logf)
	t.Logf("Start logged:\n%s", strings.Join(log.about(""), "\n"))

	if schemaExists(t, db, leftover) {
		t.Errorf("the leftover %s of a run whose keeper is gone survived Start", leftover)
	}
	if lines := log.about(leftover); len(lines) != 1 || !strings.Contains(lines[0], "dropped leftover schema") {
		t.Errorf("Start logged %q about the leftover %s; want that it dropped it", lines, leftover)
	}
	for _, l := range users {
		l.intact(t, db, "Start")
		if lines := log.about(l.schema); len(lines) != 1 || !strings.Contains(lines[0], "left schema "+l.schema+" in place") || !strings.Contains(lines[0], l.why) {
			t.Errorf("Start logged %q about %s; want that it left it in place as %s", lines, l.schema, l.why)
		}
	}
	for schema, why := range map[string]string{livePlay.Schema(): "still alive", depended: "view reports.effects"} {
		if !schemaExists(t, db, schema) {
			t.Errorf("Start dropped %s", schema)
		}
		if lines := log.about(schema); len(lines) != 1 || !strings.Contains(lines[0], why) {
			t.Errorf("Start logged %q about %s; want that it left it in place, saying %q", lines, schema, why)
		}
	}
	var n int
	if err := db.QueryRow(t.Context(), "SELECT n FROM reports.effects").Scan(&n); err != nil {
		t.Errorf("the user's view on a leftover's ledger: %v", err)
	}
}

// TestPlayCloseDropsOnlyWhatItCreated: a play whose schema already existed
// (CREATE SCHEMA failed on it) leaves it alone, even when it carries the
// very marker the play would have set; a play whose schema an object
// outside it depends on leaves it too, and says so.
func TestPlayCloseDropsOnlyWhatItCreated(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDatabase(t)
	db := pgtest.PoolOn(t, dsn)
	run := startOn(t, dsn, nil)

	// The name and marker of the run's next play, made first by someone
	// else.
	taken := lookAlike{
		schema: fmt.Sprintf("harmless_%s_s1", run.ID()),
		setup:  fmt.Sprintf("COMMENT ON SCHEMA %%s IS 'harmless run %s spec s1 v1'", run.ID()),
	}
	taken.create(t, db)
	if play, err := run.NewPlay(t.Context(), adapterOf("taken", fake{})); err == nil {
		play.Close(t.Context())
		t.Fatalf("NewPlay succeeded on the existing schema %s", taken.schema)
	}
	taken.intact(t, db, "a failed NewPlay")

	play, err := run.NewPlay(t.Context(), adapterOf("depended", fake{}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(t.Context(), "CREATE SCHEMA reports; CREATE VIEW reports.effects AS SELECT count(*) AS n FROM "+ledger.Table(play.Schema())); err != nil {
		t.Fatal(err)
	}
	err = play.Close(t.Context())
	if err == nil || !strings.Contains(err.Error(), "view reports.effects") {
		t.Errorf("Close with a view outside on the play's ledger: %v; want an error naming the view", err)
	}
	if !schemaExists(t, db, play.Schema()) {
		t.Errorf("Close dropped %s, and the user's view with it", play.Schema())
	}
	if _, err := db.Exec(t.Context(), "DROP VIEW reports.effects"); err != nil {
		t.Fatal(err)
	}
	// Without the view, closing again drops it.
	if err := play.Close(t.Context()); err != nil {
		t.Errorf("Close once the view is gone: %v", err)
	}
	if schemaExists(t, db, play.Schema()) {
		t.Errorf("schema %s survived Close", play.Schema())
	}
}

// TestPlaySchemaCarriesItsMarker: the schema of a play has the harness's
// marker and belongs to the run's role from the moment it exists.
func TestPlaySchemaCarriesItsMarker(t *testing.T) {
	t.Parallel()
	run := startRun(t, ampleTimeout)
	play := newPlay(t, run, adapterOf("marked", fake{}))
	var comment *string
	var mine bool
	err := run.Admin().QueryRow(t.Context(), `SELECT obj_description(oid, 'pg_namespace'), pg_get_userbyid(nspowner) = current_user
FROM pg_namespace WHERE nspname = $1`, play.Schema()).Scan(&comment, &mine)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("harmless run %s spec s1 v1", run.ID()); comment == nil || *comment != want || !mine {
		t.Errorf("schema %s: comment %v, owned by the current role %t; want %q and true", play.Schema(), comment, mine, want)
	}
}

// TestStartNeedsCreateOnTheDatabase: a role that may connect but not create
// schemas gets one error at Start that names the missing grant, not a
// failure in every play.
func TestStartNeedsCreateOnTheDatabase(t *testing.T) {
	t.Parallel()
	role := pgtest.NewRole(t)
	dsn := pgtest.NewDatabase(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	database := pgx.Identifier{cfg.Database}.Sanitize()
	_, err = pgtest.PoolOn(t, dsn).Exec(t.Context(), fmt.Sprintf("REVOKE ALL ON DATABASE %s FROM PUBLIC; GRANT CONNECT ON DATABASE %s TO %s",
		database, database, pgx.Identifier{role.Name}.Sanitize()))
	if err != nil {
		t.Fatal(err)
	}
	r, err := harness.Start(t.Context(), harness.Options{Provision: provision.Options{DSN: role.As(t, dsn)}})
	if err == nil {
		r.Close(context.Background())
		t.Fatal("Start succeeded for a role that may not create schemas")
	}
	want := "GRANT CREATE ON DATABASE " + database + " TO " + pgx.Identifier{role.Name}.Sanitize()
	if !strings.Contains(err.Error(), want) {
		t.Errorf("Start: %v; want an error saying %q", err, want)
	}
}
