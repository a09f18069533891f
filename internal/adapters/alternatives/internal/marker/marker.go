// Package marker holds what the alternative adapters share beyond package
// kit: their declaration, the marker table's DDL and statements, and, for the
// two pgx adapters, a [Store] that owns the pool, validates identities with
// [kit.Validate], runs one transaction per delivery and purges, leaving each
// adapter only its [Technique].
//
// The statements are the same for every alternative; what differs between
// them is only the mechanism that stops two deliveries of one event from both
// claiming it (a unique key, SERIALIZABLE, an advisory lock). [ClaimOrClassify]
// in particular is a check-then-insert and is correct only under such a
// mechanism.
package marker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// Window is the redelivery window every alternative declares.
const Window = 24 * time.Hour

// Declares is the declaration every alternative makes: conflicts rejected,
// markers kept for Window, every stored time read from [adapters.Env.Clock].
func Declares() adapters.Declaration {
	return adapters.Declaration{
		ConflictPolicy:   adapters.RejectConflicts,
		RedeliveryWindow: Window,
		AcceptsClock:     true,
	}
}

// Key is how the marker table indexes an event's identity.
type Key int

const (
	// UniqueKey makes (namespace, event_id) the primary key: the database
	// itself refuses a second marker.
	UniqueKey Key = iota + 1
	// PlainIndex indexes (namespace, event_id) without a unique constraint:
	// something else must keep a second marker out.
	PlainIndex
)

// Table is one marker table.
type Table struct {
	schema string
	name   string // unqualified, unquoted; also the prefix of its indexes
	// Quoted is the quoted, schema-qualified table name.
	Quoted string
	key    Key
}

// NewTable names the marker table name in schema, indexed by key.
func NewTable(schema, name string, key Key) Table {
	return Table{schema: schema, name: name, Quoted: kit.Table(schema, name), key: key}
}

// DDL returns the statements that create the table and its indexes if they
// are missing, in order. They take no lock on a table that exists, so a new
// instance never waits for deliveries in flight, and concurrent first setups
// are safe: see [kit.CreateIfMissing].
func (t Table) DDL() []string {
	columns := `
	namespace      text        NOT NULL,
	event_id       text        NOT NULL,
	payload_digest bytea       NOT NULL,
	processed_at   timestamptz NOT NULL`
	stmts := []string{}
	switch t.key {
	case UniqueKey:
		stmts = append(stmts, kit.CreateIfMissing(t.Quoted, `CREATE TABLE `+t.Quoted+` (`+columns+`,
	PRIMARY KEY (namespace, event_id)
)`))
	default:
		stmts = append(stmts,
			kit.CreateIfMissing(t.Quoted, `CREATE TABLE `+t.Quoted+` (`+columns+`
)`),
			t.index("_identity", "namespace, event_id"))
	}
	return append(stmts, t.index("_processed_at", "processed_at"))
}

// index returns the statement that creates the table's index named after
// it with suffix, on columns, if it is missing.
func (t Table) index(suffix, columns string) string {
	return kit.CreateIfMissing(kit.Table(t.schema, t.name+suffix),
		`CREATE INDEX `+pgx.Identifier{t.name + suffix}.Sanitize()+` ON `+t.Quoted+` (`+columns+`)`)
}

// Lookup reads an identity's stored digest: $1 namespace, $2 id.
func (t Table) Lookup() string {
	return `SELECT payload_digest FROM ` + t.Quoted + ` WHERE namespace = $1 AND event_id = $2`
}

// Insert stores a marker unconditionally: $1 namespace, $2 id, $3 digest,
// $4 time.
func (t Table) Insert() string {
	return `INSERT INTO ` + t.Quoted + ` (namespace, event_id, payload_digest, processed_at) VALUES ($1, $2, $3, $4)`
}

// Claim stores a marker unless the identity has one, returning a row only
// when it stored it. It needs [UniqueKey].
func (t Table) Claim() string {
	return t.Insert() + ` ON CONFLICT (namespace, event_id) DO NOTHING RETURNING true`
}

// Purge deletes the markers stored before $1.
func (t Table) Purge() string {
	return `DELETE FROM ` + t.Quoted + ` WHERE processed_at < $1`
}

