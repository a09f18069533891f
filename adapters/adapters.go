package adapters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"
)

// Event is one logical event as a broker delivers it.
//
// Namespace and ID together are the event's identity: the same ID in two
// namespaces names two different events. Payload equality is byte equality of
// the payload as delivered.
type Event struct {
	Namespace string
	ID        string
	Payload   []byte
}

// String returns the event's identity as namespace/id for messages: quoted
// where needed, and shortened when long.
func (e Event) String() string {
	return fmt.Sprintf("%s/%s", quoteIfNeeded(e.Namespace), quoteIfNeeded(e.ID))
}

// Delivery is one delivery of an event. Attempt is the harness's delivery
// number for this event, starting at 1; concurrent deliveries of one event get
// distinct numbers. Implementations pass the Delivery unchanged to
// [Effect.Apply].
type Delivery struct {
	Event
	Attempt int
}

// Outcome is what an implementation reports for one acknowledged delivery.
type Outcome int

const (
	// Applied means this delivery claimed the event and applied its effect.
	Applied Outcome = iota + 1
	// Duplicate means the event had already been claimed; nothing was applied.
	Duplicate
	// Rejected means the event's identity had already been claimed with a
	// different payload, and the implementation's conflict policy rejects the
	// delivery. Nothing was applied.
	Rejected
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case Applied:
		return "Applied"
	case Duplicate:
		return "Duplicate"
	case Rejected:
		return "Rejected"
	default:
		return fmt.Sprintf("Outcome(%d)", int(o))
	}
}

// Implementation handles deliveries. It must be safe for concurrent use: the
// harness delivers from many goroutines at once.
type Implementation interface {
	// Deliver handles one delivery. A nil error acknowledges the delivery
	// with the returned outcome. A non-nil error means "not acknowledged";
	// the harness will deliver the event again. Deliver must return promptly
	// once ctx is done.
	Deliver(ctx context.Context, d Delivery) (Outcome, error)
	// Close releases the instance's resources (connections, goroutines).
	Close(ctx context.Context) error
}

// Purger is implemented by implementations that remove deduplication state.
// Purge removes the markers of events claimed before cutoff and reports how
// many it removed. Markers claimed at or after cutoff must survive.
type Purger interface {
	Purge(ctx context.Context, cutoff time.Time) (int64, error)
}

// ErrInvalidInput marks a delivery refused because the event itself is not
// acceptable to the implementation (for example an empty id). Wrap it in the
// error returned from Deliver; the harness classifies such deliveries as
// cleanly rejected input and does not redeliver them.
var ErrInvalidInput = errors.New("invalid input")

// ErrPayloadConflict marks a delivery refused because its identity was claimed
// with a different payload. Returning Rejected is the preferred way to say so;
// an error wrapping ErrPayloadConflict is accepted as the same verdict and is
// not redelivered.
var ErrPayloadConflict = errors.New("payload conflict")

// ConflictPolicy is what an implementation does with a delivery whose
// identity was already claimed with a different payload.
type ConflictPolicy string

const (
	// NoConflictPolicy declares no policy. Rules that require conflicts to be
	// detected fail for such an implementation.
	NoConflictPolicy ConflictPolicy = ""
	// RejectConflicts answers a conflicting delivery with [Rejected] (or an
	// error wrapping [ErrPayloadConflict]) and never applies it. It follows
	// Stripe and the IETF Idempotency-Key draft, which answer a reused key
	// with a different request body with 422 Unprocessable Content.
	RejectConflicts ConflictPolicy = "reject"
)

// ExternalEffects is how an implementation makes an effect outside the
// database (an email, a payment, an HTTP call). Such an effect can never
// commit atomically with the marker, so the implementation needs a protocol
// for the boundary; docs/external-effects.md explains the two that harmless
// certifies.
type ExternalEffects string

const (
	// NoExternalEffects declares that the implementation makes no effect
	// outside the database. The external-effect fixture does not apply to it.
	NoExternalEffects ExternalEffects = ""
	// Outbox: the claim's transaction writes an outbox row with the effect,
	// and a relay sends it after commit, retrying with a key derived from
	// the event's identity until the destination acknowledges it.
	Outbox ExternalEffects = "outbox"
	// DestinationIdempotency: the request is sent with an idempotency key
	// derived from the event's identity, and the destination deduplicates
	// (Stripe's Idempotency-Key, the IETF Idempotency-Key draft).
	DestinationIdempotency ExternalEffects = "destination-idempotency"
)

// Valid reports whether e is one of the defined values.
func (e ExternalEffects) Valid() bool {
	switch e {
	case NoExternalEffects, Outbox, DestinationIdempotency:
		return true
	}
	return false
}

