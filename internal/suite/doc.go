// Package suite is the conformance suite behind the public package
// github.com/harmless-dev/harmless/suite, which forwards to it: the
// fixtures of package fixtures played against an [adapters.Adapter], and
// the certificate built from what they recorded. It holds, besides what
// the public package offers, the options only the harmless command and
// the harness's own tests need (the selection of rules, the exec
// protocol's record, secrets, per-fixture progress, the concurrent-delivery
// tuning).
//
// The fixtures describe themselves as a tree of plain values (tree.go):
// a node per fixture and variant, a play on each node that plays, with
// its gather function, and the rules' judges, each returning a typed
// judgement. The engine (engine.go) walks the tree for Run, RunWith and
// Certify, with no test framework: it owns the budgets, the selection and
// the certificate. Register (ginkgo.go) walks the same tree into Ginkgo
// containers, whose BeforeAll runs a play's gather function and whose Its
// judge its rules and assert the judgements with Gomega: Ginkgo is a thin
// layer, and no verdict is read back from it.
//
// # How a fixture is played
//
// Every play of a fixture (the fixture's own, or one variant's) gets a
// fresh schema holding the harness's effect ledger and its fault points,
// and builds instances of the implementation (two, most often) through the
// adapter's factory; the rules of that play are its rules, each judging
// what the play gathered, and they share the play's schema and instances
// rather than getting their own. The harness delivers events as an
// at-least-once broker does, redelivering whatever is not acknowledged,
// and then judges the ledger, not the implementation's own report.
// Faults are injected by database triggers, by Go hooks inside the effect
// and by killing connections; every play that plans a fault checks that
// it fired.
//
// An implementation that hangs fails the rules of its play through timeouts
// and the run goes on; one that panics or returns nonsense fails the rule with a message.
package suite
