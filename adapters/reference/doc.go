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
// # External effects: the outbox
//
// An external effect (an email, a payment, an HTTP call) cannot join the
// transaction: whether it is made before or after COMMIT, a crash between
// the two makes it twice or never. The reference makes it with an outbox
// (internal/adapters/outbox in harmless's source, to read and copy) and an
// idempotency key the destination honours:
//
//  1. the claim's transaction also inserts an outbox row (the event and
//     its key, [external.Key] of the identity) — only when the claim
//     succeeded, so a Duplicate, a Rejected copy or a rolled-back claim
//     writes nothing, and a committed claim always has its row;
//  2. after COMMIT, Deliver wakes the instance's relay;
//     the relay also polls, for rows left by a stopped instance;
//  3. the relay takes the oldest row with SELECT ... FOR UPDATE SKIP
//     LOCKED, in a transaction of its own, so no two relays send one row at
//     once and each sends the others' rows meanwhile;
//  4. it sends the row with the key stored in it ([external.Send]) and
//     deletes the row in that same transaction only after the destination
//     acknowledged it. A crash, a lost answer or a 5xx before that COMMIT
//     leaves the row, whose lock dies with the session: the row is sent
//     again, with the same key, and the destination replays its first
//     answer instead of making the effect twice. Failed sends are retried
//     after a backoff doubling from 10 ms to 1 s;
//  5. a 422 (the key reused with another body) is a bug somewhere that no
//     retry fixes: the row is parked (its parked column set) and logged.
//
// So the destination makes each applied event's effect at least once
// through the outbox, and exactly once through the key. The key must come
// from the identity, never from the attempt: a fresh key per send turns a
// lost answer into a second charge.
//
// The adapter's Drain ([adapters.Drainer]) returns once no row committed
// before the call is left unsent, by this relay or another. Close stops the
// relay without draining, as a killed process would: the next instance on
// the schema sends what is left. An instance given no
// [adapters.Env.Destination] writes no outbox rows and runs no relay.
//
// # What it does not cover
//
// Only effects inside the same PostgreSQL database are made atomic with the
// marker; the outbox makes an external effect reach a destination that
// honours idempotency keys exactly once. A destination without keys can
// only be reconciled.
package reference
