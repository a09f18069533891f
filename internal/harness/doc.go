// Package harness holds what the suite needs around an implementation under
// test: the run (its database, its identity, its leftovers), a fresh
// environment per play of a fixture (a [Play], shared by the rules judged
// on it), and a driver that delivers events the way an at-least-once
// broker does while keeping the harness itself safe from a misbehaving
// implementation.
//
// Everything a run creates carries its run id: schemas are named
// harmless_<run>_<play>, and every DSN it hands out names listeners of the
// instance's own on the play's wire proxy (see [ProxyClient]), with
// application_name harmless-<run>-<play>-i<instance> as a courtesy: the
// proxy's listener, not the name, tells an instance's connections. A keeper connection
// named harmless-<run>-keeper stays open for the run's lifetime, so a later
// run can tell a live run's schemas from a killed run's leftovers.
package harness
