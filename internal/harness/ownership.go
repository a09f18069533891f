package harness

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// On a server named by a DSN the database is the user's: harmless may drop
// only what it can prove it created. A schema is the harness's when all
// three hold:
//
//   - its name is exactly harmless_<run id>_<play>, the run id 8 lowercase
//     hex digits and the play s1, s2, ... as [Run.NewPlay] names the run's
//     plays in turn;
//   - its owner (nspowner) is the role the harness connects as;
//   - its comment is exactly [schemaMarker] of that run id and play, which
//     [Play.install] sets in the same transaction as CREATE SCHEMA, so that
//     no schema of the harness ever exists without it.
//
// A schema named like one of the harness's but created by hand carries no
// marker; one whose marker was copied but that belongs to another role
// fails the owner test. Neither is ever dropped.

// schemaMarkerVersion ends every marker: a later format changes it, and
// markers of another format are not recognised (their schemas are left in
// place rather than guessed at).
const schemaMarkerVersion = "v1"

// playSchemaPattern is the exact name of a play's schema; group 1 is the
// run id, group 2 the play's name.
var playSchemaPattern = regexp.MustCompile(`^harmless_([0-9a-f]{8})_(s[1-9][0-9]{0,18})$`)

// schemaMarker is the comment the harness puts on the schema of the play
// named play (s1, s2, ...) of run runID, e.g. "harmless run 1a2b3c4d spec s3 v1". The word "spec" in
// it predates the name [Play] and stays: s3 names the run's third play,
// and a marker in another wording would not be recognised, so the
// leftovers of earlier runs would never be cleaned up. A new wording needs
// a new [schemaMarkerVersion] and the recognition of v1 besides.
func schemaMarker(runID, play string) string {
	return fmt.Sprintf("harmless run %s spec %s %s", runID, play, schemaMarkerVersion)
}

// schemaFacts is what the catalog says of a schema, as far as ownership
// goes.
type schemaFacts struct {
	OID     uint32
	Name    string
	Owner   string  // the owning role's name
	Mine    bool    // owned by the current role
	Comment *string // nil without one
}

// schemaFactsSQL reads schemaFacts of the schemas matching a WHERE clause.
const schemaFactsSQL = `SELECT n.oid, n.nspname AS name, pg_get_userbyid(n.nspowner) AS owner,
	n.nspowner = (SELECT r.oid FROM pg_roles r WHERE r.rolname = current_user) AS mine,
	obj_description(n.oid, 'pg_namespace') AS comment
FROM pg_namespace n `

// ownership decides whether f is a schema the harness created. It returns
// the schema's run id when it is; otherwise why not, in words for the log.
func (f schemaFacts) ownership() (runID string, notOurs string) {
	m := playSchemaPattern.FindStringSubmatch(f.Name)
	if m == nil {
		return "", "its name is not harmless_<8 hex digits>_s<number>"
	}
	if !f.Mine {
		return "", fmt.Sprintf("it belongs to role %q, not to the role harmless connects as", f.Owner)
	}
	want := schemaMarker(m[1], m[2])
	switch {
	case f.Comment == nil:
		return "", "it carries no marker (harmless comments every schema it creates)"
	case *f.Comment != want:
		return "", fmt.Sprintf("its comment %q is not the marker %q", truncate(*f.Comment, 80), want)
	}
	return m[1], ""
}

// truncate shortens s for a log line.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// notOursError is dropOwnSchema's refusal: the schema is not the
// harness's to drop, for reason.
type notOursError struct{ reason string }

func (e *notOursError) Error() string { return "not harmless's to drop: " + e.reason }

