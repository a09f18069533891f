// Package verdictmatrix proves the registry of built-in adapters (package
// internal/adapters/builtin), rule by rule: [Compare] judges a certificate
// against an adapter's entry, and the package's test certifies every
// built-in adapter with the real harmless command on a throwaway cluster
// the run owns, so that every rule runs, crash-recovery included, and
// compares each certificate with the adapter's entry. Correct adapters
// must be certified; broken ones must fail exactly the rules their entry
// names, and pass every other; and each run must end with the status those
// verdicts make ([Statuses]), which is certified for a broken adapter whose
// rules to fail are all SHOULD rules or rules the run does not play.
//
// It is a package of its own so that its runs, which take minutes, have a
// test binary, and a go test timeout, of their own.
package verdictmatrix
