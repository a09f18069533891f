// Package sqlsplice is the `broken-sql-splice` adapter: the reference
// pattern, except that the claim is built by splicing the event's identity
// into the SQL text instead of binding it as a parameter.
//
// # The real-world bug
//
// String-built SQL is the oldest database bug there is, and deduplication
// code is a classic place for it: the statement is "obviously" only ever fed
// ids the system generated itself, until a producer sends one with a quote in
// it. The pattern's own text warns that its placeholders "must be bound by
// the database driver".
//
// # What goes wrong
//
// Every ordinary event is processed correctly, so double-delivery,
// concurrent-delivery and failure-after-marker pass. An id with a quote
// breaks the statement: the delivery fails with a syntax error that is not
// an invalid-input error, so a broker retries it for ever, and a crafted id
// could run SQL of its own.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package sqlsplice

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
const Name = "broken-sql-splice"

// Adapter returns the `broken-sql-splice` adapter.
func Adapter() adapters.Adapter {
	return base.Adapter(Name, base.KeyedColumns, base.Wrap[implementation])
}

type implementation struct{ *base.Instance }

// Deliver is the reference pattern with a spliced claim.
func (i implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	return i.Process(ctx, d, i.splicedClaim, i.Compare)
}

// splicedClaim is the reference's claim with the identity pasted into the
// statement between quotes: the bug.
func (i implementation) splicedClaim(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (bool, error) {
	claim := fmt.Sprintf(`INSERT INTO %s (namespace, event_id, payload_digest, processed_at)
VALUES ('%s', '%s', '\x%x', '%s') ON CONFLICT (namespace, event_id) DO NOTHING RETURNING true`,
		i.Markers, d.Namespace, d.ID, kit.Digest(d.Payload), i.Now().Format(time.RFC3339Nano))
	return base.ClaimWith(ctx, tx, d, claim)
}
