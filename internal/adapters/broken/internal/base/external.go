package base

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/external"
	"github.com/harmless-dev/harmless/internal/adapters/outbox"
)

// client is the HTTP client the broken adapters send effects with; it is
// never modified.
var client = &http.Client{Timeout: external.DefaultTimeout}

// Send makes ev's external effect at the instance's destination with key,
// as [external.Send] does. Without a destination it sends nothing.
func (i *Instance) Send(ctx context.Context, key string, ev adapters.Event) error {
	if i.Env.Destination == "" {
		return nil
	}
	return external.Send(ctx, client, i.Env.Destination, key, ev)
}

// RandomKey returns a fresh idempotency key, unrelated to any event: the
// mistake several broken adapters make.
func RandomKey() string { return "random-" + rand.Text() }

// Relay is an outbox relay: [outbox.Outbox] is one.
type Relay interface {
	// Run sends the outbox's rows until ctx ends.
	Run(ctx context.Context)
	// Wake tells the relay that a row has committed.
	Wake()
	// Drain returns once the rows committed before the call are sent.
	Drain(ctx context.Context) error
}

// Relayed is a broken adapter with the reference's outbox and a relay of
// its own making: it writes the outbox row in the claim's transaction, as
// the reference does, and the bug lies in the relay.
type Relayed struct {
	*Instance
	outbox *outbox.Outbox // nil without a destination
	relay  Relay
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// OutboxAdapter returns the adapter called name, declaring an outbox. Each
// instance writes outbox rows as the reference does and runs the relay
// that newRelay makes from the reference's outbox configuration (Send is
// external.Send with the row's key) and the instance's pool.
func OutboxAdapter(name string, newRelay func(inst *Instance, cfg outbox.Config) (*outbox.Outbox, Relay)) adapters.Adapter {
	return adapters.Adapter{Name: name, Declares: declaring(adapters.Outbox), New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
		inst, err := open(ctx, env, name, KeyedColumns, nil)
		if err != nil {
			return nil, err
		}
		r := &Relayed{Instance: inst, stop: func() {}}
		if env.Destination == "" {
			return r, nil
		}
		r.outbox, r.relay = newRelay(inst, outbox.Config{Schema: env.Schema, Now: inst.Now, Logf: env.Logf, Send: inst.Send})
		if err := r.outbox.Migrate(ctx); err != nil {
			inst.Pool.Close()
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		var relayCtx context.Context
		relayCtx, r.stop = context.WithCancel(context.WithoutCancel(ctx))
		r.wg.Go(func() { r.relay.Run(relayCtx) })
		return r, nil
	}}
}

// Deliver is the reference's: the claim, the effect and the outbox row in
// one transaction, then the relay is woken.
func (r *Relayed) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	outcome, err := r.Process(ctx, d, func(ctx context.Context, tx pgx.Tx, d adapters.Delivery) (bool, error) {
		claimed, err := r.Claim(ctx, tx, d)
		if err != nil || !claimed || r.outbox == nil {
			return claimed, err
		}
		return true, r.outbox.Add(ctx, tx, d.Event)
	}, r.Compare)
	if outcome == adapters.Applied && r.relay != nil {
		r.relay.Wake()
	}
	return outcome, err
}

// Drain drains the relay.
func (r *Relayed) Drain(ctx context.Context) error {
	if r.relay == nil {
		return nil
	}
	return r.relay.Drain(ctx)
}

// Close stops the relay without draining and closes the pool.
func (r *Relayed) Close(ctx context.Context) error {
	r.stop()
	r.wg.Wait()
	return r.Instance.Close(ctx)
}
