package harness

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/faults"
)

// Crash is a crash of the run's server that [Run.CrashServer] caused: pass
// it to [Run.RestartServer].
type Crash struct {
	// Server describes the crashed server, without credentials.
	Server string
	// StartedBefore is the server's pg_postmaster_start_time() before the
	// crash.
	StartedBefore time.Time
	// At is when the crash was done.
	At time.Time

	dsn string // the server's address before the crash
}

// Recovery is what [Run.RestartServer] observed: the evidence that the
// server really crashed and came back.
type Recovery struct {
	Crash
	// StartedAfter is the server's pg_postmaster_start_time() after the
	// restart. A server that really restarted has a later one.
	StartedAfter time.Time
	// OldConnErr is what a connection opened before the crash (the run's
	// keeper) answered after the restart. A real crash ends every
	// connection, so it is never nil then.
	OldConnErr error
	// Moved reports whether the server came back at another address (a
	// container gets a new host port). A client holding the server's old
	// DSN cannot reconnect by itself then; an implementation instance,
	// which connects through its play's proxy ([Play.Proxy]), can,
	// since the restart points the listeners of every open play's proxy at
	// the new address.
	Moved bool
	// Down is how long the server was gone: from the crash to the end of
	// the restart.
	Down time.Duration
}

// Problem returns "" when the evidence shows a real crash and restart,
// else what is missing.
func (r Recovery) Problem() string {
	switch {
	case !r.StartedAfter.After(r.StartedBefore):
		return fmt.Sprintf("the crash of %s did not happen: the server's start time is still %s", r.Server, r.StartedBefore.Format(time.RFC3339Nano))
	case r.OldConnErr == nil:
		return fmt.Sprintf("the crash of %s did not happen: a connection opened before it still works", r.Server)
	}
	return ""
}

// String summarises the evidence, e.g. "throwaway cluster in /tmp/x
// crashed and restarted: down 0.8s, postmaster start time 12:00:01.5 ->
// 12:00:02.3, connections opened before the crash gone".
func (r Recovery) String() string {
	s := fmt.Sprintf("%s crashed and restarted: down %.1fs, postmaster start time %s -> %s",
		r.Server, r.Down.Seconds(), r.StartedBefore.Format(clockFormat), r.StartedAfter.Format(clockFormat))
	if r.OldConnErr != nil {
		s += ", connections opened before the crash gone"
	}
	if r.Moved {
		s += ", back at a new address (the plays' proxies follow it)"
	}
	return s
}

const clockFormat = "15:04:05.000"

// CrashServer crashes the run's server without a clean shutdown: an
// immediate shutdown of a throwaway cluster, SIGKILL to a container. It
// refuses a server the run does not own (one named by a DSN): the harness
// only ever crashes what it created. Every connection to the server dies;
// nothing of the run works until [Run.RestartServer].
//
// Right before the crash it disarms every database-side fault of the open
// plays ([Play.Disarm]): a fault planned for a delivery before the crash
// must never hold up or fail a delivery after the restart, such as a first
// attempt that reaches the server only then. A delivery already inside a
// fault (a sleep) stays there until the crash ends it.
//
// CrashServer and RestartServer must not run concurrently with other uses
// of the run.
func (r *Run) CrashServer(ctx context.Context) (*Crash, error) {
	if !r.server.Owned() {
		return nil, fmt.Errorf("harness: refusing to crash %s: this run did not create it", r.server)
	}
	c := &Crash{Server: r.server.String(), dsn: r.server.DSN()}
	if err := r.admin.QueryRow(ctx, `SELECT pg_postmaster_start_time()`).Scan(&c.StartedBefore); err != nil {
		return nil, fmt.Errorf("harness: server start time before the crash: %w", err)
	}
	// The crash leaves the evidence of database-side faults unreliable:
	// count what fired so far while the server is up.
	for _, s := range r.openPlays() {
		if err := s.beforeCrash(ctx); err != nil {
			return nil, fmt.Errorf("harness: disarm and count the faults of play %s before the crash: %w", s.name, err)
		}
	}
	if err := r.server.Crash(ctx); err != nil {
		return nil, err
	}
	c.At = time.Now()
	crash, err := countByKind(ctx, []faults.Armed{serverCrash{}})
	if err != nil {
		return nil, err
	}
	r.addFired(crash)
	return c, nil
}

// RestartServer starts the server again after c (PostgreSQL runs crash
// recovery) and recovers the run: it points every open play's proxy at the
// server's address, new or not, reopens the keeper connection, renews the
// admin pool's connections and checks that the pool works. The recovery's
// evidence says whether the crash was real.
func (r *Run) RestartServer(ctx context.Context, c *Crash) (Recovery, error) {
	rec := Recovery{Crash: *c}
	if err := r.server.Restart(ctx); err != nil {
		return rec, err
	}
	rec.Down = time.Since(c.At)
	dsn := r.server.DSN()
	rec.Moved = dsn != c.dsn
	var err error
	if rec.OldConnErr, err = r.reconnect(ctx, dsn); err != nil {
		return rec, err
	}
	if err := r.admin.QueryRow(ctx, `SELECT pg_postmaster_start_time()`).Scan(&rec.StartedAfter); err != nil {
		return rec, fmt.Errorf("harness: server start time after the restart: %w", err)
	}
	if err := r.afterRestart(ctx); err != nil {
		return rec, err
	}
	r.opts.Logf("%s", rec)
	return rec, nil
}

// reconnect points the run at its server after a crash or a failover,
// now at dsn: every open play's proxy first, so that an implementation
// reconnecting through one reaches the server as soon as it is back; then
// the keeper, reopened; then the admin pool, whose idle connections are
// dead and whose new ones go to dsn (see Run.toCurrentServer; closing the
// pool instead would wait for the connections in use, a write hold's, which
// are dropped when released). It returns what the old keeper answered: a
// real crash or failover ends every connection, so it is never nil then.
func (r *Run) reconnect(ctx context.Context, dsn string) (oldConnErr error, err error) {
	for _, s := range r.openPlays() {
		if err := s.followServer(dsn); err != nil {
			return nil, fmt.Errorf("harness: point the proxy of play %s at the server: %w", s.name, err)
		}
	}
	oldConnErr = r.keeper.Ping(ctx)
	_ = r.keeper.Close(ctx) // dead: closing it can only fail
	keeperDSN, err := WithApplicationName(dsn, r.appName("keeper"))
	if err != nil {
		return oldConnErr, err
	}
	if r.keeper, err = pgx.Connect(ctx, keeperDSN); err != nil {
		return oldConnErr, fmt.Errorf("harness: reconnect the keeper: %w", err)
	}
	r.admin.Reset()
	return oldConnErr, nil
}

// afterRestart reads where the evidence of every open play's
// database-side faults stands on the server as it is now.
func (r *Run) afterRestart(ctx context.Context) error {
	for _, s := range r.openPlays() {
		if err := s.afterRestart(ctx); err != nil {
			return fmt.Errorf("harness: count the faults of play %s after the server came back: %w", s.name, err)
		}
	}
	return nil
}
