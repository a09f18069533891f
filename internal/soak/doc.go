// Package soak runs an implementation under long, concurrent, faulty load
// and checks the history afterwards, the way Jepsen does: every delivery is
// recorded as an invocation and a completion, a nemesis injects faults on a
// recorded schedule, and a checker judges the history against what the
// ledger (and the destination, for external effects) says happened,
// treating an unknown outcome as unknown rather than as success.
//
// The checker keeps a compact record per delivery and per event, never the
// implementation's errors in full, so a run of a million events fits in a
// little memory. Per event it checks that the outcomes are linearizable
// against a model of one deduplicated event (with porcupine), that the
// ledger holds exactly one effect, and that a conflicting copy applied
// nothing.
package soak
