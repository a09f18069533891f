// Package adapters is the contract between harmless and an implementation
// under test.
//
// An implementation receives events from an at-least-once broker and must
// make duplicate delivery harmless: whatever the number of deliveries of one
// event, its effect is applied exactly once. harmless drives an
// implementation through three small types:
//
//   - [Event] is what a broker delivers: a namespace, an id and a payload.
//     (Namespace, ID) is the event's identity.
//   - [Delivery] is one delivery of an event. Its Attempt number is chosen by
//     the harness and must be passed through to the effect.
//   - [Implementation] handles one delivery and reports an [Outcome]:
//     [Applied], [Duplicate] or [Rejected]. Returning an error means "not
//     acknowledged": the harness redelivers, as a broker would.
//
// The harness owns the effect. It creates a ledger table in the run's schema
// and hands every implementation an [Effect]: one INSERT into that ledger.
// The implementation must execute it inside the same transaction that claims
// the event's deduplication marker, so marker and effect commit or roll back
// together. The harness counts effects in the ledger itself; it never trusts
// the outcome an implementation reports.
//
// An [Adapter] names an implementation, declares what it claims
// ([Declaration]) and builds instances of it from an [Env]. Declarations only
// select which rules apply; they never weaken an assertion.
//
// An event the implementation cannot store is refused with an error
// wrapping [ErrInvalidInput]; [CheckIdentity] makes the checks the
// reference implementation makes for identities kept in text columns.
package adapters
