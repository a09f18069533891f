package provision

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// haSetTimeout bounds SetSynchronous when ctx has no earlier deadline.
const haSetTimeout = time.Minute

// setQuorumTries is how often `pg_autoctl set node replication-quorum` is
// tried when the monitor reports a deadlock.
const setQuorumTries = 3

// setQuorum sets n's replication-quorum. The monitor runs the set in a
// transaction that may deadlock with its own work for the node (seen
// after a failover: "Monitor ERROR: deadlock detected", exit 6), and then
// aborts it, changing nothing: the set, which only states a value, is
// tried again. Any other failure is returned at once.
func (f *formation) setQuorum(ctx context.Context, n *instance, on bool) error {
	var err error
	for range setQuorumTries {
		err = f.autoctl(ctx, n.name+"-set", "set", "node", "replication-quorum", "--pgdata", n.data, strconv.FormatBool(on))
		if err == nil || !strings.Contains(err.Error(), "deadlock detected") || ctx.Err() != nil {
			return err
		}
		f.logf("%s: the monitor deadlocked on the replication-quorum set; trying again", n.name)
	}
	return err
}

// SetSynchronous makes replication synchronous (on, pg_auto_failover's
// default: a commit on the primary returns once the secondary has it) or
// asynchronous (a commit returns at once, and a failover may lose what
// the secondary had not received yet): `pg_autoctl set node
// replication-quorum true|false` on each node. It returns once the
// primary's synchronous_standby_names says so, not empty or empty, and
// the monitor sees a primary and a secondary again. The formation must be
// healthy (see WaitHealthy) when it is called.
func (fm *Formation) SetSynchronous(ctx context.Context, on bool) error {
	unlock, err := fm.lock("set the replication of")
	if err != nil {
		return err
	}
	defer unlock()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, haSetTimeout)
		defer cancel()
	}
	f := fm.f
	if err := f.checkHealthy(ctx, "replication-quorum is set on both nodes"); err != nil {
		return err
	}
	for _, n := range f.nodes {
		if err := f.setQuorum(ctx, n, on); err != nil {
			return fmt.Errorf("provision: %s: %w", n.name, err)
		}
	}
	want := "not empty"
	if !on {
		want = "empty"
	}
	// Each set puts the primary in apply_settings, once or twice
	// depending on how the two meet: wait until the last of them is
	// applied, the formation settled, and the setting says so, so that
	// the next fault finds a candidate.
	var primary int
	err = waitFor(ctx, "synchronous_standby_names on the primary to be "+want+", the settings applied", nil,
		func(ctx context.Context) (bool, string, error) {
			states, err := f.states(ctx)
			if err != nil {
				return false, "", err
			}
			p, _, ok := healthy(states)
			if !ok {
				return false, describeStates(states), nil
			}
			if applied, err := f.settingsApplied(ctx, p.Name); err != nil || !applied {
				return false, p.Name + " is applying the settings", err
			}
			var names string
			if err := withConn(ctx, f.nodeDSN(p.Port), func(ctx context.Context, conn *pgx.Conn) error {
				return conn.QueryRow(ctx, "SELECT current_setting('synchronous_standby_names')").Scan(&names)
			}); err != nil {
				return false, "", err
			}
			primary = p.Port
			return (names != "") == on, fmt.Sprintf("synchronous_standby_names = '%s' on %s", names, p.Name), nil
		})
	if err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	fm.primaryIs(primary)
	f.logf("replication of %s is now %s", f.describe(), map[bool]string{true: "synchronous", false: "asynchronous"}[on])
	return nil
}