// Declaration is what an implementation claims about itself. Declarations
// select which rules apply to it; they never weaken an assertion, and a
// stronger claim never skips a rule.
type Declaration struct {
	// ConflictPolicy is the implementation's documented answer to a payload
	// conflict.
	ConflictPolicy ConflictPolicy
	// RedeliveryWindow is how long the implementation keeps deduplication
	// state: redeliveries within the window must be recognised. Zero means no
	// window is declared.
	RedeliveryWindow time.Duration
	// AcceptsClock reports whether the implementation uses [Env.Clock] for
	// every time it records or compares, so the harness can move time.
	AcceptsClock bool
	// ExternalEffects says how the implementation makes the event's effect
	// outside the database, at [Env.Destination]; NoExternalEffects when it
	// makes none.
	ExternalEffects ExternalEffects
	// MaxSendDelay is the longest the implementation may take to send an
	// external effect after the commit that made it owed, and between two
	// tries of a failed send: an outbox relay's poll interval, say. The
	// harness waits at this pace for sends before it judges what reached
	// the destination, so that a relay slower than its default pace is not
	// judged before it sent (docs/external-effects.md gives the default).
	// Zero means not declared; it needs ExternalEffects.
	MaxSendDelay time.Duration
}

// declarationJSON is a [Declaration] as JSON spells it, in the exec
// protocol's hello (docs/protocol.md) and in a certificate's declared and
// verified capabilities (docs/reports.md): durations in seconds.
type declarationJSON struct {
	ConflictPolicy   ConflictPolicy  `json:"conflict_policy"`
	RedeliveryWindow float64         `json:"redelivery_window_s"`
	AcceptsClock     bool            `json:"accepts_clock"`
	ExternalEffects  ExternalEffects `json:"external_effects,omitempty"`
	MaxSendDelay     float64         `json:"max_send_delay_s,omitempty"`
}

// MarshalJSON encodes d as
// {"conflict_policy":"reject","redelivery_window_s":86400,"accepts_clock":true,"external_effects":"outbox","max_send_delay_s":3},
// durations in seconds ("" and 0 declare no policy and no window;
// external_effects and max_send_delay_s are absent when not declared, so
// that a declaration without them reads as it did before they existed).
func (d Declaration) MarshalJSON() ([]byte, error) {
	return json.Marshal(declarationJSON{d.ConflictPolicy, d.RedeliveryWindow.Seconds(), d.AcceptsClock, d.ExternalEffects, d.MaxSendDelay.Seconds()})
}

// UnmarshalJSON decodes what [Declaration.MarshalJSON] encodes. Absent
// fields are zero and unknown fields are ignored, as for a struct; a
// window or a send delay that is negative, not a number or too long for a
// time.Duration is an error, since no duration stands for it. It does not
// check the conflict policy, nor that a send delay comes with external
// effects: [Adapter.Validate] does, and so does the exec protocol's hello.
func (d *Declaration) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil
	}
	var j declarationJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	window, err := seconds("redelivery_window_s", j.RedeliveryWindow)
	if err != nil {
		return err
	}
	delay, err := seconds("max_send_delay_s", j.MaxSendDelay)
	if err != nil {
		return err
	}
	*d = Declaration{ConflictPolicy: j.ConflictPolicy, RedeliveryWindow: window, AcceptsClock: j.AcceptsClock, ExternalEffects: j.ExternalEffects, MaxSendDelay: delay}
	return nil
}

// seconds converts the declaration's field name, s seconds, to a duration.
func seconds(name string, s float64) (time.Duration, error) {
	// 2^63 ns, one past the longest time.Duration, is exact in a float64.
	if math.IsNaN(s) || s < 0 || s*float64(time.Second) >= math.MaxInt64 {
		return 0, fmt.Errorf("declaration: %s %v is not a duration between 0 and %.0f seconds", name, s, time.Duration(math.MaxInt64).Seconds())
	}
	return time.Duration(s * float64(time.Second)), nil
}

