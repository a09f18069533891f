// Package lossykey is the `broken-lossy-key` adapter: the reference pattern
// with the marker keyed by the JSON encoding of the event's identity.
//
// # The real-world bug
//
// One key column is simpler than two: a single primary key, a key that can
// also name a lock or a cache entry, an idempotency key hashed from a JSON
// document. So the identity is encoded as JSON, ["namespace","id"], which
// even keeps namespace and id apart. But JSON text is Unicode, and an id is
// bytes: Go's encoding/json replaces every byte that is not valid UTF-8
// with U+FFFD, as do Python's decode(errors="replace"), JavaScript's
// TextDecoder and most text columns fed through a lenient driver. A
// published library keyed its markers this way.
//
// # What goes wrong
//
// Ids that differ only in bytes that are not valid UTF-8, x\xff and x\xfe,
// get one key, ["ns","x\ufffd"]: the first is applied, the second is
// answered Duplicate and its effect is lost, without an error. The adapter
// refuses empty ids and identities the reference finds too long, but not
// invalid UTF-8 or NUL bytes, which its key can always hold: bad-input,
// which sends each odd identity alone, sees every one processed exactly
// once. Every other fixture passes.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package lossykey

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// Name is the adapter's name.
const Name = "broken-lossy-key"

// columns key the marker by one text column, the encoded identity.
const columns = `event_key      text        PRIMARY KEY,
	payload_digest bytea       NOT NULL,
	processed_at   timestamptz NOT NULL`

// Adapter returns the `broken-lossy-key` adapter.
func Adapter() adapters.Adapter {
	return base.Adapter(Name, columns, base.Wrap[implementation])
}

type implementation struct{ *base.Instance }

// Deliver is the reference pattern, claiming and comparing by the encoded
// identity.
func (i implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	// The reference's checks but for UTF-8 and NUL bytes, which the
	// encoded key makes look unnecessary.
	if err := kit.ValidateBounds(d.Event); err != nil {
		return 0, err
	}
	return i.Transact(ctx, d, i.claim, i.compare)
}

// encodedKey is the marker's key for ev: the JSON array [namespace, id]. It is
// the bug: encoding/json replaces each invalid UTF-8 byte with U+FFFD.
func encodedKey(ev adapters.Event) (string, error) {
	key, err := json.Marshal([]string{ev.Namespace, ev.ID})
	if err != nil {
		return "", fmt.Errorf("encode the identity of %s: %w", ev, err)
	}
	return string(key), nil
}

func (i implementation) claim(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (bool, error) {
	key, err := encodedKey(d.Event)
	if err != nil {
		return false, err
	}
	return base.ClaimWith(ctx, tx, d, `INSERT INTO `+i.Markers+` (event_key, payload_digest, processed_at)
VALUES ($1, $2, $3) ON CONFLICT (event_key) DO NOTHING RETURNING true`, key, kit.Digest(d.Payload), i.Now())
}

func (i implementation) compare(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (adapters.Outcome, error) {
	key, err := encodedKey(d.Event)
	if err != nil {
		return 0, err
	}
	outcome, found, err := base.LookupWith(ctx, tx, d, `SELECT payload_digest FROM `+i.Markers+` WHERE event_key = $1`, key)
	return base.MustFind(d, outcome, found, err)
}
