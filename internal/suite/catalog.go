package suite

import "github.com/harmless-dev/harmless/fixtures"

// Each fixture is defined once, in a file of its own in this package
// (double_delivery.go, ...): its ids, its catalogue entry and its page in
// docs/ (a Definition), beside the method that describes its plays and
// its rules' judges. fixtureList registers them all. The public catalogue
// (package fixtures) and the fixtures' and rules' ids in
// internal/catalogid are generated from that list by `go generate ./...`
// (internal/docgen/gen): package fixtures links nothing outside the
// standard library, so it cannot import the suite, which needs the
// harness. The generator compiles this package, so its code names its
// own ids, never the generated constants of internal/catalogid.

// Definition is one fixture as the suite defines it, for what is
// generated from it.
type Definition struct {
	// Fixture is the catalogue's entry: ids, doc, rules with their levels,
	// docs, reasons and suspects, requirements, and the variants that need
	// more than the fixture. Definitions fills each rule's Fixture.
	Fixture fixtures.Fixture
	// Page is the page of docs/ that explains the fixture at length, which
	// docs/rules.md links; zero for none.
	Page DocPage
}

// DocPage is a page of docs/: its file, relative to docs/, and its title
// in words.
type DocPage struct{ File, Title string }

// registered is one fixture of the list: its definition, the method
// that describes its plays in the tree and, when it has one, its guess at
// the cause of a rule's failures from which of its plays passed and which
// failed (see patternHint).
type registered struct {
	define   func() Definition
	describe func(*state)
	pattern  func(rule string, passedIn, failedIn []string) string
}

// fixtureList is the one list of the fixtures, in the order the suite
// runs them and the catalogue lists them.
func fixtureList() []registered {
	return []registered{
		{doubleDeliveryDefinition, (*state).doubleDelivery, nil},
		{concurrentDeliveryDefinition, (*state).concurrentDelivery, nil},
		{failureAfterMarkerDefinition, (*state).failureAfterMarker, nil},
		{conflictingPayloadDefinition, (*state).conflictingPayload, conflictPattern},
		{retentionExpiryDefinition, (*state).retentionExpiry, nil},
		{namespaceIsolationDefinition, (*state).namespaceIsolation, nil},
		{badInputDefinition, (*state).badInput, nil},
		{identityFidelityDefinition, (*state).identityFidelity, nil},
		{ambiguousCommitDefinition, (*state).ambiguousCommit, nil},
		{crashRecoveryDefinition, (*state).crashRecovery, nil},
		{externalEffectDefinition, (*state).externalEffect, nil},
		{failoverDefinition, (*state).failover, nil},
	}
}

// patternHint is the guess at the cause of a rule's failures that its
// fixture reads from which of the rule's plays passed and which failed
// (by where they are in the tree), "" when the fixture has none or the
// plays show no pattern.
func patternHint(r fixtures.Rule, passedIn, failedIn []string) string {
	for _, f := range fixtureList() {
		if f.pattern != nil && f.define().Fixture.ID == r.Fixture {
			return f.pattern(r.ID, passedIn, failedIn)
		}
	}
	return ""
}

// Definitions returns every fixture's definition, in catalogue order,
// with each rule's Fixture set: what `go generate ./...` writes into
// package fixtures and internal/catalogid, and where docs/rules.md finds
// each fixture's page.
func Definitions() []Definition {
	var defs []Definition
	for _, r := range fixtureList() {
		d := r.define()
		for i := range d.Fixture.Rules {
			d.Fixture.Rules[i].Fixture = d.Fixture.ID
		}
		defs = append(defs, d)
	}
	return defs
}

// Seed quotes, from the pattern's source text, "Make duplicate delivery
// harmless", which the rules' reasons quote.
const (
	seedClaim   = `"Within one transaction, insert that identity into a table with a unique constraint. Apply the database effect only if the insert claimed the event."`
	seedTwice   = `"Deliver an event twice and then concurrently. The stored effect should occur once."`
	seedFailure = `"Inject failure after marker insertion but before the effect: rollback must leave the event eligible for retry."`
	seedTogeth  = `"Both marker and effect commit or roll back together."`
	seedPolicy  = `"Reject the same identity with a conflicting payload according to a documented policy."`
	seedWindow  = `"Keep deduplication state long enough for the permitted redelivery window."`
	seedNS      = `"Include the event's namespace when identifiers are not globally unique."`
	seedBound   = `"The placeholders are illustrative and must be bound by the database driver."`
	seedExtern  = `"This does not make an external email, payment or HTTP request atomic with the database; use a suitable outbox, destination idempotency or reconciliation protocol for that boundary."`
)
