// Package asynccommit is the `broken-async-commit` adapter: the reference
// pattern on sessions that run with synchronous_commit = local, so that a
// COMMIT returns once the commit is on the primary's disk, without waiting
// for the synchronous standby to have it.
//
// # The real-world bug
//
// Synchronous replication adds a round trip to the standby to every
// COMMIT, and synchronous_commit is a setting any session may change. So a
// team turns it down "for latency": in the service's connection string
// (options=-c synchronous_commit=local, or a parameter the driver sends at
// startup), with ALTER ROLE ... SET, or by inheriting the default of a
// connection pooler or an ORM. On a single server `local` changes nothing:
// COMMIT still waits for the local WAL flush, so a crash and a restart keep
// every acknowledged commit. On a formation with a synchronous standby it
// withdraws the one promise the standby is there for: that a commit the
// client saw succeed is on two servers. When the primary fails before the
// standby received the last commits, and the standby is promoted, those
// commits are gone, markers and effects together, while the broker holds
// an acknowledgement for each of them and redelivers nothing.
//
// It is `local` and not `off` on purpose: with `off`, COMMIT returns before
// the local flush too, and a crash of a single server loses acknowledged
// commits, which crash-recovery can catch. With `local` the bug lies only
// at the replication boundary.
//
// # What goes wrong
//
// Everything on one server: every session starts with synchronous_commit =
// local (sent as a run-time parameter at connection, as a DSN parameter
// would send it), and the adapter is otherwise the reference. On a
// replicated formation, an event acknowledged shortly before the primary
// fails has no marker and no effect on the new primary when the standby
// had not received its commit. How many are lost depends on how far the
// standby lagged when the primary failed: on a loopback the WAL stream
// lags by far less than a millisecond, so a play catches it every time
// only if it holds the standby back while acknowledged deliveries commit
// and then fails the primary over.
//
// # What catches it
//
// The failover fixture, played on a replicated formation (a primary and a
// synchronous standby), in its synchronous variant:
//
//   - failover.acknowledged-survives (MUST): an event acknowledged before
//     the failover has no effect on the new primary.
//
// Only that rule. Not failover.exactly-once: the fixture delivers every
// acknowledged event once more after the failover, as after an
// acknowledgement lost with the old primary's connections, and the
// redelivery of a lost one finds no marker and applies it, as the
// reference would; the loss is acknowledged-survives' to judge. Not
// failover.follows-primary: its pool is the reference's
// and follows the primary. Nor failover.reapplied-after-loss: that rule is
// judged where replication is asynchronous, and there synchronous_commit =
// local commits exactly as the reference's default does, so a redelivery
// of an event the failover lost finds no marker and is applied, as it
// must. On a single server the failover rules are not-applicable and it
// passes every other rule: it is certified there, since nothing on one
// server tells it from the reference.
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package asynccommit

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
)

// Name is the adapter's name.
const Name = "broken-async-commit"

// Setting is the synchronous_commit every session of the adapter runs
// with.
const Setting = "local"

// Adapter returns the `broken-async-commit` adapter.
func Adapter() adapters.Adapter {
	return base.AdapterWith(Name, base.KeyedColumns, localCommit, func(i *base.Instance) *base.Instance { return i })
}

// localCommit is the bug: every connection of the pool starts with
// synchronous_commit = local, a run-time parameter of its startup message,
// as a DSN's synchronous_commit=local or options=-c synchronous_commit=local
// would make it.
func localCommit(cfg *pgxpool.Config) {
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = Setting
}
