// Package version holds the harness's version: the suite records it in
// every certificate and the exec adapter sends it in hello. It is a
// package of its own so that both can name it without one linking the
// other.
package version

// Harness is the harness's version.
const Harness = "0.2.0"
