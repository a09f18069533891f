// Package suite is the harmless conformance suite: Ginkgo v2 specs that play
// the fixtures of package fixtures against any implementation behind an
// [adapters.Adapter], and a certificate that says which rules held.
//
// From your own tests, run the whole suite with one call:
//
//	func TestConformance(t *testing.T) {
//		suite.Run(t, myAdapter)
//	}
//
// To embed the specs in an existing Ginkgo suite, call [Register] at package
// level and let your own RunSpecs run them:
//
//	var _ = suite.Register(myAdapter)
//
// The harmless command is a thin main over the same specs.
//
// # How a spec works
//
// Every spec gets a fresh schema holding the harness's effect ledger and its
// fault points, and builds instances of the implementation (two workers)
// through the adapter's factory. The harness delivers events as an
// at-least-once broker does, redelivering whatever is not acknowledged, and
// then judges the ledger, not the implementation's own report. Faults are
// injected by database triggers, by Go hooks inside the effect and by killing
// connections; every spec that plans a fault checks that it fired.
//
// An implementation that hangs fails its spec through timeouts and the run
// goes on; one that panics or returns nonsense fails the rule with a message.
package suite
