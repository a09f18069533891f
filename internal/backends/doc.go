// Package backends is how the harness ends the server backends of its own
// connections from outside: it terminates them, cancels those that sleep in
// a sleep fault, and waits until the backends it cut or terminated are gone.
//
// Every connection the harness hands out carries an application_name that
// starts with a prefix of its run ([RunPrefix] and more). [TerminateBackends]
// terminates the backends whose application_name starts with such a prefix
// and whose user is the caller's role, and waits until they are gone
// ([WaitGone], which names a backend by pid and start time, so that a pid
// the system reuses is not mistaken for its victim: see [Backend] and
// [Backends]); [CancelSleeping] cancels those that sleep in a sleep fault
// of package faults. Both refuse prefixes that could reach connections the
// run does not own, and neither touches a backend of another role, whatever
// its application_name says: anyone can choose one. They run their
// statements on a faults.DB: a pool, a connection or a transaction.
//
// It is the harness's, not a user's: a user's test knows its own
// connections and needs no prefix to find them. It was part of package
// faults until issue 23.
package backends
