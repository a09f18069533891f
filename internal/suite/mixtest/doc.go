// Package mixtest shows, in its tests, that suite.Run and a Ginkgo suite
// of the test binary's own (specs registered at package level, run with
// RunSpecs) share one test binary, in either order: suite.Run uses no
// Ginkgo, so it leaves the binary's suite alone. It has no code of its
// own.
package mixtest
