// Package catalogid holds the stable ids of the catalogue's fixtures,
// rules and requirements, for the harness's code that names them: the
// catalogue (package fixtures) gives them to its entries, and the engine
// that plays and judges the fixtures (internal/suite), the command and
// the tests refer to them by these names. Users read the ids as strings,
// from the catalogue, `harmless list` and certificates, so they need no
// Go names of their own. The three fixture ids that public code does
// name (fixtures.ConflictingPayload, fixtures.RetentionExpiry and
// fixtures.ExternalEffect) are package fixtures' instead.
package catalogid

// DoubleDelivery is the fixture's id, and the rest are its rules' ids. They
// are stable: labels, reports and other tools use them.
const (
	DoubleDelivery = "double-delivery"

	DoubleDeliveryFirstApplied        = "double-delivery.first-applied"
	DoubleDeliveryRedeliveryDuplicate = "double-delivery.redelivery-duplicate"
	DoubleDeliveryOneEffect           = "double-delivery.one-effect"
)

// ConcurrentDelivery is the fixture's id, and the rest are its rules' ids.
// They are stable: labels, reports and other tools use them.
const (
	ConcurrentDelivery = "concurrent-delivery"

	ConcurrentDeliveryOneEffect             = "concurrent-delivery.one-effect"
	ConcurrentDeliveryOneApplied            = "concurrent-delivery.one-applied"
	ConcurrentDeliveryFailedClaimantNotLost = "concurrent-delivery.failed-claimant-not-lost"
)

// FailureAfterMarker is the fixture's id, and the rest are its rules' ids.
// They are stable: labels, reports and other tools use them.
const (
	FailureAfterMarker = "failure-after-marker"

	FailureAfterMarkerNotAcknowledged = "failure-after-marker.not-acknowledged"
	FailureAfterMarkerRetryApplies    = "failure-after-marker.retry-applies"
	FailureAfterMarkerSurvivesKill    = "failure-after-marker.survives-killed-connection"
	// FailureAfterMarkerProcessSurvivesKill is a SHOULD rule.
	FailureAfterMarkerProcessSurvivesKill = "failure-after-marker.process-survives-killed-connection"
)

// The ids of the rules of conflicting-payload, whose own id is
// fixtures.ConflictingPayload. They are stable: labels, reports and other
// tools use them.
const (
	ConflictingPayloadNoSecondEffect = "conflicting-payload.no-second-effect"
	ConflictingPayloadDetected       = "conflicting-payload.conflict-detected"
	ConflictingPayloadOriginalStands = "conflicting-payload.original-still-duplicate"
)

// The ids of the rules of retention-expiry, whose own id is
// fixtures.RetentionExpiry. They are stable: labels, reports and other
// tools use them.
const (
	RetentionExpiryKeptInsideWindow  = "retention-expiry.kept-inside-window"
	RetentionExpiryPurgedAfterWindow = "retention-expiry.purged-after-window"
	RetentionExpiryConcurrentPurge   = "retention-expiry.concurrent-purge-safe"
	RetentionExpiryStateBounded      = "retention-expiry.state-bounded"
)

// NamespaceIsolation is the fixture's id, and the rest are its rules' ids.
// They are stable: labels, reports and other tools use them.
const (
	NamespaceIsolation = "namespace-isolation"

	NamespaceIsolationSameID      = "namespace-isolation.same-id-two-namespaces"
	NamespaceIsolationUnambiguous = "namespace-isolation.unambiguous-identity"
)

// BadInput is the fixture's id, and the rest are its rules' ids. They are
// stable: labels, reports and other tools use them.
const (
	BadInput = "bad-input"

	BadInputExactlyOnceOrRejected = "bad-input.exactly-once-or-rejected"
	BadInputRunContinues          = "bad-input.run-continues"
)

// IdentityFidelity is the fixture's id, and the rest are its rules' ids.
// They are stable: labels, reports and other tools use them.
const (
	IdentityFidelity = "identity-fidelity"

	IdentityFidelityBytes     = "identity-fidelity.bytes-kept"
	IdentityFidelityText      = "identity-fidelity.text-kept"
	IdentityFidelityLength    = "identity-fidelity.length-kept"
	IdentityFidelityNamespace = "identity-fidelity.namespace-kept"
)

// AmbiguousCommit is the fixture's id, and the rest are its rules' ids.
// They are stable: labels, reports and other tools use them.
const (
	AmbiguousCommit = "ambiguous-commit"

	AmbiguousCommitRedeliveryDuplicate = "ambiguous-commit.redelivery-duplicate"
	AmbiguousCommitLostCommitApplies   = "ambiguous-commit.lost-commit-applies"
)

// CrashRecovery is the fixture's id, and the rest are its rules' ids. They
// are stable: labels, reports and other tools use them.
const (
	CrashRecovery = "crash-recovery"

	CrashRecoveryAppliedSurvives     = "crash-recovery.applied-survives"
	CrashRecoveryInFlightExactlyOnce = "crash-recovery.in-flight-exactly-once"
)

// The ids of the rules of external-effect, whose own id is
// fixtures.ExternalEffect. They are stable: labels, reports and other
// tools use them.
const (
	ExternalEffectStableKey          = "external-effect.stable-key"
	ExternalEffectExactlyOnce        = "external-effect.exactly-once-at-destination"
	ExternalEffectNoLoss             = "external-effect.no-loss"
	ExternalEffectNoNewKeyDuplicates = "external-effect.no-new-key-for-duplicates"
)

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
)
