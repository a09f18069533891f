// Package embedtest shows, in its tests, the suite embedded in a Ginkgo
// suite of someone else's: one with its own BeforeSuite, AfterSuite and
// specs, which registers two adapters with suite.Register at package level
// and runs them all with one RunSpecs. It has no code of its own.
package embedtest
