package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/harmless-dev/harmless/internal/provision"
)

// FailoverKindOf is the kind a failover of kind k is counted under in the
// run's faults: "server:failover@controlled", "server:failover@hard-kill".
func FailoverKindOf(k provision.FailoverKind) string { return "server:failover@" + string(k) }

// Formation returns the run's replicated formation (--provision ha), or
// nil when the run's database is one server.
func (r *Run) Formation() *provision.Formation { return r.server.Formation() }

// formation is Formation, or an error saying the run has none.
func (r *Run) formation(what string) (*provision.Formation, error) {
	f := r.server.Formation()
	if f == nil {
		return nil, fmt.Errorf("harness: cannot %s on %s: it is not a replicated formation (--provision ha)", what, r.server)
	}
	return f, nil
}

// FailedOver is what [Run.FailOver] observed: the formation's evidence
// that the primary changed, and the harness's that the connections made
// before it ended.
type FailedOver struct {
	provision.Failover
	// OldConnErr is what a connection opened before the failover (the
	// run's keeper) answered after it. The old primary's connections all
	// end, demoted or killed, so it is never nil then.
	OldConnErr error
}

// Problem returns "" when the evidence shows a real failover, else what is
// missing.
func (f FailedOver) Problem() string {
	if p := f.Failover.Problem(); p != "" {
		return p
	}
	if f.OldConnErr == nil {
		return fmt.Sprintf("the failover from %s did not end the connections to the old primary: one opened before it still works", f.Before.Name)
	}
	return ""
}

// FailOver fails the run's formation over, in the way kind says (see
// [provision.Formation.Failover]), and recovers the run as
// [Run.RestartServer] does: the keeper and the admin pool follow the new
// primary, and the evidence of the database-side faults is read again
// there. The plays' proxies need not follow it: each instance has a
// listener per node, in its DSN's order, so a client that tries the hosts
// in turn finds the new primary through them, as it would without the
// proxy, the moment it takes writes.
//
// Unlike [Run.CrashServer] it does not disarm the plays' faults: a
// disarm is a write, which waits for the standby, and the caller may have
// stalled the replication on purpose ([Run.StallReplication]). The caller
// disarms them ([Play.DisarmAll]) while the formation still replicates,
// so that the disarm survives the failover. Deliveries held in a fault
// stay held until the failover ends them.
//
// It returns once the new
// primary accepts writes (a controlled failover: once the HA engine's
// command returned too); the old primary is left as the failover left it
// (demoted, or killed) until [Run.RestoreFormation]. It must not run
// concurrently with other uses of the run's formation.
func (r *Run) FailOver(ctx context.Context, kind provision.FailoverKind) (FailedOver, error) {
	f, err := r.formation("fail over")
	if err != nil {
		return FailedOver{}, err
	}
	// Only reads: the stalled primary still answers them.
	for _, s := range r.openPlays() {
		if err := s.foldFired(ctx); err != nil {
			return FailedOver{}, fmt.Errorf("harness: count the faults of play %s before the failover: %w", s.name, err)
		}
	}
	fo, err := f.Failover(ctx, kind)
	out := FailedOver{Failover: fo}
	if err != nil {
		return out, fmt.Errorf("harness: fail %s over (%s): %w", r.server, kind, err)
	}
	r.addFired(map[string]int64{FailoverKindOf(kind): 1})
	if out.OldConnErr, err = r.reconnect(ctx, r.server.DSN()); err != nil {
		return out, err
	}
	if err := r.afterRestart(ctx); err != nil {
		return out, err
	}
	r.opts.Logf("%s", fo)
	return out, nil
}

// StallReplication stops the formation's replication to its standby on
// purpose (see [provision.Formation.StallReplication]), so that the
// standby lags behind the primary: a synchronous commit waits, one made
// with synchronous_commit = local returns. The caller must resume it,
// unless a hard kill of the primary ends it; the close of a play resumes
// it if it is still on. It counts as a fault of kind
// [ReplicationStallKind].
func (r *Run) StallReplication(ctx context.Context) (*provision.ReplicationStall, error) {
	f, err := r.formation("stall replication")
	if err != nil {
		return nil, err
	}
	st, err := f.StallReplication(ctx)
	if err != nil {
		return nil, fmt.Errorf("harness: stall the replication of %s: %w", r.server, err)
	}
	r.addFired(map[string]int64{ReplicationStallKind: 1})
	r.mu.Lock()
	r.stalls = append(r.stalls, st)
	r.mu.Unlock()
	return st, nil
}

// resumeStalls resumes every replication stall of the run that is still
// on. A play stopped between StallReplication and Resume (an interrupt)
// would otherwise leave the primary's commits waiting for a standby that
// receives nothing, its own DROP SCHEMA among them, for good.
func (r *Run) resumeStalls() error {
	r.mu.Lock()
	stalls := r.stalls
	r.stalls = nil
	r.mu.Unlock()
	var errs []error
	for _, st := range stalls {
		errs = append(errs, st.Resume())
	}
	return errors.Join(errs...)
}

// SetSynchronous makes the formation's replication synchronous (on, as
// the HA engine sets it up) or asynchronous, and returns once the primary
// says so.
func (r *Run) SetSynchronous(ctx context.Context, on bool) error {
	f, err := r.formation("change the replication")
	if err != nil {
		return err
	}
	if err := f.SetSynchronous(ctx, on); err != nil {
		return fmt.Errorf("harness: make the replication of %s %s: %w", r.server, map[bool]string{true: "synchronous", false: "asynchronous"}[on], err)
	}
	return nil
}

// RestoreFormation brings the formation back to a primary and a
// synchronous secondary after a failover: it restarts a killed node,
// which rejoins as the secondary, and waits until both report the state
// the HA engine assigned. A fault before that finds no standby to promote.
func (r *Run) RestoreFormation(ctx context.Context) error {
	f, err := r.formation("restore the formation")
	if err != nil {
		return err
	}
	began := time.Now()
	if err := f.WaitHealthy(ctx); err != nil {
		return fmt.Errorf("harness: restore %s after a failover: %w", r.server, err)
	}
	r.opts.Logf("%s: primary and secondary again after %s", r.server, time.Since(began).Round(time.Millisecond))
	return nil
}
