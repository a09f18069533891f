package provision

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// FailoverKind says how Formation.Failover takes the primary away.
type FailoverKind string

const (
	// FailoverControlled is a switchover the monitor orchestrates:
	// `pg_autoctl perform failover`. The old primary is demoted cleanly
	// and follows the new one.
	FailoverControlled FailoverKind = "controlled"
	// FailoverHardKill is a power cut of the primary: SIGKILL to its
	// pg_autoctl and to every PostgreSQL process of it, the equivalent of
	// an immediate stop without its signal. The monitor notices the
	// silence and promotes the secondary; the killed node stays down until
	// WaitHealthy.
	FailoverHardKill FailoverKind = "hard-kill"
)

// haFailoverTimeout bounds a failover, from the fault to the first write,
// when ctx has no earlier deadline: measured here 1.3 s controlled, 3 s
// after a hard kill.
const haFailoverTimeout = time.Minute

// Failover is the evidence of one failover: which node was primary before
// and after, the primaries' timelines and system identifiers, and how long
// it took until the new primary accepted a write through the Server's
// multi-host DSN. Problem says whether it shows a real failover.
type Failover struct {
	Kind FailoverKind
	// Before is the primary the fault hit; After the node that took the
	// first write after it.
	Before, After Node
	// TimelineBefore and TimelineAfter are the primaries' timeline ids: a
	// promotion starts a new one.
	TimelineBefore, TimelineAfter int64
	// SystemIDBefore and SystemIDAfter are the primaries' database system
	// identifiers (pg_control_system()): the same cluster, replicated, has
	// the same one; a fresh initdb would not.
	SystemIDBefore, SystemIDAfter uint64
	// Started is when the fault was made: the SIGKILL, or the start of
	// `pg_autoctl perform failover`.
	Started time.Time
	// Writable is the time from Started to the first write the new
	// primary accepted through the multi-host DSN.
	Writable time.Duration
	// Detail says what was done: the command and how long it took, or
	// what was killed.
	Detail string
}

// Problem says what the evidence lacks for a real failover: another node
// primary after it, a new timeline, the same system identifier; "" when
// it has all three.
func (fo Failover) Problem() string {
	var p []string
	if fo.After == (Node{}) {
		p = append(p, "no write was accepted after the fault")
	} else if fo.After == fo.Before {
		p = append(p, fmt.Sprintf("the primary did not move: %s before and after", fo.Before))
	}
	if fo.After != (Node{}) && fo.TimelineAfter <= fo.TimelineBefore {
		p = append(p, fmt.Sprintf("the timeline did not go up: %d before, %d after", fo.TimelineBefore, fo.TimelineAfter))
	}
	if fo.After != (Node{}) && fo.SystemIDAfter != fo.SystemIDBefore {
		p = append(p, fmt.Sprintf("the system identifier changed (%d before, %d after): not the same cluster", fo.SystemIDBefore, fo.SystemIDAfter))
	}
	return strings.Join(p, "; ")
}

// String summarises the failover for messages: "hard-kill failover from
// node1 :41234 to node2 :41235, timeline 2 -> 3, writable after 3.1s".
func (fo Failover) String() string {
	s := fmt.Sprintf("%s failover from %s to %s, timeline %d -> %d, writable after %s",
		fo.Kind, fo.Before, fo.After, fo.TimelineBefore, fo.TimelineAfter, fo.Writable.Round(time.Millisecond))
	if fo.Detail != "" {
		s += " (" + fo.Detail + ")"
	}
	if p := fo.Problem(); p != "" {
		s += ": " + p
	}
	return s
}

