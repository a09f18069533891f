// Package suite is the conformance suite behind the public package
// github.com/harmless-dev/harmless/suite, which forwards to it: Ginkgo v2
// specs that play the fixtures of package fixtures against an
// [adapters.Adapter], and the certificate built from what they recorded.
// It holds, besides what the public package offers, the options only the
// harmless command and the harness's own tests need (Ginkgo's
// configuration, the exec protocol's record, secrets, per-fixture
// progress, the concurrent-delivery tuning).
//
// Run, RunWith and Certify host a Ginkgo suite of their own: they may be
// called any number of times in one process, one at a time, but not in a
// test binary that has Ginkgo specs of its own (use Register there): the
// reset removes them, and that suite, run afterwards, fails saying so.
//
// Each rule's verdict is recorded, as the rule's spec runs, in a typed
// record of the registration; Ginkgo's report adds only whether a spec ran
// at all and the messages of failures outside a rule's check (a timeout,
// an interrupt).
//
// # How a fixture is played
//
// Every play of a fixture (an Ordered container: the fixture's scenario, or
// one variant of it) gets a fresh schema holding the harness's effect
// ledger and its fault points, and builds instances of the implementation
// (two workers) through the adapter's factory; the rules of that play are
// its specs, each judging what the play gathered, and they share the
// play's schema and instances rather than getting their own. The
// harness delivers events as an at-least-once broker does, redelivering
// whatever is not acknowledged, and then judges the ledger, not the
// implementation's own report. Faults are injected by database triggers, by
// Go hooks inside the effect and by killing connections; every play that
// plans a fault checks that it fired.
//
// An implementation that hangs fails the rules of its play through timeouts
// and the run goes on; one that panics or returns nonsense fails the rule with a message.
package suite
