// Package watermill certifies watermill's middleware.Deduplicator
// (github.com/ThreeDotsLabs/watermill v1.5.1) as an idempotent consumer,
// wired as its godoc and its own test (deduplicator_test.go) wire it: a
// Deduplicator per instance whose Middleware wraps the handler, with the
// default repository (NewMapExpiringKeyRepository, one minute) and a
// KeyFactory that reads the event's identity from the message's metadata.
// The handler applies the effect in a pgx transaction of its own.
//
//harmless:library github.com/ThreeDotsLabs/watermill
package watermill

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
)

// Name is the adapter's name.
const Name = "watermill"

// Metadata fields the publisher sets on each message. KeyField carries the
// deduplication key; the others let the handler rebuild the delivery.
const (
	KeyField       = "event_key"
	NamespaceField = "event_namespace"
	IDField        = "event_id"
	AttemptField   = "delivery_attempt"
)

// maxConns keeps each instance's pool small: the in-memory deduplicator lets
// one delivery per key through, so few transactions run at once.
const maxConns = 4

// Adapter returns the watermill adapter. It declares nothing: the
// Deduplicator compares no payloads (no conflict policy), its window and
// clean-up run on time.Now and offer no purge by cutoff (no window, no
// Purger, no clock), and it makes no external effect.
func Adapter() adapters.Adapter {
	return adapters.Adapter{Name: Name, New: newInstance}
}

// Key is the deduplication key of an event: the namespace's length, the
// namespace and the id, so that no two identities share a key (a plain
// namespace+"/"+id would merge ("a/b","c") with ("a","b/c"), a fault of the
// wiring rather than of watermill).
func Key(ev adapters.Event) string {
	return strconv.Itoa(len(ev.Namespace)) + ":" + ev.Namespace + "/" + ev.ID
}

// NewMessage builds the message a publisher would send for d: a fresh UUID,
// the payload, and the identity in metadata.
func NewMessage(d adapters.Delivery) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), d.Payload)
	msg.Metadata.Set(KeyField, Key(d.Event))
	msg.Metadata.Set(NamespaceField, d.Namespace)
	msg.Metadata.Set(IDField, d.ID)
	msg.Metadata.Set(AttemptField, strconv.Itoa(d.Attempt))
	return msg
}

// NewDeduplicator returns an instance's Deduplicator as the godoc describes
// it: the key from metadata (NewMessageHasherFromMetadataField), the
// default repository (left nil, so Middleware installs
// NewMapExpiringKeyRepository(time.Minute)) and the default timeout.
func NewDeduplicator() *middleware.Deduplicator {
	return &middleware.Deduplicator{KeyFactory: middleware.NewMessageHasherFromMetadataField(KeyField)}
}

type instance struct {
	pool    *pgxpool.Pool
	effect  adapters.Effect
	handler message.HandlerFunc
}

// ranKey is the context key of the flag the handler sets when it commits,
// so Deliver can tell Applied from a message the Deduplicator dropped:
// the middleware returns nil, nil in both cases.
type ranKey struct{}

func newInstance(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
	cfg, err := pgxpool.ParseConfig(env.DSN)
	if err != nil {
		return nil, fmt.Errorf("watermill: parse dsn: %w", err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("watermill: open pool: %w", err)
	}
	in := &instance{pool: pool, effect: env.Effect}
	// One Deduplicator per instance, wrapping the handler once, as
	// router.AddMiddleware(d.Middleware) would.
	in.handler = NewDeduplicator().Middleware(in.handle)
	return in, nil
}

// handle is the instance's handler: it applies the effect in its own
// transaction.
func (in *instance) handle(msg *message.Message) ([]*message.Message, error) {
	ctx := msg.Context()
	attempt, err := strconv.Atoi(msg.Metadata.Get(AttemptField))
	if err != nil {
		return nil, fmt.Errorf("watermill: message %s: attempt: %w", msg.UUID, err)
	}
	d := adapters.Delivery{
		Event:   adapters.Event{Namespace: msg.Metadata.Get(NamespaceField), ID: msg.Metadata.Get(IDField), Payload: msg.Payload},
		Attempt: attempt,
	}
	err = pgx.BeginFunc(ctx, in.pool, func(tx pgx.Tx) error { return in.effect.Apply(ctx, tx, d) })
	if err != nil {
		return nil, fmt.Errorf("watermill: apply %s: %w", d.Event, err)
	}
	if ran, ok := ctx.Value(ranKey{}).(*bool); ok {
		*ran = true
	}
	return nil, nil
}

// Deliver builds the message and calls the wrapped handler, as the router
// would for a message from the broker: Applied when the handler committed,
// Duplicate when the Deduplicator dropped the message.
func (in *instance) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	var ran bool
	msg := NewMessage(d)
	msg.SetContext(context.WithValue(ctx, ranKey{}, &ran))
	if _, err := in.handler(msg); err != nil {
		return 0, err
	}
	if ran {
		return adapters.Applied, nil
	}
	return adapters.Duplicate, nil
}

// Close closes the pool. The default repository's clean-up goroutine runs
// on context.Background and has no way to be stopped: it outlives the
// instance.
func (in *instance) Close(context.Context) error {
	in.pool.Close()
	return nil
}
