// Package singlehost is the `broken-single-host` adapter: the reference
// pattern connected only to the first host of its DSN, so that it never
// follows the primary to another server.
//
// # The real-world bug
//
// A replicated database is reached through a multi-host DSN
// (host=h1,h2 port=p1,p2 target_session_attrs=read-write, or
// postgres://u@h1:p1,h2:p2/db?target_session_attrs=read-write): the client
// tries each host in turn and keeps the one that accepts writes. Much of
// what sits between a service and its driver does not read it that way. A
// service's configuration has a "host" and a "port", one value each, and
// builds its DSN from them; a hand-written parser takes the first host; a
// driver does not read multi-host DSNs at all (node-postgres does not); a
// proxy or pooler has one upstream. The first host is the primary on the
// day the service is deployed, and everything works, until the first
// failover: then the first host is the old primary, down, or back as a
// read-only standby, and the service does not follow the new one.
//
// # What goes wrong
//
// On one server, nothing: a DSN with one host is read as pgx reads it. On a
// DSN with several hosts it reads the DSN with pgx, keeps only the first
// host and port (with that host's own fallback, the plaintext attempt of
// sslmode=prefer) and ignores target_session_attrs. Before a failover the
// first host is the primary and it is the reference, synchronous commits
// included. After it, every connection it opens goes to the old primary:
// refused while that server is down, and, once it is back as a standby,
// every claim fails (cannot execute INSERT in a read-only transaction).
// It acknowledges no delivery again until someone restarts it with another
// configuration.
//
// # What catches it
//
// The failover fixture, played on a replicated formation whose DSN names
// the current primary first, with instances that are not restarted across
// the failover:
//
//   - failover.follows-primary (MUST): after the failover its instances
//     apply no new event within the broker's patience;
//   - failover.exactly-once (MUST): an event delivered after the failover,
//     or in flight at it, is redelivered to instances that cannot apply it
//     until the broker gives up, and ends with no effect;
//   - failover.reapplied-after-loss (SHOULD): where replication is
//     asynchronous and the failover lost an acknowledged event, its
//     redelivery reaches the same instances, which apply nothing.
//
// It does not fail failover.acknowledged-survives: before the failover it
// commits as the reference does, so every delivery it acknowledged is on
// the synchronous standby, and so on the new primary. The two rules after
// follows-primary fail only because of it: a play that redelivered to
// restarted instances, or to instances given a DSN that names the new
// primary first, would see them pass. On a single server the failover
// rules are not-applicable and it passes every other rule: it is
// certified there, since nothing on one server tells it from the
// reference.
//
// The rules it must fail are its entry in the registry of built-in
// adapters (package internal/adapters/builtin), which the verdict matrix
// test holds it to, rule by rule; docs/proof.md shows them.
package singlehost

import (
	"slices"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/broken/internal/base"
)

// Name is the adapter's name.
const Name = "broken-single-host"

// Adapter returns the `broken-single-host` adapter.
func Adapter() adapters.Adapter {
	return base.AdapterWith(Name, base.KeyedColumns, firstHostOnly, func(i *base.Instance) *base.Instance { return i })
}

// firstHostOnly is the bug: of the hosts the configuration read from a
// DSN lists, it keeps only the first host and port, and it drops the check
// of target_session_attrs. pgx reads a DSN's hosts into the first
// host's settings and a list of fallbacks, one per other host and, with
// sslmode=prefer (the default), one more per host for its plaintext
// attempt: it keeps the fallbacks to the first host and port, without
// which a server that does not speak TLS could not be reached at all.
func firstHostOnly(cfg *pgxpool.Config) {
	c := cfg.ConnConfig
	c.Fallbacks = slices.DeleteFunc(c.Fallbacks, func(f *pgconn.FallbackConfig) bool {
		return f.Host != c.Host || f.Port != c.Port
	})
	c.ValidateConnect = nil
}
