package adapters

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"

	"github.com/jackc/pgx/v5"
)

// Effect is the harness-owned database effect that [Env.Effect] carries: one
// INSERT into the play's ledger table recording the event's namespace, id,
// payload digest and the delivery attempt. The ledger is how the harness
// counts what was applied.
//
// An implementation calls [Effect.Apply] with a pgx.Tx, or [Effect.ApplySQL]
// with a *sql.Tx, in the transaction that claims the event's marker, and
// only when the claim succeeded. Only the harness builds an Effect;
// implementations in other languages get its statement over the exec
// protocol (see package adapters/exec). It is an interface so that an
// implementation's own unit tests can pass a stand-in.
type Effect interface {
	// Apply executes the effect for d inside tx. An error means the
	// effect was not applied: the transaction must not commit the claim.
	Apply(ctx context.Context, tx pgx.Tx, d Delivery) error
	// ApplySQL executes the effect for d inside a database/sql
	// transaction, with the same contract as Apply.
	ApplySQL(ctx context.Context, tx *sql.Tx, d Delivery) error
}

// PayloadDigest is the hex SHA-256 digest of payload, as the ledger records
// it. Implementations may use it for their own conflict checks.
func PayloadDigest(payload []byte) string {
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:])
}
