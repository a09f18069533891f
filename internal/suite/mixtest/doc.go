// Package mixtest shows, in its tests, what happens when suite.Run and a
// Ginkgo suite of the test binary's own (specs registered at package
// level, run with RunSpecs) share one test binary. Ginkgo keeps one suite
// per process, which suite.Run resets: run after the binary's own suite,
// suite.Run works and so did that suite; run before it, the binary's suite
// finds its specs gone and fails, saying to use suite.Register. It has no
// code of its own.
package mixtest
