// Package rebuildpurge is the `broken-rebuild-purge` adapter: the reference
// pattern, with a purge that rebuilds the processed-events table and swaps
// it in while deliveries go on.
//
// # The real-world bug
//
// Deleting most rows of a big table is slow and leaves it bloated, so a
// common recipe for a cleanup job is to copy the rows worth keeping into a
// new table, drop the old one and rename the new one in its place. Tools
// that do it online (pg_repack, pg_squeeze) capture the changes made during
// the copy and replay them before the swap; a hand-written job does not,
// and runs its statements one by one, each committed on its own, while
// the consumers keep claiming events.
//
// # What goes wrong
//
// Purge(cutoff) runs, as separate statements outside any transaction:
// CREATE TABLE ... AS SELECT the markers claimed at or after cutoff; add
// the primary key and the index on processed_at; DROP TABLE the old table;
// ALTER TABLE ... RENAME the new one to the old name. A claim committed
// after the copy read the old table and before the old table is dropped
// is in neither: the marker is lost while its effect stays committed, and
// a redelivery of its event inside the window is applied again. Between
// the drop and the rename a delivery finds no table and fails, which the
// broker redelivers. With no delivery running, the purge keeps and
// removes exactly what the reference's does, and deliveries are handled
// exactly as by the reference.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package rebuildpurge

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// Name is the adapter's name.
const Name = "broken-rebuild-purge"

// rebuilt is the unqualified name of the table a purge copies the kept
// markers into before it takes the processed-events table's name.
const rebuilt = base.Table + "_rebuilt"

// Adapter returns the `broken-rebuild-purge` adapter.
func Adapter() adapters.Adapter {
	return base.Adapter(Name, base.KeyedColumns, base.Wrap[implementation])
}

type implementation struct{ *base.Instance }

// Purge rebuilds the processed-events table with the markers claimed at or
// after cutoff and swaps it in, one statement at a time: the bug. It
// reports the markers it found claimed before cutoff when it started.
func (i implementation) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	fresh := kit.Table(i.Env.Schema, rebuilt)
	var removed int64
	if err := i.Pool.QueryRow(ctx, `SELECT count(*) FROM `+i.Markers+` WHERE processed_at < $1`, cutoff).Scan(&removed); err != nil {
		return 0, fmt.Errorf("purge %s: count the markers before %s: %w", i.Markers, cutoff.Format(time.RFC3339Nano), err)
	}
	// CREATE TABLE ... AS takes no parameters: the cutoff is written as a
	// literal, from a time.Time, so it holds nothing but a timestamp.
	literal := "'" + cutoff.UTC().Format(time.RFC3339Nano) + "'::timestamptz"
	for _, stmt := range []string{
		// Left by a purge that failed half-way.
		`DROP TABLE IF EXISTS ` + fresh,
		`CREATE TABLE ` + fresh + ` AS SELECT * FROM ` + i.Markers + ` WHERE processed_at >= ` + literal,
		`ALTER TABLE ` + fresh + ` ADD PRIMARY KEY (namespace, event_id)`,
		`CREATE INDEX ON ` + fresh + ` (processed_at)`,
		`DROP TABLE ` + i.Markers,
		`ALTER TABLE ` + fresh + ` RENAME TO ` + pgx.Identifier{base.Table}.Sanitize(),
	} {
		if _, err := i.Pool.Exec(ctx, stmt); err != nil {
			return 0, fmt.Errorf("purge %s before %s: %s: %w", i.Markers, cutoff.Format(time.RFC3339Nano), stmt, err)
		}
	}
	return removed, nil
}
