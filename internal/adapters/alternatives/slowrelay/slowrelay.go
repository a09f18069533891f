// Package slowrelay is the `alt-slow-relay` adapter: the reference's claim
// with a transactional outbox for the external effect, whose relay only
// polls, every three seconds; and `alt-quick-relay`, the same relay
// polling every half second.
//
// # The technique
//
// A delivery runs the reference's transaction (package reference: INSERT
// ... ON CONFLICT DO NOTHING RETURNING, the effect only if a row came back)
// and, in that same transaction, inserts a row into its outbox with the
// event and its idempotency key, [external.Key] of the identity. After
// COMMIT it does nothing more: nobody wakes the relay.
//
// Each instance runs a relay on a ticker, every [PollEvery]. At each tick
// it locks the unsent rows (SELECT ... FOR UPDATE SKIP LOCKED, oldest
// first, in one transaction), sends them one after the other with their
// stored key, deletes each one the destination acknowledged, and commits.
// A send that fails ends the tick: the rows sent so far are deleted, and
// the failed one and those after it wait for the next tick. A 422 (the key
// reused with another body) is a bug no retry fixes: the row is marked
// refused, logged and left for a human.
//
// It does not implement [adapters.Drainer]: nothing tells when the outbox
// is empty but the destination's silence. Close stops the relay without
// sending what is left: the next instance on the schema sends it.
//
// # Why it is correct
//
// The outbox row commits with the claim and the database effect, or not at
// all, so every applied event has exactly one row, and Duplicates,
// Rejected copies and rolled-back claims have none. A row is deleted only
// after the destination acknowledged it, in the transaction that holds its
// lock: a crash, a cut connection or a failed send before that COMMIT
// leaves it, unlocked with the session, for the next tick of some relay,
// which sends it with the same key, and the destination replays its first
// answer instead of making the effect twice.
//
// # Costs
//
//   - Latency: an effect reaches the destination up to three seconds after
//     its commit, and a failed send three seconds later again. Whoever
//     waits for the effect (a test, a drain before shutdown) can only wait
//     for the destination to have been quiet for longer than that.
//   - A tick holds one transaction, and the locks of every row it took,
//     while it sends them all; a slow destination holds them longer.
//   - It rests on the destination honouring keys for as long as a row may
//     be resent.
package slowrelay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/external"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// Name is the adapter's name.
const Name = "alt-slow-relay"

// PollEvery is how often the relay looks at the outbox.
const PollEvery = 3 * time.Second

// QuickName is the name of the same adapter with a relay that polls every
// [QuickPollEvery]: a forwarder that sends within a second and cannot be
// drained either, the case where how long the harness waits on the
// destination shows most, against how long the relay takes.
const QuickName = "alt-quick-relay"

// QuickPollEvery is how often alt-quick-relay's relay looks at the outbox.
const QuickPollEvery = 500 * time.Millisecond

// batch bounds the rows one tick takes.
const batch = 100

// Adapter returns the `alt-slow-relay` adapter. It declares the
// reference's claims about the database, and an outbox.
func Adapter() adapters.Adapter { return polling(Name, PollEvery) }

// QuickAdapter returns the `alt-quick-relay` adapter: alt-slow-relay
// whose relay polls every [QuickPollEvery].
func QuickAdapter() adapters.Adapter { return polling(QuickName, QuickPollEvery) }

// polling is the adapter named name whose relays poll every every.
func polling(name string, every time.Duration) adapters.Adapter {
	declares := reference.Adapter().Declares
	declares.ExternalEffects = adapters.Outbox
	return adapters.Adapter{Name: name, Declares: declares, New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
		return open(ctx, env, name, every)
	}}
}

type implementation struct {
	name        string        // the adapter's, for messages
	every       time.Duration // how often the relay polls
	pool        *pgxpool.Pool
	store       *reference.Store
	outbox      string // quoted, schema-qualified
	effect      adapters.Effect
	clock       adapters.Clock
	destination string // "" without external effects: no outbox rows, no relay
	logf        func(string, ...any)
	client      *http.Client

	stop    context.CancelFunc
	stopped sync.WaitGroup
}

