// Package outboxdeletefirst is the `broken-outbox-delete-first` adapter:
// the reference's outbox, but its relay deletes a row, commits, and only
// then sends it.
//
// # The real-world bug
//
// An outbox relay that dequeues before it delivers: DELETE ... RETURNING
// (or a queue consumed with auto-acknowledgement) in a short transaction,
// so as not to hold a lock across the network, then the HTTP call. Rows
// leave the table quickly and nothing is sent twice, but a send that
// fails, or a relay stopped after the dequeue, loses the effect: the only
// durable record of it was deleted first.
//
// # What goes wrong
//
// Rows are written as by the reference, with [external.Key] of the
// identity. The relay deletes the oldest row and commits, then sends it
// once; an error is logged and the effect is gone. A 500 or 503, a
// destination that is down, or a stop between the dequeue and the answer
// loses the event's external effect.
//
// # What catches it
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package outboxdeletefirst

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
	"github.com/harmless-dev/harmless/internal/adapters/outbox"
)

// Name is the adapter's name.
const Name = "broken-outbox-delete-first"

// Adapter returns the `broken-outbox-delete-first` adapter. It declares an
// outbox.
func Adapter() adapters.Adapter {
	return base.OutboxAdapter(Name, func(inst *base.Instance, cfg outbox.Config) (*outbox.Outbox, base.Relay) {
		o := outbox.New(inst.Pool, cfg)
		return o, &relay{inst: inst, outbox: o, nudge: make(chan struct{}, 1), busy: make(chan struct{}, 1)}
	})
}

// relay dequeues, then sends.
type relay struct {
	inst   *base.Instance
	outbox *outbox.Outbox
	nudge  chan struct{}
	// busy holds a token from the dequeue to the end of the send, so
	// Drain can wait for a send whose row is already gone.
	busy chan struct{}
}

func (r *relay) Wake() {
	select {
	case r.nudge <- struct{}{}:
	default:
	}
}

func (r *relay) Run(ctx context.Context) {
	for {
		for r.next(ctx) {
		}
		timer := time.NewTimer(outbox.Poll)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-r.nudge:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// next dequeues one row and sends it, and reports whether it found one.
func (r *relay) next(ctx context.Context) bool {
	r.busy <- struct{}{}
	defer func() { <-r.busy }()
	var ev adapters.Event
	var key string
	// The bug: the row is deleted, and the deletion committed, before the
	// destination has acknowledged anything.
	err := r.inst.InTx(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `DELETE FROM `+r.outbox.Table()+` WHERE id = (
	SELECT id FROM `+r.outbox.Table()+` ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED
) RETURNING namespace, event_id, payload, idempotency_key`).Scan(&ev.Namespace, &ev.ID, &ev.Payload, &key)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false
	case err != nil:
		r.logf("outbox relay: dequeue: %v", err)
		return false
	}
	if err := r.inst.Send(ctx, key, ev); err != nil {
		r.logf("outbox relay: %v; the row is gone", err)
	}
	return true
}

func (r *relay) logf(format string, args ...any) {
	if r.inst.Env.Logf != nil {
		r.inst.Env.Logf(format, args...)
	}
}

// Drain waits until the rows committed before the call have been dequeued,
// and the send in progress, if any, has ended.
func (r *relay) Drain(ctx context.Context) error {
	if err := r.outbox.Drain(ctx); err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	select {
	case r.busy <- struct{}{}:
		<-r.busy
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: drain: a send in progress: %w", Name, context.Cause(ctx))
	}
}
