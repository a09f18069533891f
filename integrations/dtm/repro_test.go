package dtm_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/dtm-labs/dtm/client/dtmcli"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"
)

// barrierDB opens database/sql on $HARMLESS_DSN with dtm's barrier table
// (sqls/dtmcli.barrier.postgres.sql) in a schema of its own, dropped when
// the test ends, and returns the table's qualified name.
func barrierDB(t *testing.T) (*sql.DB, string) {
	t.Helper()
	dsn := os.Getenv("HARMLESS_DSN")
	if dsn == "" {
		t.Skip("HARMLESS_DSN is not set: the repro needs a PostgreSQL server")
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	schema := pgx.Identifier{fmt.Sprintf("dtm_repro_%s", strings.ToLower(t.Name()))}.Sanitize()
	ctx := context.Background()
	stmts := []string{
		`DROP SCHEMA IF EXISTS ` + schema + ` CASCADE`,
		`CREATE SCHEMA ` + schema,
		`CREATE SEQUENCE ` + schema + `.barrier_seq`,
		`CREATE TABLE ` + schema + `.barrier(
			id bigint NOT NULL DEFAULT NEXTVAL ('` + strings.ReplaceAll(schema, "'", "''") + `.barrier_seq'),
			trans_type varchar(45) default '',
			gid varchar(128) default '',
			branch_id varchar(128) default '',
			op varchar(45) default '',
			barrier_id varchar(45) default '',
			reason varchar(45) default '',
			create_time timestamp(0) with time zone DEFAULT NULL,
			update_time timestamp(0) with time zone DEFAULT NULL,
			PRIMARY KEY(id),
			CONSTRAINT uniq_barrier unique(gid, branch_id, op, barrier_id))`,
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`) })
	return db, schema + ".barrier"
}

// call runs busi inside a msg action barrier for gid and branch, as a dtm
// consumer does, and reports whether busi ran.
func call(t *testing.T, db *sql.DB, table, gid, branch string, busi func(*sql.Tx) error) (bool, error) {
	t.Helper()
	bb, err := dtmcli.BarrierFrom("msg", gid, branch, "action")
	if err != nil {
		t.Fatal(err)
	}
	bb.DBType, bb.BarrierTableName = dtmcli.DBTypePostgres, table
	ran := false
	err = bb.CallWithDB(db, func(tx *sql.Tx) error { ran = true; return busi(tx) })
	return ran, err
}

// TestReproConflictDetected: the barrier keys only on (gid, branch_id, op,
// barrier_id) and never sees the message body, so a second message with
// the same gid and another body is silently skipped as a duplicate.
//
// Reproduces: conflicting-payload.conflict-detected
// Cause: the barrier keys on gid, branch and op and never sees the payload, so a conflicting copy is skipped as a duplicate
func TestReproConflictDetected(t *testing.T) {
	db, table := barrierDB(t)
	var bodies []string
	for _, body := range []string{`{"amount":10}`, `{"amount":99}`} {
		ran, err := call(t, db, table, "order-1", "orders", func(*sql.Tx) error { bodies = append(bodies, body); return nil })
		if err != nil {
			t.Fatalf("call with %s: %v", body, err)
		}
		t.Logf("body %s: busi ran %v, Call returned nil", body, ran)
	}
	if len(bodies) != 1 || bodies[0] != `{"amount":10}` {
		t.Fatalf("business calls ran for %v; want only the first body", bodies)
	}
}

// TestReproIdentityTooLong: the barrier table's gid and branch_id are
// varchar(128) and dtm checks no length, so a longer id or namespace fails
// at the INSERT with SQLSTATE 22001 on every delivery, never refused as bad
// input nor processed (bad-input, identity-fidelity.length-kept and
// .namespace-kept).
//
// Reproduces: bad-input.exactly-once-or-rejected, identity-fidelity.length-kept
// Cause: gid and branch_id are varchar(128) and dtm checks no length, so a longer identity fails with SQLSTATE 22001 on every delivery and is never refused
func TestReproIdentityTooLong(t *testing.T) {
	db, table := barrierDB(t)
	long := strings.Repeat("k", 129)
	for _, c := range []struct{ gid, branch string }{{long, "orders"}, {"order-1", long}} {
		for attempt := 1; attempt <= 2; attempt++ {
			ran, err := call(t, db, table, c.gid, c.branch, func(*sql.Tx) error { return nil })
			if ran || !isSQLState(err, "22001") {
				t.Fatalf("gid %d bytes, branch %d bytes, attempt %d: busi ran %v, err %v; want no business call and SQLSTATE 22001", len(c.gid), len(c.branch), attempt, ran, err)
			}
			t.Logf("gid %d bytes, branch %d bytes, attempt %d: %v", len(c.gid), len(c.branch), attempt, err)
		}
	}
}

// TestReproIdentityNotText: the barrier stores gid and branch_id as text
// and dtm passes them through unchecked, so an identity with invalid UTF-8
// or a NUL byte fails at the INSERT with SQLSTATE 22021 on every delivery
// (bad-input, identity-fidelity.bytes-kept and .namespace-kept,
// namespace-isolation.unambiguous-identity).
//
// Reproduces: bad-input.exactly-once-or-rejected, identity-fidelity.bytes-kept, identity-fidelity.namespace-kept, namespace-isolation.unambiguous-identity
// Cause: gid and branch_id are text and dtm checks nothing, so invalid UTF-8 or a NUL byte fails with SQLSTATE 22021 on every delivery and is never refused
func TestReproIdentityNotText(t *testing.T) {
	db, table := barrierDB(t)
	for _, c := range []struct{ gid, branch string }{{"a\xff", "orders"}, {"nul-\x00-id", "orders"}, {"order-1", "orders\x00"}, {"caf\xe9", "orders"}} {
		for attempt := 1; attempt <= 2; attempt++ {
			ran, err := call(t, db, table, c.gid, c.branch, func(*sql.Tx) error { return nil })
			if ran || !isSQLState(err, "22021") {
				t.Fatalf("gid %q branch %q attempt %d: busi ran %v, err %v; want no business call and SQLSTATE 22021", c.gid, c.branch, attempt, ran, err)
			}
			t.Logf("gid %q branch %q attempt %d: %v", c.gid, c.branch, attempt, err)
		}
	}
}

func isSQLState(err error, code string) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == code
}
