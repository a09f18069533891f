// Package runtest shows, in its tests, the suite hosted by suite.Run and
// suite.Certify: several adapters certified in one call, and several
// calls in one process. It has no code of its own.
package runtest
