// Package verdictmatrix proves the registry of built-in adapters (package
// internal/adapters/builtin), rule by rule: [Compare] judges a certificate
// against an adapter's entry, and each run must end with the status those
// verdicts make ([Statuses]), which is certified for a broken adapter whose
// rules to fail are all SHOULD rules or rules the run does not play.
//
// The matrix itself, which certifies every built-in adapter with the real
// harmless command on a throwaway cluster the run owns (so that every
// rule runs, crash-recovery included) and compares each certificate with
// the adapter's entry, is package matrixtest, run by the tests of the
// packages that hold the adapters: internal/adapters/alternatives for the
// correct ones, which must be certified, and internal/adapters/broken for
// the broken ones, which must fail exactly the rules their entry names and
// pass every other (and, on a replicated formation, the failover fixture's
// verdicts of those whose entry claims them). Program comparecerts compares
// certificates written by hand.
package verdictmatrix
