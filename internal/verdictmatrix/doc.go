// Package verdictmatrix proves the verdict matrix (package internal/matrix):
// [Compare] judges a certificate against an adapter's row, and the
// package's test certifies every built-in adapter with the real
// harmless command on a throwaway cluster the run owns, so that every rule
// runs, crash-recovery included, and compares each certificate with the
// adapter's row. Correct adapters must be certified; broken ones must fail
// exactly the fixtures their row names.
//
// It is a package of its own so that its runs, which take minutes, have a
// test binary, and a go test timeout, of their own.
package verdictmatrix
