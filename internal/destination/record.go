package destination

import (
	"time"

	"github.com/harmless-dev/harmless/adapters"
)

// Identity is an event's identity as the destination keys it: the exact
// bytes of the namespace and the id, which need not be UTF-8.
type Identity struct {
	Namespace string
	ID        string
}

// IdentityOf returns ev's identity; the payload plays no part.
func IdentityOf(ev adapters.Event) Identity {
	return Identity{Namespace: ev.Namespace, ID: ev.ID}
}

// Outcome is how the destination ended a request.
type Outcome string

const (
	// Pending: the request is still being handled.
	Pending Outcome = ""
	// Answered: the destination wrote an answer, with Record.Status.
	Answered Outcome = "answered"
	// Dropped: the destination closed the connection without an answer
	// (DropAfterProcess, Hold, or Close while the request was in progress).
	Dropped Outcome = "dropped"
	// Abandoned: the client closed the connection before the answer.
	Abandoned Outcome = "abandoned"
	// Refused: a connection accepted while the destination was down and
	// reset at once; nothing was read, so the record has no key or body.
	Refused Outcome = "refused"
)

// Record is one request the destination read, or one connection it refused.
type Record struct {
	// Seq is the record's place in arrival order, from 1.
	Seq int
	// At is when the request was read (or the connection refused).
	At time.Time
	// Key is the Idempotency-Key header, "" when absent.
	Key string
	// Body is the request's body as received.
	Body []byte
	// Valid tells whether Body decoded into a request; when false, Identity,
	// PayloadDigest and Attempt are zero.
	Valid bool
	// Identity is the event's identity, decoded from base64.
	Identity Identity
	// PayloadDigest is the body's payload_digest.
	PayloadDigest string
	// Attempt numbers the valid requests for Identity, from 1, in the
	// order the destination read them; faults are planned on it.
	Attempt int
	// Outcome is how the request ended; Status is the HTTP status written
	// when Answered, 0 otherwise.
	Outcome Outcome
	Status  int
	// Replayed tells that the answer was a replay of an earlier one.
	Replayed bool
	// Processed tells that this request was processed: the effect happened
	// at the destination. Effect is then the identity's processed count
	// after it.
	Processed bool
	Effect    int
	// Fault is the Kind of the planned fault that acted on the request,
	// "" for none.
	Fault string
	// Reason says why the request got a 4xx, "" otherwise.
	Reason string
}