// dropOwnSchema drops schema, with everything in it, if it is the
// harness's (see [schemaFacts.ownership]) and nothing outside it depends on
// anything in it: DROP SCHEMA ... CASCADE would drop such an object too (a
// view elsewhere on one of its tables, a foreign key from another table, a
// trigger elsewhere calling one of its functions, a column of its type),
// and that object is not the harness's. The checks and the drop run in one
// transaction. It reports whether the schema existed; a refusal is a
// *notOursError that says why.
func dropOwnSchema(ctx context.Context, db *pgxpool.Pool, schema string) (existed bool, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, schemaFactsSQL+`WHERE n.nspname = $1`, schema)
		if err != nil {
			return err
		}
		found, err := pgx.CollectRows(rows, pgx.RowToStructByName[schemaFacts])
		if err != nil || len(found) == 0 {
			return err
		}
		existed = true
		if _, notOurs := found[0].ownership(); notOurs != "" {
			return &notOursError{notOurs}
		}
		outside, err := dependentsOutside(ctx, tx, found[0].OID)
		if err != nil {
			return err
		}
		if len(outside) > 0 {
			return &notOursError{"objects outside it depend on it, and dropping it would drop them too: " + strings.Join(outside, "; ")}
		}
		// A lock someone else holds on the schema's tables (a connection
		// the implementation opened around the proxy, left in a
		// transaction) would hold the drop, and the run's end, for as long
		// as it stays: the drop gives up instead, and says so.
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", dropLockTimeout.Milliseconds())); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == lockNotAvailable {
			return fmt.Errorf("waited %s for a lock on its tables that another connection holds: %w", dropLockTimeout, err)
		}
		return err
	})
	var notOurs *notOursError
	if err != nil && !errors.As(err, &notOurs) {
		return existed, fmt.Errorf("drop schema %s: %w", schema, err)
	}
	return existed, err
}

// dropLockTimeout bounds the wait of a schema's drop for the locks on its
// tables: the harness's own are released before (see [Play.Close]), and
// the implementation's connections through the proxy are ended.
const dropLockTimeout = 10 * time.Second

// lockNotAvailable is SQLSTATE lock_not_available, which a statement that
// ran out of its lock_timeout fails with.
const lockNotAvailable = "55P03"

// maxOutside bounds the objects dependentsOutside names.
const maxOutside = 10

// dependentsOutside describes the objects outside the schema of oid that
// DROP SCHEMA ... CASCADE would drop with it (at most maxOutside of them).
// It follows pg_depend from the schema to everything that depends on it,
// directly or not, as the drop does, and keeps what lies in another schema:
// for an object without a schema of its own (a trigger, a rule, a column
// default, a policy), the schema of its table. Objects without a schema
// that are not attached to a table (a cast, an extension, default
// privileges) count as outside. The toast tables of the schema's tables
// live in pg_toast and count as inside. The walk over-approximates (it
// follows the dependents of a whole object when only one of its columns is
// reached), which can only make it refuse more.
func dependentsOutside(ctx context.Context, tx pgx.Tx, oid uint32) ([]string, error) {
	rows, err := tx.Query(ctx, `WITH RECURSIVE reached(classid, objid, objsubid) AS (
	SELECT 'pg_namespace'::regclass::oid, $1::oid, 0
	UNION
	SELECT d.classid, d.objid, d.objsubid
	FROM pg_depend d JOIN reached r
	  ON d.refclassid = r.classid AND d.refobjid = r.objid AND (r.objsubid = 0 OR d.refobjsubid = r.objsubid)
)
SELECT pg_describe_object(r.classid, r.objid, r.objsubid)
FROM reached r
CROSS JOIN LATERAL pg_identify_object(r.classid, r.objid, r.objsubid) AS i
CROSS JOIN LATERAL (SELECT CASE r.classid
	WHEN 'pg_namespace'::regclass THEN r.objid
	WHEN 'pg_attrdef'::regclass THEN (SELECT c.relnamespace FROM pg_attrdef a JOIN pg_class c ON c.oid = a.adrelid WHERE a.oid = r.objid)
	WHEN 'pg_trigger'::regclass THEN (SELECT c.relnamespace FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE t.oid = r.objid)
	WHEN 'pg_rewrite'::regclass THEN (SELECT c.relnamespace FROM pg_rewrite w JOIN pg_class c ON c.oid = w.ev_class WHERE w.oid = r.objid)
	WHEN 'pg_policy'::regclass THEN (SELECT c.relnamespace FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid WHERE p.oid = r.objid)
	ELSE (SELECT n.oid FROM pg_namespace n WHERE n.nspname = i.schema)
	END AS nsp) AS o
WHERE o.nsp IS DISTINCT FROM $1::oid AND o.nsp IS DISTINCT FROM 'pg_toast'::regnamespace
ORDER BY 1
LIMIT $2`, oid, maxOutside)
	if err != nil {
		return nil, fmt.Errorf("look for objects outside the schema that depend on it: %w", err)
	}
	outside, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("look for objects outside the schema that depend on it: %w", err)
	}
	return outside, nil
}