func open(ctx context.Context, env adapters.Env, name string, every time.Duration) (adapters.Implementation, error) {
	pool, err := kit.Pool(ctx, env.DSN)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	i := &implementation{
		name:        name,
		every:       every,
		pool:        pool,
		store:       reference.NewStore(pool, reference.Config{Schema: env.Schema, Table: "slow_relay_events", Now: env.Clock.Now}),
		outbox:      kit.Table(env.Schema, "slow_relay_outbox"),
		effect:      env.Effect,
		clock:       env.Clock,
		destination: env.Destination,
		logf:        env.Logf,
		client:      &http.Client{Timeout: external.DefaultTimeout},
		stop:        func() {},
	}
	if i.logf == nil {
		i.logf = func(string, ...any) {}
	}
	if err := i.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if i.destination != "" {
		// The relay outlives the construction's ctx: Close stops it.
		var relayCtx context.Context
		relayCtx, i.stop = context.WithCancel(context.WithoutCancel(ctx))
		i.stopped.Go(func() { i.relay(relayCtx) })
	}
	return i, nil
}

func (i *implementation) migrate(ctx context.Context) error {
	if err := i.store.Migrate(ctx); err != nil {
		return err
	}
	// seq orders the rows; refused holds the destination's 422, after
	// which the row is never sent again.
	_, err := i.pool.Exec(ctx, kit.CreateIfMissing(i.outbox, `CREATE TABLE `+i.outbox+` (
	seq             bigserial   PRIMARY KEY,
	namespace       text        NOT NULL,
	event_id        text        NOT NULL,
	payload         bytea       NOT NULL,
	idempotency_key text        NOT NULL,
	committed_at    timestamptz NOT NULL,
	refused         text
)`))
	if err != nil {
		return fmt.Errorf("create %s: %w", i.outbox, err)
	}
	return nil
}

// Deliver claims the event and, if the claim succeeded, applies the
// database effect and writes the outbox row, all in one transaction.
func (i *implementation) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	return i.store.Process(ctx, d.Event, func(ctx context.Context, tx pgx.Tx) error {
		if err := i.effect.Apply(ctx, tx, d); err != nil {
			return err
		}
		if i.destination == "" {
			return nil
		}
		payload := d.Payload
		if payload == nil {
			payload = []byte{} // NOT NULL: an empty payload is still a payload
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+i.outbox+` (namespace, event_id, payload, idempotency_key, committed_at)
VALUES ($1, $2, $3, $4, $5)`, d.Namespace, d.ID, payload, external.Key(d.Event), i.clock.Now())
		if err != nil {
			return fmt.Errorf("outbox row of %s: %w", d.Event, err)
		}
		return nil
	})
}

// relay sends the outbox at every tick until ctx ends.
func (i *implementation) relay(ctx context.Context) {
	tick := time.NewTicker(i.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if sent, err := i.sendPending(ctx); err != nil && ctx.Err() == nil {
			i.logf("%s relay: sent %d, then %v; retrying at the next poll, in %s", i.name, sent, err, i.every)
		}
	}
}

// row is one outbox row.
type row struct {
	seq int64
	key string
	ev  adapters.Event
}

// sendPending sends the unsent rows no other relay holds, in one
// transaction, and deletes those the destination acknowledged. It stops at
// the first failed send.
func (i *implementation) sendPending(ctx context.Context) (sent int, err error) {
	tx, err := i.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, `SELECT seq, idempotency_key, namespace, event_id, payload FROM `+i.outbox+`
WHERE refused IS NULL ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED`, batch)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", i.outbox, err)
	}
	pending, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var o row
		err := r.Scan(&o.seq, &o.key, &o.ev.Namespace, &o.ev.ID, &o.ev.Payload)
		return o, err
	})
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", i.outbox, err)
	}
	var failed error
	for _, o := range pending {
		statement, args := `DELETE FROM `+i.outbox+` WHERE seq = $1`, []any{o.seq}
		if err := external.Send(ctx, i.client, i.destination, o.key, o.ev); errors.Is(err, external.ErrConflict) {
			i.logf("%s relay: %v; refused for good, not retried", i.name, err)
			statement, args = `UPDATE `+i.outbox+` SET refused = $2 WHERE seq = $1`, []any{o.seq, err.Error()}
		} else if err != nil {
			failed = fmt.Errorf("send %s: %w", o.ev, err)
			break
		}
		if _, err := tx.Exec(ctx, statement, args...); err != nil {
			return 0, fmt.Errorf("settle %s row %d: %w", i.outbox, o.seq, err)
		}
		sent++
	}
	if ctx.Err() != nil {
		return 0, context.Cause(ctx) // stopped: roll back, the rows stay
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	return sent, failed
}

func (i *implementation) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	return i.store.Purge(ctx, cutoff)
}

// Close stops the relay without sending what is left, as a killed process
// would: the rows stay for the next instance. Then it closes the pool.
func (i *implementation) Close(context.Context) error {
	i.stop()
	i.stopped.Wait()
	i.pool.Close()
	return nil
}

var (
	_ adapters.Implementation = (*implementation)(nil)
	_ adapters.Purger         = (*implementation)(nil)
)