// Technique handles one delivery of a valid event whose payload digest is
// digest, using s: it is what a pgx alternative adds to the shared [Store].
type Technique func(ctx context.Context, s *Store, d adapters.Delivery, digest []byte) (adapters.Outcome, error)

// PgxAdapter returns the adapter called name whose instances are [Store]s
// keeping their markers in table (indexed by key) and handling deliveries
// with technique.
func PgxAdapter(name, table string, key Key, technique Technique) adapters.Adapter {
	return adapters.Adapter{
		Name:     name,
		Declares: Declares(),
		New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
			s, err := open(ctx, env, table, key, technique)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			return s, nil
		},
	}
}

// Store is one instance of a pgx alternative: a pool of its own, the marker
// table, the effect, the clock and the technique.
type Store struct {
	pool      *pgxpool.Pool
	table     Table
	effect    adapters.Effect
	now       func() time.Time
	technique Technique
}

// open connects to env.DSN with [kit.Pool] and creates table in env.Schema.
func open(ctx context.Context, env adapters.Env, table string, key Key, technique Technique) (*Store, error) {
	pool, err := kit.Pool(ctx, env.DSN)
	if err != nil {
		return nil, err
	}
	s := &Store{pool: pool, table: NewTable(env.Schema, table, key), effect: env.Effect, now: env.Clock.Now, technique: technique}
	for _, stmt := range s.table.DDL() {
		if _, err := pool.Exec(ctx, stmt); err != nil {
			pool.Close()
			return nil, fmt.Errorf("create %s: %w", s.table.Quoted, err)
		}
	}
	return s, nil
}

// Deliver refuses an invalid identity, then hands d to the technique.
func (s *Store) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if err := kit.Validate(d.Event); err != nil {
		return 0, err
	}
	return s.technique(ctx, s, d, kit.Digest(d.Payload))
}

// InTx runs fn in one transaction with opts and commits it, whatever fn's
// outcome: a Duplicate read under SERIALIZABLE is only valid once its
// transaction has committed. Any error, or a panic in fn, rolls back.
func (s *Store) InTx(ctx context.Context, opts pgx.TxOptions, fn func(pgx.Tx) (adapters.Outcome, error)) (outcome adapters.Outcome, err error) {
	tx, err := s.pool.BeginTx(ctx, opts)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	// Rollback after Commit is a no-op; on every other path, including a
	// panic in fn, it undoes the marker together with the effect.
	defer func() {
		if rbErr := tx.Rollback(context.WithoutCancel(ctx)); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) && err == nil {
			outcome, err = 0, fmt.Errorf("rollback: %w", rbErr)
		}
	}()
	if outcome, err = fn(tx); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return outcome, nil
}

// ClaimOrClassify is check-then-insert: it reads d's marker and classifies d
// against it, or, when there is none, inserts the marker and applies the
// effect in tx. On its own it races (two transactions can both find no
// marker); the caller must make competing transactions for one identity
// serializable, and tx must be the transaction that commits.
func (s *Store) ClaimOrClassify(ctx context.Context, tx pgx.Tx, d adapters.Delivery, digest []byte) (adapters.Outcome, error) {
	var stored []byte
	err := tx.QueryRow(ctx, s.table.Lookup(), d.Namespace, d.ID).Scan(&stored)
	switch {
	case err == nil:
		return kit.Classify(stored, digest), nil
	case !errors.Is(err, pgx.ErrNoRows):
		return 0, fmt.Errorf("read marker of %s: %w", d.Event, err)
	}
	if _, err := tx.Exec(ctx, s.table.Insert(), d.Namespace, d.ID, digest, s.now()); err != nil {
		return 0, fmt.Errorf("insert marker of %s: %w", d.Event, err)
	}
	if err := s.effect.Apply(ctx, tx, d); err != nil {
		return 0, err
	}
	return adapters.Applied, nil
}

// Purge deletes the markers stored before cutoff.
func (s *Store) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, s.table.Purge(), cutoff)
	if err != nil {
		return 0, fmt.Errorf("purge %s before %s: %w", s.table.Quoted, cutoff.Format(time.RFC3339Nano), err)
	}
	return tag.RowsAffected(), nil
}

// Close closes the pool.
func (s *Store) Close(context.Context) error {
	s.pool.Close()
	return nil
}

var (
	_ adapters.Implementation = (*Store)(nil)
	_ adapters.Purger         = (*Store)(nil)
)
