package adapters

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxIdentityBytes bounds the namespace and the id, each, in
// [CheckIdentity]. Both are columns of the marker's unique index, and a
// PostgreSQL B-tree index entry cannot exceed about 2.7 kB: a longer
// identity would fail at the database with an error a broker would retry
// for ever.
const maxIdentityBytes = 1024

// CheckIdentity refuses the identities that PostgreSQL text columns and a
// unique B-tree index on them cannot store faithfully, as the reference
// implementation does before it claims an event:
//
//   - an empty id;
//   - a namespace or id longer than 1024 bytes;
//   - a namespace or id that is not valid UTF-8 (text refuses it, and
//     converting it would merge distinct ids);
//   - a NUL byte in either (text cannot hold one).
//
// The error wraps [ErrInvalidInput], so returned from Deliver it is a
// clean refusal: the harness does not redeliver it, as a broker should
// dead-letter it. An implementation that stores identities some other way
// (bytea columns, say) may accept more; the bad-input fixture accepts
// either, as long as each event is processed exactly once or refused.
func CheckIdentity(ev Event) error {
	switch {
	case len(ev.Namespace) > maxIdentityBytes || len(ev.ID) > maxIdentityBytes:
		return fmt.Errorf("event %s: namespace and id may have at most %d bytes each: %w", ev, maxIdentityBytes, ErrInvalidInput)
	case ev.ID == "":
		return fmt.Errorf("event %s: empty id: %w", ev, ErrInvalidInput)
	case !utf8.ValidString(ev.Namespace) || !utf8.ValidString(ev.ID):
		return fmt.Errorf("event %s: identity is not valid UTF-8: %w", ev, ErrInvalidInput)
	case strings.ContainsRune(ev.Namespace, 0) || strings.ContainsRune(ev.ID, 0):
		return fmt.Errorf("event %s: identity contains a NUL byte: %w", ev, ErrInvalidInput)
	}
	return nil
}
