// Package reference is the reference implementation of duplicate-harmless
// event processing on PostgreSQL with pgx v5, and the harness's `reference`
// adapter.
//
// # The pattern
//
// Every event has a stable identity: its namespace and id. A table of
// processed events has a unique key on (namespace, id). To process a
// delivery, one transaction:
//
//  1. claims the identity:
//     INSERT INTO processed_events (namespace, event_id, payload_digest, processed_at)
//     VALUES (...) ON CONFLICT DO NOTHING RETURNING true;
//  2. applies the effect only if a row came back, in the same transaction;
//  3. commits, so marker and effect are durable together or not at all.
//
// A concurrent delivery of the same identity blocks on the unique index until
// the claimant's transaction ends: it then finds the marker (Duplicate) or,
// if the claimant rolled back, claims the event itself. A failure anywhere
// before COMMIT rolls the marker back with the effect, so the event stays
// eligible for retry.
//
// # Payload conflicts
//
// The marker stores the SHA-256 digest of the payload. A delivery whose
// identity is already claimed is compared by digest: the same bytes are a
// Duplicate; different bytes are Rejected (policy "reject", the behaviour of
// Stripe and the IETF Idempotency-Key draft, which answer 422). Payload
// equality is byte equality; the store does not canonicalise payloads.
//
// # Retention
//
// Markers must outlive the broker's redelivery window, and no longer: call
// [Store.Purge] periodically with cutoff = now - window. A redelivery older
// than the window is indistinguishable from a new event.
//
// # What it does not cover
//
// Only effects inside the same PostgreSQL database are made atomic with the
// marker. An external side effect (an email, a payment, an HTTP call) cannot
// join the transaction: write it to an outbox table in the same transaction
// and deliver it separately, rely on the destination's own idempotency key,
// or reconcile.
package reference
