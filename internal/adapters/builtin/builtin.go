// Package builtin is the registry of the adapters that ship with harmless:
// each one by name, for the command's --adapter, and the verdicts the
// harness must give it, rule by rule, for the harness's own tests (the
// verdict matrix, package internal/verdictmatrix) and for the generated
// tables in docs/.
package builtin

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/advisorylock"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/databasesql"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/destinationkey"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/failfast"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/lease"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/polling"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/retrytoken"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/serializable"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/slow"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/slowrelay"
	"github.com/harmless-dev/harmless/internal/adapters/broken/alwayserrors"
	"github.com/harmless-dev/harmless/internal/adapters/broken/asynccommit"
	"github.com/harmless-dev/harmless/internal/adapters/broken/busyisduplicate"
	"github.com/harmless-dev/harmless/internal/adapters/broken/cachedclaims"
	"github.com/harmless-dev/harmless/internal/adapters/broken/casefolded"
	"github.com/harmless-dev/harmless/internal/adapters/broken/checktheninsert"
	"github.com/harmless-dev/harmless/internal/adapters/broken/earlypurge"
	"github.com/harmless-dev/harmless/internal/adapters/broken/effectfirst"
	"github.com/harmless-dev/harmless/internal/adapters/broken/givesup"
	"github.com/harmless-dev/harmless/internal/adapters/broken/ignorepayload"
	"github.com/harmless-dev/harmless/internal/adapters/broken/inmemory"
	"github.com/harmless-dev/harmless/internal/adapters/broken/lossykey"
	"github.com/harmless-dev/harmless/internal/adapters/broken/markerfirst"
	"github.com/harmless-dev/harmless/internal/adapters/broken/nonamespace"
	"github.com/harmless-dev/harmless/internal/adapters/broken/nopurge"
	"github.com/harmless-dev/harmless/internal/adapters/broken/outboxdeletefirst"
	"github.com/harmless-dev/harmless/internal/adapters/broken/randomkey"
	"github.com/harmless-dev/harmless/internal/adapters/broken/rebuildpurge"
	"github.com/harmless-dev/harmless/internal/adapters/broken/redeliveryerrors"
	"github.com/harmless-dev/harmless/internal/adapters/broken/retrynotoken"
	"github.com/harmless-dev/harmless/internal/adapters/broken/retryswallows"
	"github.com/harmless-dev/harmless/internal/adapters/broken/sendaftercommit"
	"github.com/harmless-dev/harmless/internal/adapters/broken/sendintx"
	"github.com/harmless-dev/harmless/internal/adapters/broken/singlehost"
	"github.com/harmless-dev/harmless/internal/adapters/broken/sqlsplice"
	"github.com/harmless-dev/harmless/internal/adapters/broken/timebucketed"
	"github.com/harmless-dev/harmless/internal/adapters/broken/truncatedkey"
	"github.com/harmless-dev/harmless/internal/applicability"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// Entry is one built-in adapter and the verdicts the harness must give it
// on a run of every rule on a server the harness owns (so that every
// fixture can run, crash-recovery included).
//
// Every rule of the catalogue must pass unless the entry says otherwise:
// it must fail the rules in Fails, may fail those in MayFail, must be
// not-supported with the reasons in Unsupported, and must be
// not-applicable where the fixture does not apply to what the adapter
// declares (applicability.Of: the external-effect rules of an
// adapter that declares no external effects).
type Entry struct {
	// Adapter is the adapter.
	Adapter adapters.Adapter
	// Models says what it is: the reference, a correct alternative, or the
	// real-world bug it reproduces.
	Models string
	// Fails lists the ids of exactly the rules it must fail.
	Fails []string
	// MayFail maps the ids of rules whose verdict depends on the run's
	// seed (fail or pass) to why.
	MayFail map[string]string
	// Unsupported maps the ids of rules it must get not-supported to a
	// part of the reason the harness must give.
	Unsupported map[string]string
	// Moved maps the ids of rules whose verdict for the adapter moved when
	// the rule's meaning changed (fixtures.Rule.Changed) to the version
	// and the verdict before, and why: the registry keeps the before and
	// the after of each such rule.
	Moved map[string]string
	// OnFormation is set when its verdicts on a replicated formation
	// (--provision ha) are checked too: the failover fixture's, which
	// apply only there. Without it the registry claims nothing about
	// that fixture for the adapter, and lists none of its rules.
	OnFormation bool
}

