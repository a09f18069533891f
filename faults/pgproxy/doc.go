// Package pgproxy is a PostgreSQL wire-protocol proxy that cuts
// connections at protocol points: before the client's COMMIT reaches the
// server, after the server has committed but before the client hears of
// it, or after the N-th statement of a transaction.
//
// # Why
//
// A TCP proxy (toxiproxy and the like) can drop a connection, but not at a
// chosen point of a transaction: it does not know where the COMMIT is. The
// fault that matters most for deduplication is exactly there: the
// ambiguous commit. The server commits the transaction that claimed an
// event's marker and applied its effect, the connection breaks before the
// client reads CommandComplete, the client reports an error, and the
// broker redelivers the event. Nothing was lost, and the redelivery must
// find the marker and do nothing. An implementation that treats a failed
// COMMIT as "nothing happened" and re-applies the effect some other way
// duplicates it. [AfterCommitComplete] with [Cut] produces this on demand;
// [BeforeCommit] with Cut produces its benign twin (the server rolls back),
// and [AfterStatement] a cut in the middle of the transaction.
//
// # How
//
// [New] listens on a free port of the IPv4 loopback ([Proxy.Addr]) and
// connects each client to the upstream server. In the startup phase it reads the client's first message with
// pgproto3's Backend: an SSLRequest or GSSEncRequest is answered 'N' (no
// encryption) and the next message read; a CancelRequest is forwarded, on
// a fresh connection, to the server of the backend it names; a
// StartupMessage is forwarded as it came, and its application_name is
// kept for rule scopes.
//
// From then on, messages are relayed both ways as bytes, framed by their
// type and length: authentication (SCRAM, md5, cleartext, trust) and
// everything else pass through untouched. The proxy looks at a few
// messages only:
//
//   - from the client, Query (a text that is COMMIT or END, optionally
//     WORK or TRANSACTION and AND [NO] CHAIN: pgx sends "commit" this way)
//     and, for the extended protocol, Parse, Bind, Execute and Close, to
//     know when a portal executes a COMMIT;
//   - from the server, BackendKeyData (the backend's pid, for
//     [Fault.PIDs] and to route cancel requests), CommandComplete (BEGIN,
//     COMMIT, other statements) and ReadyForQuery (the transaction status
//     'I', 'T' or 'E'), and ErrorResponse.
//
// A COMMIT inside a multi-statement Query ("insert ...; commit") is not
// seen at [BeforeCommit]; its CommandComplete is seen at
// [AfterCommitComplete], which fires only when a transaction was open
// (a COMMIT with no transaction commits nothing, and the COMMIT of a failed
// transaction completes as ROLLBACK).
//
// # Rules
//
// [Proxy.Arm] arms a [Rule] (a [Scope], a [Point], the action [Cut], how
// many [Rule.Times]) and returns a [Fault]. A fault that never fired proves
// nothing, so each firing is counted ([Fault.Fired]) and the cut backend's
// pid recorded ([Fault.PIDs]) before the fault acts: when a client sees its
// connection break, the cut is already counted. A Fault is one of package
// faults' Armed, with its [Fault.Kind]. A cut closes both sides;
// the server's backend then rolls back whatever it had not committed and
// exits on its own time, possibly still holding locks for a moment.
// [Fault.PIDs] names the cut backends; a fixture waits until they have
// left pg_stat_activity before it goes on. The proxy itself holds no
// database connection.
//
// # Safety
//
// The proxy listens only on the loopback, so only processes on this
// machine reach it, and it reaches only the
// upstream server it was given. It holds no credentials of its own and
// does not terminate TLS: authentication passes through it untouched, and
// [Proxy.DSN] refuses DSNs that require TLS rather than weaken them. It is
// meant for tests on one machine, with throwaway data.
// [Proxy.Close] closes the listener and every connection and returns once
// every goroutine of the proxy has ended. Rules stay armed until then, or
// until they have fired their [Rule.Times].
//
// The API is what the harness uses: a scope by application_name prefix,
// cuts only. Delays, other scopes, disarming and a listing of the
// connections had no user and were dropped.
//
// [Proxy.SetUpstream] points new connections at another address, so that
// after a server restart on a new port the clients keep the proxy's
// address.
package pgproxy