// Failover takes the primary away (kind says how) and returns once a new
// primary accepts a write, to the formation's own probe table, through the
// Server's multi-host DSN, whose first host is then the new primary. The
// formation must be healthy (a primary and a secondary, settled: see
// WaitHealthy); the Failover it returns is the evidence, which Problem
// checks. Without a deadline on ctx it gives up after a minute. A write
// that the old primary still accepts during a controlled failover, before
// the command has finished, is not counted.
func (fm *Formation) Failover(ctx context.Context, kind FailoverKind) (Failover, error) {
	fo := Failover{Kind: kind}
	if kind != FailoverControlled && kind != FailoverHardKill {
		return fo, fmt.Errorf("provision: unknown failover kind %q: want %q or %q", kind, FailoverControlled, FailoverHardKill)
	}
	unlock, err := fm.lock("fail over")
	if err != nil {
		return fo, err
	}
	defer unlock()
	f := fm.f
	states, err := f.states(ctx)
	if err != nil {
		return fo, fmt.Errorf("provision: %w", err)
	}
	p, _, ok := healthy(states)
	if !ok {
		return fo, fmt.Errorf("provision: %s is not healthy (%s): a failover now finds no candidate; call WaitHealthy first",
			f.describe(), describeStates(states))
	}
	primary := f.node(p.Port)
	fo.Before = p.Node
	var before serverFacts
	if err := withConn(ctx, f.nodeDSN(primary.port), func(ctx context.Context, conn *pgx.Conn) error {
		before, err = readFacts(ctx, conn)
		return err
	}); err != nil {
		return fo, fmt.Errorf("provision: read the primary %s: %w", primary.name, err)
	}
	fo.TimelineBefore, fo.SystemIDBefore = before.timeline, before.systemID
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, haFailoverTimeout)
		defer cancel()
	}

	// The fault. A controlled failover's command runs while the writes
	// are tried; it returns seconds after the new primary takes them.
	var commandDone <-chan error
	fo.Started = time.Now()
	switch kind {
	case FailoverControlled:
		// Cancelled, and so killed, if Failover gives up first.
		cmdCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		commandDone = f.performFailover(cmdCtx)
	case FailoverHardKill:
		n, err := f.hardKill(ctx, primary)
		fo.Detail = fmt.Sprintf("SIGKILL to %s's pg_autoctl and its %d processes", primary.name, n)
		if err != nil {
			return fo, fmt.Errorf("provision: hard kill of %s: %w", primary.name, err)
		}
	}

	// The first write through the multi-host DSN.
	dsn := fm.s.DSN()
	var after serverFacts
	var commandErr error
	finished := kind == FailoverHardKill
	err = waitFor(ctx, "a new primary to accept a write", nil, func(ctx context.Context) (bool, string, error) {
		if !finished {
			select {
			case commandErr = <-commandDone:
				finished = true
				fo.Detail = fmt.Sprintf("pg_autoctl perform failover returned after %s", time.Since(fo.Started).Round(time.Millisecond))
			default:
			}
		}
		fx, err := probeWrite(ctx, dsn, fmt.Sprintf("%s failover from %s", kind, primary.name))
		if err != nil {
			return false, "", err
		}
		if fx.port == primary.port && !finished {
			return false, "the old primary still takes writes", nil
		}
		after = fx
		return true, "", nil
	})
	if err != nil {
		if states, serr := f.states(context.WithoutCancel(ctx)); serr == nil {
			err = fmt.Errorf("%w; the monitor sees %s", err, describeStates(states))
		}
		return fo, fmt.Errorf("provision: %s failover of %s: %w", kind, primary.name, err)
	}
	fo.Writable = time.Since(fo.Started)
	if n := f.node(after.port); n != nil {
		fo.After = Node{n.name, n.port}
	}
	fo.TimelineAfter, fo.SystemIDAfter = after.timeline, after.systemID
	fm.primaryIs(after.port)

	// The command, if it has not returned yet.
	if !finished {
		select {
		case commandErr = <-commandDone:
			fo.Detail = fmt.Sprintf("pg_autoctl perform failover returned after %s", time.Since(fo.Started).Round(time.Millisecond))
		case <-ctx.Done():
			return fo, fmt.Errorf("provision: pg_autoctl perform failover did not return: %w", context.Cause(ctx))
		}
	}
	if commandErr != nil {
		fo.Detail += ": " + commandErr.Error()
	}
	f.logf("%s", fo)
	return fo, nil
}

// performFailover starts `pg_autoctl perform failover` against the monitor
// and returns the channel its result will come on.
func (f *formation) performFailover(ctx context.Context) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- f.autoctl(ctx, "perform-failover", "perform", "failover", "--pgdata", f.monitor.data)
	}()
	return done
}

// probeWrite writes one row to the probe table through dsn and reads, on
// the same connection, which server took it, its timeline and system
// identifier. A write that did not return without error within
// haQueryTimeout does not count (pgx closes the connection of a cancelled
// query, so a commit cut short never reads as accepted).
func probeWrite(ctx context.Context, dsn, note string) (serverFacts, error) {
	var fx serverFacts
	err := withConn(ctx, dsn, func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "INSERT INTO "+probeTable+" (note) VALUES ($1)", note); err != nil {
			return fmt.Errorf("write to %s: %w", probeTable, err)
		}
		var err error
		fx, err = readFacts(ctx, conn)
		return err
	})
	return fx, err
}