// Entries returns the registry, one entry per built-in adapter, sorted by
// name.
func Entries() []Entry {
	entries := []Entry{
		{Adapter: reference.Adapter(), Models: "the reference pattern: INSERT ... ON CONFLICT DO NOTHING RETURNING, effect and outbox row in the same transaction, a relay sending with a key from the identity", OnFormation: true},
		{Adapter: serializable.Adapter(), Models: "correct: check-then-insert under SERIALIZABLE, retrying on SQLSTATE 40001", OnFormation: true},
		{Adapter: advisorylock.Adapter(), Models: "correct: pg_advisory_xact_lock on (namespace, id), then check-then-insert", OnFormation: true},
		{Adapter: databasesql.Adapter(), Models: "correct: the reference pattern with database/sql and the *sql.Tx effect helper", OnFormation: true},
		{Adapter: slow.Adapter(), Models: "correct: the reference, waiting 1 s at the start of every delivery", OnFormation: true},
		{Adapter: destinationkey.Adapter(), Models: "correct: no outbox; the external effect sent before COMMIT with a key from the identity, the destination deduplicating", OnFormation: true},
		{Adapter: failfast.Adapter(), Models: "correct: the reference pattern on connections with lock_timeout 10 ms; a claim that finds the event busy (SQLSTATE 55P03) is an error, for the broker to redeliver", OnFormation: true},
		{Adapter: lease.Adapter(), Models: "correct: a 1 s lease claimed on its own, then the effect and done in one transaction while the lease is still the delivery's; a live lease is an error, for the broker to redeliver", OnFormation: true},
		{Adapter: polling.Adapter(), Models: "correct: a claim committed on its own; contenders poll it every 20 ms until done, taking over a claim unfinished for 1 s; the effect and done in one transaction while the claim is still the delivery's", OnFormation: true},
		{Adapter: retrytoken.Adapter(), Models: "correct: the reference pattern in a retry helper inside the delivery (a lost connection, 57P01-57P03, 40001, 40P01), with a claim token in the marker that tells its own COMMIT, landed though its answer was lost, from another delivery's claim", OnFormation: true},
		{Adapter: slowrelay.Adapter(), Models: "correct: the reference pattern with an outbox whose relay polls every 3 s, retries at its next poll and cannot be drained", OnFormation: true},
		{Adapter: slowrelay.QuickAdapter(), Models: "correct: alt-slow-relay whose relay polls every 500 ms: a forwarder that sends within a second and cannot be drained"},
		{
			Adapter: checktheninsert.Adapter(), Models: "SELECT for the marker, then INSERT it, with no unique constraint",
			Fails: []string{
				"concurrent-delivery.one-effect", "concurrent-delivery.one-applied", "concurrent-delivery.failed-claimant-not-lost",
				"conflicting-payload.no-second-effect", "conflicting-payload.conflict-detected",
			},
		},
		{
			Adapter: markerfirst.Adapter(), Models: "the marker committed in its own transaction before the effect",
			Fails: []string{
				"concurrent-delivery.one-applied", "concurrent-delivery.failed-claimant-not-lost",
				"failure-after-marker.not-acknowledged", "failure-after-marker.retry-applies",
				"ambiguous-commit.lost-commit-applies", "crash-recovery.in-flight-exactly-once",
			},
			Moved: map[string]string{
				"concurrent-delivery.one-applied":       "passed until 0.2.0; since then the Duplicate a contender answers on finding the marker, before the effect is committed, is checked against the ledger and fails",
				"failure-after-marker.not-acknowledged": "passed until 0.2.0, when it asked only that the failed delivery return an error; since then the redelivery's Duplicate, answered with no effect committed, fails it",
			},
		},
		{
			Adapter: effectfirst.Adapter(), Models: "the effect committed before the marker, in a transaction of its own",
			Fails: []string{
				"concurrent-delivery.one-effect", "concurrent-delivery.one-applied", "concurrent-delivery.failed-claimant-not-lost",
				"conflicting-payload.no-second-effect", "conflicting-payload.conflict-detected", "conflicting-payload.original-still-duplicate",
				"ambiguous-commit.redelivery-duplicate", "crash-recovery.in-flight-exactly-once",
			},
		},
		{
			Adapter: ignorepayload.Adapter(), Models: "a conflicting payload treated as a plain duplicate",
			Fails: []string{"conflicting-payload.conflict-detected"},
		},
		{
			Adapter: nonamespace.Adapter(), Models: "the unique key is the id alone",
			Fails: []string{"namespace-isolation.same-id-two-namespaces", "namespace-isolation.unambiguous-identity", "identity-fidelity.namespace-kept"},
		},
		{
			Adapter: retrynotoken.Adapter(), Models: "the retry helper of alt-retry-token without its claim token: a COMMIT whose answer was lost is taken for a success and answered Applied",
			Fails: []string{"failure-after-marker.not-acknowledged", "failure-after-marker.retry-applies", "ambiguous-commit.lost-commit-applies"},
		},
		{
			Adapter: retryswallows.Adapter(), Models: "the retry helper of alt-retry-token, acknowledging as Applied a delivery whose transaction failed for good",
			Fails: []string{
				"concurrent-delivery.failed-claimant-not-lost", "failure-after-marker.not-acknowledged", "failure-after-marker.retry-applies",
				"crash-recovery.in-flight-exactly-once",
			},
		},
		{
			Adapter: givesup.Adapter(), Models: "an inbox: the message stored (its marker committed) first, its effect tried up to 5 times, then abandoned while the stored marker answers Duplicate",
			Fails: []string{
				"concurrent-delivery.one-applied", "concurrent-delivery.failed-claimant-not-lost",
				"failure-after-marker.not-acknowledged", "failure-after-marker.retry-applies",
				"ambiguous-commit.redelivery-duplicate",
			},
			MayFail: map[string]string{
				"crash-recovery.in-flight-exactly-once": "its five tries at the effect last about half a second; a server that takes longer than that to restart after the crash (a loaded machine) outlasts them, and the event is abandoned and answered Duplicate with no effect: the bug itself, seen only when the outage is long enough",
			},
		},
		{
			Adapter: redeliveryerrors.Adapter(), Models: "the effect, then a plain INSERT of the marker, in one transaction: a redelivery of an applied event fails on the unique key (SQLSTATE 23505), is rolled back and returned as an error, never acknowledged",
			Fails: []string{
				"double-delivery.redelivery-duplicate", "concurrent-delivery.one-applied",
				"conflicting-payload.conflict-detected", "conflicting-payload.original-still-duplicate",
				"retention-expiry.kept-inside-window", "retention-expiry.concurrent-purge-safe",
				"bad-input.exactly-once-or-rejected",
				"identity-fidelity.bytes-kept", "identity-fidelity.text-kept", "identity-fidelity.length-kept", "identity-fidelity.namespace-kept",
				"ambiguous-commit.redelivery-duplicate", "crash-recovery.applied-survives",
			},
			MayFail: map[string]string{
				"ambiguous-commit.lost-commit-applies": "its play holds two events, one whose commit is lost and one whose commit succeeds but whose answer is lost; the redeliveries of the second fail, and until a play of the run has waited a whole patience for such an acknowledgement the broker waits out the play's patience on it and then redelivers neither; plays run side by side, so whether double-delivery has done so before this play starts depends on the run",
			},
		},
		{
			Adapter: earlypurge.Adapter(), Models: "purge removes markers still inside the redelivery window",
			Fails: []string{"retention-expiry.kept-inside-window", "retention-expiry.concurrent-purge-safe"},
		},
		{
			Adapter: nopurge.Adapter(), Models: "a redelivery window declared, but nothing ever purged",
			Fails: []string{"retention-expiry.purged-after-window", "retention-expiry.state-bounded"},
		},
		{
			Adapter: rebuildpurge.Adapter(), Models: "purge copies the markers to keep into a new table, then drops the old one and renames the new one, statement by statement, while deliveries go on",
			Fails: []string{"retention-expiry.concurrent-purge-safe"},
		},
		{
			Adapter: sqlsplice.Adapter(), Models: "the identity spliced into the SQL text instead of bound as a parameter",
			Fails: []string{"bad-input.exactly-once-or-rejected"},
		},
		{
			Adapter: lossykey.Adapter(), Models: "the identity JSON-encoded into one key, each invalid UTF-8 byte replaced with U+FFFD",
			Fails: []string{"identity-fidelity.bytes-kept", "identity-fidelity.namespace-kept"},
		},
		{
			Adapter: casefolded.Adapter(), Models: "lower() on the id in the key",
			Fails: []string{"identity-fidelity.text-kept"},
		},
		{
			Adapter: truncatedkey.Adapter(), Models: "the id cut to 64 characters in the key (a cast to varchar(64))",
			Fails: []string{"identity-fidelity.length-kept"},
		},
		{
			Adapter: timebucketed.Adapter(), Models: "the claim's UTC day in the marker's unique key (a table partitioned by day)",
			Fails: []string{"retention-expiry.kept-inside-window"},
			MayFail: map[string]string{
				"retention-expiry.concurrent-purge-safe": "its events are claimed and redelivered at seeded times, which fall on one UTC day in some runs and on two in others; only a redelivery on another day than its claim finds no marker",
			},
		},
		{
			Adapter: busyisduplicate.Adapter(), Models: "a claim that times out waiting on another delivery's uncommitted claim (lock_timeout, SQLSTATE 55P03) answered Duplicate",
			Fails: []string{"concurrent-delivery.one-applied", "concurrent-delivery.failed-claimant-not-lost", "conflicting-payload.conflict-detected", "crash-recovery.in-flight-exactly-once"},
			Moved: map[string]string{
				"concurrent-delivery.one-applied": "passed until 0.2.0; since then its Duplicate answers, given while the winner's transaction is still open, are checked against the ledger and fail",
			},
		},
		{
			Adapter: inmemory.Adapter(), Models: "the dedup set held in process memory, invisible to other instances",
			Fails: []string{
				"double-delivery.redelivery-duplicate", "double-delivery.one-effect",
				"concurrent-delivery.one-effect", "concurrent-delivery.one-applied", "concurrent-delivery.failed-claimant-not-lost",
				"conflicting-payload.no-second-effect", "conflicting-payload.conflict-detected",
				"retention-expiry.kept-inside-window", "retention-expiry.concurrent-purge-safe",
				"ambiguous-commit.redelivery-duplicate",
			},
			Moved: map[string]string{
				"concurrent-delivery.failed-claimant-not-lost": "passed until 0.2.0; since then the Duplicate an instance answers from its memory while the claimant's effect is not committed is checked against the ledger and fails",
			},
		},
		{
			Adapter: asynccommit.Adapter(), Models: "synchronous_commit = local on every session, for latency: COMMIT returns before the synchronous standby has the commit, which a failover then loses",
			Fails:       []string{failoverAcknowledgedSurvives},
			OnFormation: true,
		},
		{
			Adapter: cachedclaims.Adapter(), Models: "an in-process cache of the claims seen committed, in front of the marker table, answering a redelivery without asking the database, even after the database lost the claim",
			Fails:       []string{failoverReappliedAfterLoss},
			OnFormation: true,
		},
		{
			Adapter: singlehost.Adapter(), Models: "only the first host of a multi-host DSN, target_session_attrs ignored: after a failover it keeps connecting to the old primary",
			Fails:       []string{failoverFollowsPrimary, failoverExactlyOnce, failoverReappliedAfterLoss},
			OnFormation: true,
		},
		{
			Adapter: alwayserrors.Adapter(), Models: "every delivery fails: the processed-events table was never created (a migration that did not run)",
			Fails: allRulesBut("external-effect", "failover", "crash-recovery.in-flight-exactly-once",
				"failure-after-marker.not-acknowledged", "failure-after-marker.process-survives-killed-connection"),
			Unsupported: map[string]string{
				"crash-recovery.in-flight-exactly-once": "the planned stall held no delivery when the server crashed",
				// No delivery reaches a fault: nothing was acknowledged
				// falsely and no connection was killed, so neither rule
				// was exercised. retry-applies fails: no event applied.
				"failure-after-marker.not-acknowledged":                   "did not fire, so this play exercised no failure",
				"failure-after-marker.process-survives-killed-connection": "did not fire, so this play exercised no failure",
			},
			Moved: map[string]string{
				"failure-after-marker.not-acknowledged":                   "failed until 0.2.0, when a fault that never fired failed the play; no delivery reaches a fault, so it is not-supported",
				"failure-after-marker.process-survives-killed-connection": "failed until 0.2.0, when a fault that never fired failed the play; no connection is killed, so it is not-supported",
			},
		},
		{
			Adapter: sendintx.Adapter(), Models: "the external call made inside the transaction with a fresh key per attempt",
			Fails: []string{"external-effect.stable-key", "external-effect.exactly-once-at-destination", "external-effect.no-new-key-for-duplicates"},
		},
		{
			Adapter: sendaftercommit.Adapter(), Models: "the external call made after COMMIT with no outbox",
			Fails: []string{"external-effect.stable-key", "external-effect.exactly-once-at-destination", "external-effect.no-loss", "external-effect.no-new-key-for-duplicates"},
		},
		{
			Adapter: randomkey.Adapter(), Models: "an outbox whose relay makes a new idempotency key for every send",
			Fails: []string{"external-effect.stable-key", "external-effect.exactly-once-at-destination", "external-effect.no-new-key-for-duplicates"},
		},
		{
			Adapter: outboxdeletefirst.Adapter(), Models: "an outbox whose relay deletes the row and commits before it sends",
			Fails: []string{"external-effect.stable-key", "external-effect.exactly-once-at-destination", "external-effect.no-loss", "external-effect.no-new-key-for-duplicates"},
		},
	}
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Adapter.Name, b.Adapter.Name) })
	return entries
}

