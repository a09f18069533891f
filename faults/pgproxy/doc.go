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
// [New] makes a proxy; [Proxy.Listen] opens a listener on a free port of
// the IPv4 loopback ([Listener.Addr]) for a named client, forwarding to an
// upstream server, and [Proxy.DSN] rewrites a DSN so that a client
// connects through listeners of its own, one for each host the DSN names,
// in the same order. A connection belongs to the client of the listener
// it came in on: that is how a rule's [Scope] picks it, and how
// [Proxy.Seen] counts it. Nothing the client says about itself decides it:
// clients name their connections as they please (pgjdbc sends
// application_name in a SET after the startup, services set their own
// name, some send none), and two instances of one program say the same.
//
// In the startup phase the proxy reads the client's first message with
// pgproto3's Backend: an SSLRequest or GSSEncRequest is answered 'N' (no
// encryption) and the next message read; a CancelRequest is forwarded, on
// a fresh connection, to the server of the backend it names; a
// StartupMessage is forwarded as it came.
//
// From then on, messages are relayed both ways as bytes, framed by their
// type and length: authentication (SCRAM, md5, cleartext, trust) and
// everything else pass through untouched. The proxy looks at a few
// messages only:
//
//   - from the client, Query (a text that is BEGIN, ROLLBACK, or COMMIT
//     or END, optionally WORK or TRANSACTION and AND [NO] CHAIN: pgx sends
//     "commit" this way) and, for the extended protocol, Parse, Bind,
//     Execute and Close, to know when a portal executes a BEGIN, a
//     ROLLBACK or a COMMIT (pgjdbc sends all three so, its BEGIN
//     pipelined with the block's first statement);
//   - from the server, BackendKeyData (the backend's pid, for
//     [Fault.PIDs], [Seen.PIDs] and to route cancel requests),
//     ParameterStatus for application_name (which the server reports
//     whenever it changes, for [Seen.ApplicationNames]), CommandComplete
//     (BEGIN, COMMIT, other statements) and ReadyForQuery (the transaction
//     status 'I', 'T' or 'E'), and ErrorResponse.
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
// # What it saw
//
// A fault that never fired proves nothing, and neither does a client that
// never came through the proxy: one that ignores the host and port of the
// DSN it is given and connects to the server directly is out of reach of
// every rule. [Proxy.Seen] says, per client, how many connections came in
// on its listeners, how many statements the server completed there (in
// transaction blocks and in autocommit), the application names they
// carried, and the server backends of those open now, so that a caller can
// tell "not reached" from "reached, and nothing happened", and find the
// client's backends in pg_stat_activity by pid rather than by a name the
// client chose.
//
// # Safety
//
// The listeners listen only on the loopback, so only processes on this
// machine reach them, and each reaches only the upstream server it was
// given. The proxy holds no credentials of its own and does not terminate
// TLS: authentication passes through it untouched, and [Proxy.DSN] refuses
// DSNs that require TLS rather than weaken them. It is meant for tests on
// one machine, with throwaway data. [Proxy.Close] closes every listener
// and every connection and returns once every goroutine of the proxy has
// ended. Rules stay armed until then, or until they have fired their
// [Rule.Times].
//
// The API is what the harness uses: scopes by client, cuts only. Delays,
// disarming and a listing of the connections had no user and were
// dropped.
//
// [Listener.SetUpstream] points a listener's new connections at another
// address, so that after a server restart on a new port the clients keep
// the listener's address.
package pgproxy
