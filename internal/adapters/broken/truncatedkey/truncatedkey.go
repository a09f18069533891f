// Package truncatedkey is the `broken-truncated-key` adapter: the reference
// pattern with the id cut to 64 characters on its way into the marker.
//
// # The real-world bug
//
// The marker's column was sized for the ids of the day, varchar(64) for a
// SHA-256 in hex, say, and the claim makes every id fit with a cast,
// $2::varchar(64). In PostgreSQL an explicit cast to varchar(n) truncates
// without an error (only storing a longer value fails), as do left(id, 64)
// and MySQL outside strict mode. Then the ids grow: a producer prefixes
// them with a tenant and a type, and the part that tells them apart is at
// the end.
//
// # What goes wrong
//
// Ids that share their first 64 characters get one marker: the first is
// applied, the second is answered Duplicate and its effect is lost,
// without an error. Ids the reference finds too long (over 1024 bytes) are
// refused as invalid input, as the reference does, so bad-input passes;
// the other fixtures send short ids and pass too.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package truncatedkey

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
)

// Name is the adapter's name.
const Name = "broken-truncated-key"

// Width is how many characters of the id the marker keeps.
const Width = 64

// columns are the reference's, with an id column of Width characters.
var columns = fmt.Sprintf(`namespace      text        NOT NULL,
	event_id       varchar(%d) NOT NULL,
	payload_digest bytea       NOT NULL,
	processed_at   timestamptz NOT NULL,
	PRIMARY KEY (namespace, event_id)`, Width)

// fit is the id as the marker stores it: the bug.
var fit = fmt.Sprintf(`$2::varchar(%d)`, Width)

// Adapter returns the `broken-truncated-key` adapter.
func Adapter() adapters.Adapter {
	return base.Adapter(Name, columns, base.Wrap[implementation])
}

type implementation struct{ *base.Instance }

// Deliver is the reference pattern, claiming and comparing by the id cut
// to Width characters.
func (i implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	return i.Process(ctx, d, i.claim, i.compare)
}

func (i implementation) claim(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (bool, error) {
	return base.ClaimWith(ctx, tx, d, `INSERT INTO `+i.Markers+` (namespace, event_id, payload_digest, processed_at)
VALUES ($1, `+fit+`, $3, $4) ON CONFLICT (namespace, event_id) DO NOTHING RETURNING true`, i.MarkerArgs(d)...)
}

func (i implementation) compare(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (adapters.Outcome, error) {
	outcome, found, err := base.LookupWith(ctx, tx, d, `SELECT payload_digest FROM `+i.Markers+` WHERE namespace = $1 AND event_id = `+fit, d.Namespace, d.ID)
	return base.MustFind(d, outcome, found, err)
}