// The failover fixture's rules, which broken-async-commit,
// broken-cached-claims and broken-single-host must fail on a replicated
// formation (their packages' documentation says why each fails which).
const (
	failoverAcknowledgedSurvives = "failover.acknowledged-survives"
	failoverExactlyOnce          = "failover.exactly-once"
	failoverFollowsPrimary       = "failover.follows-primary"
	failoverReappliedAfterLoss   = "failover.reapplied-after-loss"
)

// Deployment is what a run's database models, which decides the fixtures
// that apply: one server, or a replicated formation with a standby.
type Deployment string

const (
	// SingleServer is a throwaway cluster or container the harness owns
	// (--provision cluster or container): every fixture but failover
	// applies.
	SingleServer Deployment = "single server"
	// Formation is a replicated formation the harness started
	// (--provision ha): every fixture but crash-recovery applies.
	Formation Deployment = "replicated formation"
)

// DeploymentOf is the deployment of a run on a database of kind (a
// certificate's DatabaseKind).
func DeploymentOf(kind string) Deployment {
	if kind == "ha" {
		return Formation
	}
	return SingleServer
}

// allRulesBut returns the ids of every rule but those of the fixtures and
// the rules named in except.
func allRulesBut(except ...string) []string {
	var ids []string
	for _, r := range fixtures.Rules() {
		if !slices.Contains(except, r.Fixture) && !slices.Contains(except, r.ID) {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// Broken reports whether the entry's adapter must fail some rule.
func (e Entry) Broken() bool { return len(e.Fails) > 0 }

// Allowed returns the verdicts the entry allows on rule on a single
// server: see [Entry.AllowedOn].
func (e Entry) Allowed(rule fixtures.Rule) ([]certificate.Verdict, string) {
	return e.AllowedOn(rule, SingleServer)
}

// AllowedOn returns the verdicts the entry allows on rule in a run on d,
// and why when that is not plain pass: the rule's fixture does not apply
// there, or the rule must fail, may fail or is not-supported. A fixture
// that does not apply to d is not-applicable whatever Fails says: the
// failover fixture's rules on one server, crash-recovery's on a formation.
func (e Entry) AllowedOn(rule fixtures.Rule, d Deployment) ([]certificate.Verdict, string) {
	if a := e.applies(rule.Fixture, d); a.NotApplicable {
		return []certificate.Verdict{certificate.VerdictNotApplicable}, "the fixture does not apply: " + a.Reason
	}
	switch {
	case slices.Contains(e.Fails, rule.ID):
		return []certificate.Verdict{certificate.VerdictFail}, "it must fail the rule"
	case e.MayFail[rule.ID] != "":
		return []certificate.Verdict{certificate.VerdictFail, certificate.VerdictPass}, "it may fail the rule: " + e.MayFail[rule.ID]
	case e.Unsupported[rule.ID] != "":
		return []certificate.Verdict{certificate.VerdictNotSupported}, "the rule must be not-supported: " + e.Unsupported[rule.ID]
	}
	return []certificate.Verdict{certificate.VerdictPass}, ""
}

// applies is fixture's applicability to the entry's adapter, run in
// process on a database the harness owns, deployed as d.
func (e Entry) applies(fixture string, dep Deployment) applicability.Decision {
	f, err := fixtures.LookupFixture(fixture)
	if err != nil {
		return applicability.Decision{Fixture: fixture}
	}
	d := e.Adapter.Declares
	return applicability.Of(f, applicability.Target{
		RedeliveryWindow: d.RedeliveryWindow,
		AcceptsClock:     d.AcceptsClock,
		OwnedServer:      true,
		ExternalEffects:  string(d.ExternalEffects),
		Formation:        dep == Formation,
	})
}

// Check returns what is wrong with entries, such as the registry's: a rule
// id that is not in the catalogue, a rule listed twice, a rule that
// applies only on a replicated formation for an adapter not checked there,
// a correct adapter that must fail something or a broken one that must
// fail nothing.
func Check(entries []Entry) []string {
	var problems []string
	for _, e := range entries {
		seen := map[string]bool{}
		ids := slices.Concat(e.Fails, slices.Sorted(maps.Keys(e.MayFail)), slices.Sorted(maps.Keys(e.Unsupported)))
		for _, id := range ids {
			r, err := fixtures.Lookup(id)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", e.Adapter.Name, err))
			}
			if err == nil && !e.OnFormation && e.applies(r.Fixture, SingleServer).NotApplicable && !e.applies(r.Fixture, Formation).NotApplicable {
				problems = append(problems, fmt.Sprintf("%s: rule %s applies only on a replicated formation, where the adapter's verdicts are not checked (OnFormation)", e.Adapter.Name, id))
			}
			if seen[id] {
				problems = append(problems, fmt.Sprintf("%s: rule %s is listed twice", e.Adapter.Name, id))
			}
			seen[id] = true
		}
		for _, id := range slices.Sorted(maps.Keys(e.Moved)) {
			if r, err := fixtures.Lookup(id); err != nil || r.Changed == "" {
				problems = append(problems, fmt.Sprintf("%s: rule %s is listed as moved, but the catalogue says of no such rule that its meaning changed", e.Adapter.Name, id))
			}
		}
		if broken := strings.HasPrefix(e.Adapter.Name, "broken-"); broken != e.Broken() {
			problems = append(problems, fmt.Sprintf("%s: named broken-* %t, but must fail %d rules", e.Adapter.Name, broken, len(e.Fails)))
		}
	}
	return problems
}

// EntryOf returns the registry's entry for the built-in adapter called
// name.
func EntryOf(name string) (Entry, error) {
	entries := Entries()
	i := slices.IndexFunc(entries, func(e Entry) bool { return e.Adapter.Name == name })
	if i < 0 {
		return Entry{}, fmt.Errorf("unknown adapter %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return entries[i], nil
}

// Lookup returns the built-in adapter called name.
func Lookup(name string) (adapters.Adapter, error) {
	e, err := EntryOf(name)
	return e.Adapter, err
}

// All returns every built-in adapter, sorted by name.
func All() []adapters.Adapter {
	var all []adapters.Adapter
	for _, e := range Entries() {
		all = append(all, e.Adapter)
	}
	return all
}

// Names returns the names of the built-in adapters, sorted.
func Names() []string {
	var names []string
	for _, e := range Entries() {
		names = append(names, e.Adapter.Name)
	}
	return names
}
