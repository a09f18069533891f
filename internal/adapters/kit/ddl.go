package kit

import "strings"

// CreateIfMissing returns one statement that runs create, the CREATE TABLE
// or CREATE INDEX of relation (quoted, schema-qualified as [Table] makes
// it), only when no relation of that name exists. Any driver can run it:
// it is a DO block without parameters.
//
// Setup must not wait for deliveries. CREATE INDEX IF NOT EXISTS takes a
// SHARE lock on its table even when the index exists, so it waits for every
// open transaction that wrote to the table: a process set up while others
// hold deliveries in flight would hang there. to_regclass takes no lock.
//
// Several processes may set up one schema at once, find the relation
// missing and all create it. All but one then fail, on the catalog's unique
// index (unique_violation) or finding it there (duplicate_table,
// duplicate_object); each of those errors means that another session
// committed the relation, which is what this one wanted, so the statement
// ignores them.
func CreateIfMissing(relation, create string) string {
	return `DO $harmless_create$
BEGIN
	IF to_regclass(` + quoteLiteral(relation) + `) IS NULL THEN
		` + create + `;
	END IF;
EXCEPTION
	WHEN unique_violation OR duplicate_table OR duplicate_object THEN
		NULL; -- created by a concurrent setup
END
$harmless_create$`
}

// quoteLiteral quotes s as an SQL string literal, for a server with
// standard_conforming_strings on (the default since PostgreSQL 9.1).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