// settingsApplied reports whether the primary has reported itself primary
// since the monitor last told it to apply settings, from the monitor's
// event log.
func (f *formation) settingsApplied(ctx context.Context, primary string) (bool, error) {
	var applied bool
	err := withConn(ctx, f.monitorDSN(), func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT coalesce(max(eventid) FILTER (WHERE reportedstate = 'primary' AND goalstate = 'primary'), 0)
			> coalesce(max(eventid) FILTER (WHERE goalstate = 'apply_settings'), 0)
			FROM pgautofailover.event WHERE nodename = $1`, primary).Scan(&applied)
	})
	if err != nil {
		return false, fmt.Errorf("read the monitor's events: %w", err)
	}
	return applied, nil
}

// ReplicationStall is a standby made to lag on purpose by
// Formation.StallReplication: the primary's WAL sender processes are
// stopped (SIGSTOP) until Resume. While it lasts, a synchronous commit
// blocks, a commit with synchronous_commit = local returns at once, and
// the standby falls behind by what those wrote; measured here, the
// monitor did not move the primary to wait_primary within 11 s. A
// hard-kill Failover meanwhile still works and loses what the standby had
// not received.
type ReplicationStall struct {
	f                *formation
	primary, standby Node
	mu               sync.Mutex
	senders          map[int]string // pid: procStart, of the stopped WAL senders
}

// Lag is how far the standby is behind the primary: LSNs as PostgreSQL
// prints them ("0/3000148") and the distance in bytes.
type Lag struct {
	// PrimaryFlush is the primary's pg_current_wal_flush_lsn().
	PrimaryFlush string
	// StandbyReceived is the standby's pg_last_wal_receive_lsn().
	StandbyReceived string
	// Bytes is pg_wal_lsn_diff(PrimaryFlush, StandbyReceived).
	Bytes int64
	// SynchronousStandbys is the primary's synchronous_standby_names when
	// the lag was read: empty when the primary no longer waits for its
	// standby, as after the HA engine moved it to wait_primary, and a
	// commit that returned then was not kept by the standby, whatever the
	// session asked for.
	SynchronousStandbys string
}

// Synchronous reports whether the primary still waited for its standby
// when the lag was read.
func (l Lag) Synchronous() bool { return l.SynchronousStandbys != "" }

// StallReplication makes the standby lag: it stops (SIGSTOP) the primary's
// WAL sender processes (pg_stat_replication's pids), so that the standby's
// connection stays up and receives nothing. Stopping or ending the
// standby's WAL receiver instead does not work: it restarts within 0.15 s
// when ended, and leaves WAL in socket buffers when stopped. Resume, or
// Close, starts the senders again.
func (fm *Formation) StallReplication(ctx context.Context) (*ReplicationStall, error) {
	unlock, err := fm.lock("stall the replication of")
	if err != nil {
		return nil, err
	}
	defer unlock()
	f := fm.f
	states, err := f.states(ctx)
	if err != nil {
		return nil, fmt.Errorf("provision: %w", err)
	}
	p, s, ok := healthy(states)
	if !ok {
		return nil, fmt.Errorf("provision: %s is not healthy (%s): there is no replication to stall; call WaitHealthy first",
			f.describe(), describeStates(states))
	}
	primary := f.node(p.Port)
	var pids []int
	err = withConn(ctx, f.nodeDSN(primary.port), func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, "SELECT pid FROM pg_stat_replication")
		if err != nil {
			return err
		}
		pids, err = pgx.CollectRows(rows, pgx.RowTo[int])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("provision: read pg_stat_replication on %s: %w", primary.name, err)
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("provision: no WAL sender on the primary %s: nothing replicates", primary.name)
	}
	st := &ReplicationStall{f: f, primary: p.Node, standby: s.Node, senders: map[int]string{}}
	for _, pid := range pids {
		// A process of the primary's, not one that reused the pid.
		if !slices.Contains(processesIn(primary.data, f.as.serverUID()), pid) {
			continue
		}
		start := procStart(pid)
		if err := signalIfSame(pid, start, syscall.SIGSTOP); err != nil {
			_ = st.Resume()
			return nil, fmt.Errorf("provision: stop the WAL sender %d on %s: %w", pid, primary.name, err)
		}
		st.senders[pid] = start
	}
	if len(st.senders) == 0 {
		return nil, fmt.Errorf("provision: the WAL senders %v of %s are gone", pids, primary.name)
	}
	f.mu.Lock()
	f.stall = st
	f.mu.Unlock()
	f.logf("stalled replication from %s to %s: WAL senders %v stopped", p.Name, s.Name, pids)
	return st, nil
}

// Lag reads how far the standby is behind: the primary's flush LSN, the
// standby's last received LSN, and the distance. It needs both nodes up.
func (st *ReplicationStall) Lag(ctx context.Context) (Lag, error) {
	var lag Lag
	f := st.f
	err := withConn(ctx, f.nodeDSN(st.standby.Port), func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT coalesce(pg_last_wal_receive_lsn(), '0/0')::text").Scan(&lag.StandbyReceived)
	})
	if err != nil {
		return lag, fmt.Errorf("provision: read the standby %s: %w", st.standby.Name, err)
	}
	err = withConn(ctx, f.nodeDSN(st.primary.Port), func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn()::text, pg_wal_lsn_diff(pg_current_wal_flush_lsn(), $1::pg_lsn)::bigint, current_setting('synchronous_standby_names')",
			lag.StandbyReceived).Scan(&lag.PrimaryFlush, &lag.Bytes, &lag.SynchronousStandbys)
	})
	if err != nil {
		return lag, fmt.Errorf("provision: read the primary %s: %w", st.primary.Name, err)
	}
	return lag, nil
}

// Resume starts the stopped WAL senders again (SIGCONT); the standby
// catches up. A sender that is gone meanwhile (its primary was killed) is
// skipped. Calling it again does nothing.
func (st *ReplicationStall) Resume() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	var errs []error
	for pid, start := range st.senders {
		errs = append(errs, signalIfSame(pid, start, syscall.SIGCONT))
		delete(st.senders, pid)
	}
	st.f.mu.Lock()
	if st.f.stall == st {
		st.f.stall = nil
	}
	st.f.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("provision: resume replication: %w", err)
	}
	return nil
}

// resumeStall resumes the formation's stall, if any, so that nothing stays
// stopped: Close calls it first.
func (f *formation) resumeStall() {
	f.mu.Lock()
	st := f.stall
	f.mu.Unlock()
	if st != nil {
		if err := st.Resume(); err != nil {
			f.logf("%v", err)
		}
	}
}
