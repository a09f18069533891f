// Package catalogid holds the stable ids of the catalogue's fixtures,
// rules and requirements as Go names, for the harness's code that names
// them. The fixtures' and rules' ids (ids_gen.go) are generated, with the
// catalogue of package fixtures, from the fixtures' definitions in
// internal/suite, where each id is written once; the tests name them
// here. The suite's own code names its ids as its definitions do instead,
// since the generator compiles it (TestGeneratorNeedsNotItsOutput in
// internal/docgen). The requirements' ids, which the definitions and
// internal/applicability share, are written here. Users read the ids as
// strings, from the catalogue, `harmless list` and certificates, so they
// need no Go names of their own: no public code names a fixture apart,
// since what a fixture verifies is the catalogue's data too
// (fixtures.Fixture.Verifies).
package catalogid

// The ids of the requirements a fixture or a variant may have
// (fixtures.Requirement), which internal/applicability decides. They are
// stable: the CLI's JSON carries them.
const (
	// NeedsRedeliveryWindow is met by an implementation that declares a
	// redelivery window the harness can play: any window when it accepts
	// the harness's clock, at most applicability.RealTimeMaxWindow when
	// the harness must wait it out in real time.
	NeedsRedeliveryWindow = "redelivery-window"
	// NeedsOwnedServer is met by a run on a database server the harness
	// started for it (a throwaway container or cluster), which it may
	// crash; never by a server named by a DSN.
	NeedsOwnedServer = "owned-server"
	// NeedsInProcess is met by an implementation that runs in the
	// harness's process and calls the Go effect, where the harness's Go
	// hooks reach it; never by one in another process (--exec).
	NeedsInProcess = "in-process"
	// NeedsExternalEffects is met by an implementation that declares how
	// it makes effects outside the database (adapters.ExternalEffects).
	// Unlike the others, an unmet NeedsExternalEffects is no gap in the
	// run: an implementation that makes no external effect has nothing at
	// that boundary to certify, and the fixture's rules are not-applicable
	// (applicability.Decision.NotApplicable), which does not lower its
	// status.
	NeedsExternalEffects = "external-effects"
	// NeedsFormation is met by a run on a replicated formation the harness
	// started (--provision ha: a primary, a synchronous standby and the
	// HA engine that promotes it), where it can fail the primary over.
	// Unmet, it is no gap in the run either: a run on a single server
	// models a deployment without a standby, which has no failover, and
	// the fixture's rules are not-applicable.
	NeedsFormation = "ha-formation"
	// NeedsSingleServer is met by a run on one server, not on a
	// replicated formation: there a crash of the primary is a failover,
	// which the failover fixture plays, not a crash and a restart of the
	// same server. Unmet, the rules are not-applicable, as for
	// NeedsFormation.
	NeedsSingleServer = "single-server"
)