// Env is what the harness gives an implementation instance at construction.
// Every play of a fixture (the deliveries that one or more of its rules
// judge) gets fresh Envs with a schema of its own, so implementations never
// share state between plays or runs; the instances of one play share it,
// as two replicas of one service share a database.
type Env struct {
	// DSN connects to the database under test. Its hosts are listeners of
	// this instance's own on the harness's wire proxy: a connection is the
	// instance's because it comes in there, which is how the harness's
	// faults reach it and how the harness finds (and kills) exactly the
	// connections it owns, those with the DSN's role (see docs/faults.md and
	// docs/safety.md). Connect with its hosts and ports, in order; a
	// connection made elsewhere is out of the faults' reach. Its
	// application_name is a courtesy: replace it with your own, or set one
	// after connecting, as you please.
	//
	// On a replicated formation (--provision ha, the failover fixture) it
	// names every node, the primary first, and asks for a writable session:
	// postgres://u:pw@h1:p1,h2:p2/db?target_session_attrs=read-write. pgx
	// and libpq try the hosts in order until one takes writes, which is how
	// an implementation finds the new primary after a failover; one that
	// keeps only the first host stays on the old primary (docs/failover.md).
	DSN string
	// Schema is a schema created for this play of a fixture. The
	// implementation creates its own tables here; it is dropped when the
	// play ends.
	Schema string
	// Effect is the effect the implementation must apply, in the same
	// transaction as its marker, whenever a delivery claims its event.
	Effect Effect
	// Clock is the harness's clock. Implementations that declare
	// AcceptsClock must read the time only from it.
	Clock Clock
	// Instance numbers the instances built for one play, from 1: two
	// instances stand for two replicas of the same service.
	Instance int
	// Logf, when not nil, writes a diagnostic line to the run's log (where
	// suite.WithLogf sends it; harmless certify -v prints it).
	Logf func(format string, args ...any)
	// Destination is the base URL (http://127.0.0.1:PORT) of this play's
	// external destination, an HTTP API that honours idempotency keys as
	// payment and email APIs do. It is set in the plays of the
	// external-effect fixture when the adapter declares ExternalEffects,
	// and "" everywhere else: then make no external effect (write no
	// outbox row, start no relay). Make each applied event's external
	// effect there, as package adapters/external describes.
	Destination string
}

// Drainer is implemented by implementations that make external effects in
// the background, such as an outbox relay. Drain returns once every
// external effect committed before the call has been acknowledged by the
// destination, or with ctx's error when ctx ends first. The harness drains
// before it counts what reached the destination; without Drain it waits
// until every effect committed has arrived there, then until the
// destination has heard nothing for as long as the implementation was seen
// to wait before its sends (or for its send pace while an effect is still
// owed), a slower and weaker signal.
type Drainer interface {
	Drain(ctx context.Context) error
}

// Clock tells the time.
type Clock interface {
	Now() time.Time
}

// Factory builds one instance of an implementation from the harness's
// environment. The instance owns its connections; the harness calls Close.
type Factory func(ctx context.Context, env Env) (Implementation, error)

// Adapter names an implementation, states its declaration and builds
// instances of it. It is what suite.Run and the harmless CLI take.
type Adapter struct {
	// Name identifies the adapter in reports and on the command line.
	Name string
	// Declares is what the implementation claims.
	Declares Declaration
	// New builds one instance.
	New Factory
}

// Validate reports an error when the adapter cannot be used.
func (a Adapter) Validate() error {
	if a.Name == "" {
		return errors.New("adapter has no name")
	}
	if a.New == nil {
		return fmt.Errorf("adapter %q has no factory", a.Name)
	}
	switch a.Declares.ConflictPolicy {
	case NoConflictPolicy, RejectConflicts:
	default:
		return fmt.Errorf("adapter %q declares unknown conflict policy %q (known: %q)", a.Name, a.Declares.ConflictPolicy, RejectConflicts)
	}
	if a.Declares.RedeliveryWindow < 0 {
		return fmt.Errorf("adapter %q declares a negative redelivery window %s", a.Name, a.Declares.RedeliveryWindow)
	}
	if !a.Declares.ExternalEffects.Valid() {
		return fmt.Errorf("adapter %q declares unknown external effects %q (known: %q, %q)", a.Name, a.Declares.ExternalEffects, Outbox, DestinationIdempotency)
	}
	switch d := a.Declares.MaxSendDelay; {
	case d < 0:
		return fmt.Errorf("adapter %q declares a negative max send delay %s", a.Name, d)
	case d > 0 && a.Declares.ExternalEffects == NoExternalEffects:
		return fmt.Errorf("adapter %q declares a max send delay of %s but no external effects: the delay bounds how long it takes to send an external effect, so declare ExternalEffects too, or no delay", a.Name, d)
	}
	return nil
}

// shownBytes is how much of a long namespace or id String shows.
const shownBytes = 48

func quoteIfNeeded(s string) string {
	if len(s) > shownBytes {
		return fmt.Sprintf("%q…(%d bytes)", s[:shownBytes], len(s))
	}
	for _, r := range s {
		if r == '/' || r < 0x21 || r > 0x7e || r == '"' || r == utf8.RuneError {
			return fmt.Sprintf("%q", s)
		}
	}
	if s == "" {
		return `""`
	}
	return s
}
