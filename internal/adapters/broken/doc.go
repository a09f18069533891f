// Package broken holds deliberately broken implementations, each modelled on
// a bug seen in real deduplication code, each a built-in adapter. They prove
// the suite's checks: every one must fail at least one rule. The rules each
// must fail, exactly, are its entry in the registry of built-in adapters
// (package internal/adapters/builtin); docs/proof.md shows them. Apart
// from its bug, each is the reference implementation (package reference):
// the same effect through adapters.Effect.Apply, the same processed-events
// table in the play's schema, the harness's clock, the same identity checks and the same
// declaration (conflict policy "reject", the reference's redelivery window,
// AcceptsClock). Only the four whose bug lies at the external boundary
// declare external effects; the others declare none, and the
// external-effect fixture does not apply to them. Three show their bug only
// when the database fails over (broken-async-commit, broken-cached-claims,
// broken-single-host): the rules they must fail are the failover fixture's,
// played on a replicated formation, and on a single server nothing tells
// them from the reference, so they are certified there.
//
// | adapter                  | package         | bug                                                             |
// |--------------------------|-----------------|-----------------------------------------------------------------|
// | broken-always-errors     | alwayserrors    | the processed-events table never created: every delivery fails |
// | broken-async-commit      | asynccommit     | synchronous_commit = local: COMMIT does not wait for the standby |
// | broken-busy-is-duplicate | busyisduplicate | lock_timeout on another's open claim answered Duplicate         |
// | broken-cached-claims     | cachedclaims    | claims seen committed cached in memory, answered without a query |
// | broken-case-folded       | casefolded      | the marker keyed by lower(id)                                   |
// | broken-check-then-insert | checktheninsert | SELECT then INSERT, no unique constraint on the marker          |
// | broken-early-purge       | earlypurge      | Purge removes markers still inside the declared window          |
// | broken-effect-first      | effectfirst     | effect committed, then the marker in a second transaction       |
// | broken-gives-up          | givesup         | an inbox: marker committed, effect tried 5 times, then abandoned |
// | broken-ignore-payload    | ignorepayload   | a claimed identity is always Duplicate; payloads never compared |
// | broken-in-memory         | inmemory        | the dedup set is a map in each instance's memory                |
// | broken-lossy-key         | lossykey        | the marker keyed by the identity in JSON (invalid UTF-8 lost)   |
// | broken-marker-first      | markerfirst     | marker committed, then the effect in a second transaction       |
// | broken-no-namespace      | nonamespace     | the marker is keyed by the event id alone                       |
// | broken-no-purge          | nopurge         | a window is declared, but Purge removes nothing                 |
// | broken-outbox-delete-first | outboxdeletefirst | the relay deletes the outbox row and commits, then sends |
// | broken-random-key        | randomkey       | an outbox relay making a new idempotency key for every send     |
// | broken-rebuild-purge     | rebuildpurge    | Purge copies the kept markers to a new table, drops the old one and renames |
// | broken-redelivery-errors | redeliveryerrors | the effect, then a plain INSERT of the marker: every redelivery errs on the key |
// | broken-retry-no-token    | retrynotoken    | a retry helper taking a COMMIT whose answer was lost for a success |
// | broken-retry-swallows    | retryswallows   | a retry helper acknowledging a transaction that failed for good |
// | broken-send-after-commit | sendaftercommit | the external call after COMMIT with no outbox                   |
// | broken-send-in-tx        | sendintx        | the external call inside the transaction, a fresh key per attempt |
// | broken-single-host       | singlehost      | only the first host of a multi-host DSN, target_session_attrs ignored |
// | broken-sql-splice        | sqlsplice       | the identity spliced into the claim's SQL text                  |
// | broken-time-bucketed-key | timebucketed    | the claim's UTC day in the marker's unique key                  |
// | broken-truncated-key     | truncatedkey    | the marker keyed by the id cut to 64 characters                 |
//
// Each sub-package exports Name and Adapter; package builtin registers them
// all. Each sub-package's documentation tells the real-world story.
package broken
