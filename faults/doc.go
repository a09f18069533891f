// Package faults injects failures into the one place the harness owns inside
// an implementation's transaction: the effect. It is the harness's
// database fault points, and a user's too: a test of one's own can install
// them in a schema of its own, on its own database, and fail its own
// transactions at the effect or at COMMIT (see the example).
//
// Every implementation under test applies its effect as one INSERT into the
// spec's ledger table (see adapters.Effect), in the same transaction that
// claims the event's deduplication marker. That INSERT is the harness's
// foothold. A fault planned on it fails the transaction at a known point,
// and the harness then checks that the marker rolled back with the effect,
// so that the broker's redelivery still applies the effect exactly once.
//
// # Database-side faults
//
// [Install] puts a plan table, a trigger function and two triggers on the
// ledger, all in the spec's own schema, so dropping the schema removes them;
// in a schema without a ledger it creates one, whose INSERT it documents.
// [Arm] records a [Plan]: which event (namespace and id, compared as exact
// bytes with the ledger row), which delivery attempt (0 for every attempt),
// how many times at most ([Plan.Times]), where it fires ([Point]) and what
// it does ([Action]):
//
//   - [AtEffect] fires as the effect row is inserted (a plain AFTER INSERT
//     row trigger); [AtCommit] fires when the transaction commits (a
//     DEFERRABLE INITIALLY DEFERRED constraint trigger), after everything the
//     implementation did, just before the commit becomes durable.
//   - [Raise] fails the statement (or the COMMIT) with SQLSTATE HF001;
//     [IsInjected] recognises the error. [Sleep] holds
//     the transaction open to widen race windows between concurrent
//     deliveries; [SleepThenRaise] holds it, then fails it; a [Gate] holds
//     it, without a lock, until [Fault.Open]. [Terminate] makes the backend
//     terminate itself: the client sees SQLSTATE 57P01 or a closed
//     connection, and the transaction is gone.
//
// Because they are triggers, these faults work for implementations written
// in any language and using any driver.
//
// [Fault.Disarm] deletes a plan, so the fault never fires again, while its
// evidence (below) stays readable. A transaction already inside the fault,
// a sleep say, is not woken. The harness disarms its faults before it
// crashes the server, so that a plan meant for a delivery before the crash
// cannot hold up a delivery after the restart.
//
// A fault is worth nothing if it never fired: a spec that "survived" a fault
// that did not happen proves nothing. Each armed fault therefore has its own
// sequence, advanced by the trigger before it acts. Sequences are not
// transactional, so [Fault.Fired] counts firings even though the fault
// itself rolled back the transaction that fired it, and even when the backend
// terminated.
//
// Every armed fault, whatever injects it, is [Armed]: it tells its kind
// ("db:raise@commit", "proxy:cut@before-commit", and the harness's own
// "hook:panic" or "server:crash") and how often it fired, and the harness
// counts every fault it arms through that one interface. The wire proxy
// that cuts connections at protocol points, package faults/pgproxy, arms
// Armed faults too.
//
// Functions that reach the database take a [DB]: a *pgxpool.Pool, a
// *pgx.Conn or a pgx.Tx.
//
// # What is not here
//
// What only the harness can use moved under the module's internal/ (issue
// 23). The Go hooks that fail the effect of an in-process implementation
// before its INSERT (an error, a panic, a cancelled context) are
// internal/hooks': only the effect the harness builds runs them.
// Terminating the backends of a run's connections, cancelling those
// that sleep in a [Sleep] fault and waiting for cut backends to go are
// internal/backends'. Counting the faults armed in a schema, as the harness
// does to notice one armed around its count, is internal/faultplan's.
package faults
