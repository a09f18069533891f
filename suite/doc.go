// Package suite is the harmless conformance suite: Ginkgo v2 specs that play
// the fixtures of package fixtures against any implementation behind an
// [adapters.Adapter], and a certificate that says which rules held. The
// certificate's model and its reports are package [certificate]
// (suite/certificate), which a program that only reads or renders
// certificates can import without linking Ginkgo or the harness; this
// package builds the certificate from what its specs recorded.
//
// There are three ways to run it, each giving every adapter a certificate
// of its own, from a run (and a database) of its own.
//
// From your own tests, run the whole suite with one call, for one adapter
// or several; [RunWith] takes options, which apply to every adapter:
//
//	func TestConformance(t *testing.T) {
//		suite.Run(t, myAdapter, myOtherAdapter)
//	}
//
// To embed the specs in an existing Ginkgo suite, one with its own
// BeforeSuite and AfterSuite included, call [Register] at package level,
// once per adapter, and let your own RunSpecs run them. It adds only a
// container per adapter, never a suite-level node:
//
//	var _ = suite.Register(myAdapter, suite.WithCertificate(save))
//
// From a program, without a *testing.T, call [Certify], as the harmless
// command does:
//
//	cert, err := suite.Certify(ctx, myAdapter)
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
