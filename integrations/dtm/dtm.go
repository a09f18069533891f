// Package dtm certifies the sub-transaction barrier of dtm
// (github.com/dtm-labs/dtm/client/dtmcli, v1.19.0) as an idempotent
// consumer: each delivery runs the harness's effect inside
// BranchBarrier.Call, as dtm's barrier guide
// (https://en.dtm.pub/practice/barrier.html) has a branch handler run its
// business SQL.
//
// # Wiring
//
//   - The barrier table is the one dtm ships in
//     sqls/dtmcli.barrier.postgres.sql (a sequence-backed id and the unique
//     constraint uniq_barrier on (gid, branch_id, op, barrier_id), gid and
//     branch_id varchar(128)), created in Env.Schema instead of dtm_barrier.
//   - The table and the database type are set on each BranchBarrier
//     (its BarrierTableName and DBType fields), not with dtmcli's globals
//     SetBarrierTableName and dtmimp.SetCurrentDBType: plays run one after
//     another, and two at once, each in its own schema, and a process-wide
//     table name would send one play's barriers into another's table.
//   - The barrier is built with dtmcli.BarrierFrom, the constructor
//     BarrierFromQuery uses for the query string dtm sends a branch:
//     TransType "msg" and Op "action" (a consumer of a dtm 2-phase message
//     is an action branch), Gid = the event's id and BranchID = its
//     namespace. dtm's own key is two-level: one global transaction (gid)
//     has several branches, one per service it reaches, and the barrier
//     keeps each branch apart. Mapping the namespace onto the branch keeps
//     the identity whole without inventing an encoding that a join of
//     namespace and id would need; dtm refuses an empty gid or branch id
//     ("invalid trans info"), which Deliver passes on as invalid input.
//   - database/sql with the pgx stdlib driver ("pgx"), as dtmcli's
//     barrier takes a *sql.Tx. The transaction is begun with BeginTx(ctx)
//     and handed to Call (CallWithDB begins without a context), so that a
//     cancelled delivery rolls back; Call itself commits or rolls back.
//
// # Outcome
//
// Call inserts the barrier row with INSERT ... ON CONFLICT ON CONSTRAINT
// uniq_barrier DO NOTHING; when no row was inserted it commits without
// calling the business function and returns nil. It does not say which
// happened, so the business function sets a flag: nil with the flag set is
// Applied, nil without it is Duplicate. dtm does not look at the payload
// (no conflict policy), keeps barriers for ever (no window, no purge) and
// records no time of its own.
//
//harmless:library github.com/dtm-labs/dtm
package dtm

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/dtm-labs/dtm/client/dtmcli"
	"github.com/dtm-labs/dtm/client/dtmcli/dtmimp"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	"github.com/harmless-dev/harmless/adapters"
)

// Name is the adapter's name.
const Name = "dtm-barrier"

// transType is the trans_type dtm sends a 2-phase message's branches
// (dtmcli.NewMsg builds its TransBase with "msg"; dtmcli exports no
// constant for it).
const transType = "msg"

// maxConns bounds each instance's pool, as the harness's own adapters do.
const maxConns = 4

// Adapter returns the dtm barrier adapter. It declares nothing: dtm's
// barrier ignores payloads and never expires.
func Adapter() adapters.Adapter {
	return adapters.Adapter{Name: Name, New: New}
}

// Implementation is one instance: a *sql.DB of its own and the schema's
// barrier table.
type Implementation struct {
	db     *sql.DB
	table  string
	effect adapters.Effect
}

// New opens a *sql.DB on env.DSN and creates dtm's barrier table in
// env.Schema.
func New(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
	db, err := sql.Open("pgx", env.DSN)
	if err != nil {
		return nil, fmt.Errorf("%s: open: %w", Name, err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	i := &Implementation{db: db, table: pgx.Identifier{env.Schema, "barrier"}.Sanitize(), effect: env.Effect}
	if _, err := db.ExecContext(ctx, ddl(env.Schema)); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%s: create %s: %w", Name, i.table, err)
	}
	return i, nil
}

// ddl is sqls/dtmcli.barrier.postgres.sql of dtm v1.19.0 in schema, minus
// its DROP TABLE, wrapped so that two instances of one play may create it
// at once.
func ddl(schema string) string {
	seq := pgx.Identifier{schema, "barrier_seq"}.Sanitize()
	table := pgx.Identifier{schema, "barrier"}.Sanitize()
	return `DO $dtm_barrier$
BEGIN
	CREATE SEQUENCE IF NOT EXISTS ` + seq + `;
	CREATE TABLE IF NOT EXISTS ` + table + `(
		id bigint NOT NULL DEFAULT NEXTVAL (` + quoteLiteral(seq) + `),
		trans_type varchar(45) default '',
		gid varchar(128) default '',
		branch_id varchar(128) default '',
		op varchar(45) default '',
		barrier_id varchar(45) default '',
		reason varchar(45) default '',
		create_time timestamp(0) with time zone DEFAULT NULL,
		update_time timestamp(0) with time zone DEFAULT NULL,
		PRIMARY KEY(id),
		CONSTRAINT uniq_barrier unique(gid, branch_id, op, barrier_id)
	);
EXCEPTION
	WHEN unique_violation OR duplicate_table OR duplicate_object THEN
		NULL; -- created by a concurrent instance
END
$dtm_barrier$`
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Deliver runs the effect inside dtm's barrier for d's event.
func (i *Implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	bb, err := dtmcli.BarrierFrom(transType, d.ID, d.Namespace, dtmimp.OpAction)
	if err != nil {
		return 0, fmt.Errorf("%s: %s: %w: %w", Name, d.Event, err, adapters.ErrInvalidInput)
	}
	bb.DBType = dtmcli.DBTypePostgres
	bb.BarrierTableName = i.table

	tx, err := i.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("%s: begin: %w", Name, err)
	}
	applied := false
	err = bb.Call(tx, func(tx *sql.Tx) error {
		if err := i.effect.ApplySQL(ctx, tx, d); err != nil {
			return err
		}
		applied = true
		return nil
	})
	switch {
	case err != nil:
		// Call has rolled back; a failed commit leaves nothing either.
		return 0, fmt.Errorf("%s: barrier call for %s: %w", Name, d.Event, err)
	case applied:
		return adapters.Applied, nil
	default:
		return adapters.Duplicate, nil
	}
}

// Close closes the *sql.DB.
func (i *Implementation) Close(context.Context) error {
	if err := i.db.Close(); err != nil && !errors.Is(err, sql.ErrConnDone) {
		return fmt.Errorf("%s: close: %w", Name, err)
	}
	return nil
}
