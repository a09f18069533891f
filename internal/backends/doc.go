// Package backends is how the harness ends the server backends of its own
// connections from outside: it terminates them, cancels those that sleep in
// a sleep fault, and waits until the backends it cut or terminated are gone.
//
// The harness knows an implementation's connections by where they came
// in: each instance connects through listeners of its own on the play's
// wire proxy (package faults/pgproxy), which reports the pids of their
// server backends. It never finds them by application_name, which is
// whatever a client says (pgjdbc sets it after the startup, services set
// their own). [Terminate] terminates backends named by pid and start time
// (see [Backend] and [Backends]), so that a pid the system reuses is never
// mistaken for its victim, and waits until they are gone ([WaitGone]);
// [CancelSleeping] cancels those among given pids that sleep in a sleep
// fault of package faults. Neither touches a backend of another role,
// whatever its pid. They run their statements on a faults.DB: a pool, a
// connection or a transaction.
//
// It is the harness's, not a user's: a user's test knows its own
// connections. It was part of package faults until issue 23.
package backends
