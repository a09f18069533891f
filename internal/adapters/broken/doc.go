// Package broken holds deliberately broken implementations, each modelled on
// a bug seen in real deduplication code, each a built-in adapter. They prove
// the suite's checks: every one must fail at least one rule, and the rule
// that catches it is named below. Apart from its bug, each is the reference
// implementation (package reference): the same effect through
// adapters.Effect.Apply, the same processed-events table in the play's
// schema, the harness's clock, the same identity checks and the same
// declaration (conflict policy "reject", the reference's redelivery window,
// AcceptsClock). Only the four whose bug lies at the external boundary
// declare external effects; the others declare none, and the
// external-effect fixture does not apply to them.
//
// | adapter                  | package         | bug                                                             | caught by                                                                                     |
// |--------------------------|-----------------|-----------------------------------------------------------------|-----------------------------------------------------------------------------------------------|
// | broken-always-errors     | alwayserrors    | the processed-events table never created: every delivery fails | every fixture but external-effect                                                             |
// | broken-busy-is-duplicate | busyisduplicate | lock_timeout on another's open claim answered Duplicate         | concurrent-delivery, conflicting-payload, crash-recovery                                      |
// | broken-case-folded       | casefolded      | the marker keyed by lower(id)                                   | identity-fidelity                                                                             |
// | broken-check-then-insert | checktheninsert | SELECT then INSERT, no unique constraint on the marker          | concurrent-delivery, conflicting-payload                                                      |
// | broken-early-purge       | earlypurge      | Purge removes markers still inside the declared window          | retention-expiry                                                                              |
// | broken-effect-first      | effectfirst     | effect committed, then the marker in a second transaction       | concurrent-delivery, conflicting-payload, ambiguous-commit, crash-recovery                    |
// | broken-ignore-payload    | ignorepayload   | a claimed identity is always Duplicate; payloads never compared | conflicting-payload                                                                           |
// | broken-in-memory         | inmemory        | the dedup set is a map in each worker's memory                  | double-delivery, concurrent-delivery, conflicting-payload, retention-expiry, ambiguous-commit |
// | broken-lossy-key         | lossykey        | the marker keyed by the identity in JSON (invalid UTF-8 lost)   | identity-fidelity                                                                             |
// | broken-marker-first      | markerfirst     | marker committed, then the effect in a second transaction       | concurrent-delivery, failure-after-marker, ambiguous-commit, crash-recovery                   |
// | broken-no-namespace      | nonamespace     | the marker is keyed by the event id alone                       | namespace-isolation, identity-fidelity                                                        |
// | broken-no-purge          | nopurge         | a window is declared, but Purge removes nothing                 | retention-expiry                                                                              |
// | broken-outbox-delete-first | outboxdeletefirst | the relay deletes the outbox row and commits, then sends | external-effect |
// | broken-random-key        | randomkey       | an outbox relay making a new idempotency key for every send     | external-effect |
// | broken-send-after-commit | sendaftercommit | the external call after COMMIT with no outbox                   | external-effect |
// | broken-send-in-tx        | sendintx        | the external call inside the transaction, a fresh key per attempt | external-effect |
// | broken-sql-splice        | sqlsplice       | the identity spliced into the claim's SQL text                  | bad-input                                                                                     |
// | broken-time-bucketed-key | timebucketed    | the claim's UTC day in the marker's unique key                  | retention-expiry                                                                              |
// | broken-truncated-key     | truncatedkey    | the marker keyed by the id cut to 64 characters                 | identity-fidelity                                                                             |
//
// Each sub-package exports Name and Adapter; package builtin registers them
// all. Each sub-package's documentation tells the real-world story.
package broken
