package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/provision"
)

// harnessConns is the number of connections harmless itself holds on the
// server from a run's start to its end: its keeper and its admin pool (the
// ledger's counts, the holds, the schemas), all opened at the start. A
// play may open more; the check below counts only what surely is needed,
// so that it refuses only a run that surely cannot fit.
const harnessConns = harness.OwnConnections

// capacityTimeout bounds the check of a server's free connections, as
// provision bounds its own check of a DSN.
const capacityTimeout = 15 * time.Second

// checkCapacity refuses, before a run starts, a run on a server named by a
// DSN that cannot hold the connections it needs: instances implementation
// instances (the value of flag), each with a connection of its own at
// least, and harnessConns of harmless's. A server harmless starts is
// sized by harmless, and not checked; nor is a DSN that is not the way
// (opts says which). Past max_connections the server refuses the
// connections of the instances started last, and the run would end in
// errors that read as the implementation's, after minutes: this says so
// at once, with the numbers. The connections in use are counted from
// pg_stat_database, which any role may read; the slots reserved for
// superusers count only for a role that is not one. A server that does
// not answer is not judged here: the run says why it cannot use it.
func checkCapacity(ctx context.Context, opts provision.Options, flag string, instances int) error {
	dsn, source, err := opts.NamedDSN()
	if err != nil || dsn == "" {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, capacityTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		// A server that cannot be reached is the run's to report, in its
		// words and its reports, as it does without this check.
		return nil
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var limit, reserved, inUse int
	var super bool
	err = conn.QueryRow(ctx, `SELECT current_setting('max_connections')::int,
		current_setting('superuser_reserved_connections')::int,
		current_setting('is_superuser') = 'on',
		(SELECT coalesce(sum(numbackends), 0)::int FROM pg_stat_database) - 1`).Scan(&limit, &reserved, &super, &inUse)
	if err != nil {
		return fmt.Errorf("read the connection limits of the server named by %s: %w", source, err)
	}
	return fitConnections(flag, instances, source, limit, reserved, super, inUse)
}

// fitConnections is checkCapacity's judgement on the numbers it read: the
// server at source allows limit connections (max_connections), reserved
// of them for superusers, and inUse are taken by others.
func fitConnections(flag string, instances int, source string, limit, reserved int, super bool, inUse int) error {
	if super {
		reserved = 0
	}
	free := limit - reserved - inUse
	need := instances + harnessConns
	if need <= free {
		return nil
	}
	took := fmt.Sprintf("%d are in use", inUse)
	if reserved > 0 {
		took = fmt.Sprintf("%d are reserved for superusers (superuser_reserved_connections) and %s", reserved, took)
	}
	fix := "free connections on the server, or raise its max_connections"
	if most := free - harnessConns; most >= 2 {
		fix = fmt.Sprintf("give %s %d or fewer, or raise the server's max_connections", flag, most)
	}
	return fmt.Errorf("%s %d cannot fit on the server named by %s: of its %d connections (max_connections), %s, which leaves %d free, and the run needs at least %d (one per instance, and %d of harmless's own): %s",
		flag, instances, source, limit, took, max(free, 0), need, harnessConns, fix)
}
