package harness

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/faults/pgproxy"
	"github.com/harmless-dev/harmless/internal/faultplan"
	"github.com/harmless-dev/harmless/internal/hooks"
)

// Every fault the harness arms is a [faults.Armed]: it tells its kind and
// how often it fired, and the run counts it by kind (see
// [Run.FaultsFired]). A kind names where a fault is injected and what it
// does, never which event it targets, so the names are stable from run to
// run:
//
//   - "db:<action>@<point>": a database-side fault of package faults,
//     e.g. "db:raise@effect", "db:sleep@effect", "db:terminate@commit"
//     (see [faults.Fault.Kind]);
//   - "hook:<action>": a Go-level hook in the effect, e.g. "hook:panic"
//     (see [hooks.Plan.Kind]);
//   - "proxy:<action>@<point>": a rule of the wire proxy, the point's words
//     joined by hyphens, e.g. "proxy:cut@before-commit",
//     "proxy:cut@after-commit-complete", "proxy:cut@after-statement"
//     (see [pgproxy.Fault.Kind]);
//   - [ServerCrashKind]: a crash of the run's server.
//
// The play hands out no way to arm a fault that bypasses the count: its
// [Hooks] and [Proxy] keep the underlying [hooks.Set] and
// [pgproxy.Proxy] to themselves, and their Arm records what it arms. A
// database-side fault armed with faults.Arm directly in the play's schema
// is noticed: [Play.Close] then fails (see [faultplan.CountArmed]).
const (
	// ServerCrashKind counts the crashes of [Run.CrashServer].
	ServerCrashKind = "server:crash"
	// ReplicationStallKind counts the stalls of [Run.StallReplication].
	ReplicationStallKind = "server:replication-stall"
)

// Every kind of fault the harness arms is counted through faults.Armed.
var (
	_ faults.Armed = (*dbFault)(nil)
	_ faults.Armed = (*hooks.Fault)(nil)
	_ faults.Armed = (*pgproxy.Fault)(nil)
	_ faults.Armed = serverCrash{}
)

// dbFault is a database-side fault a play armed. Its evidence sequence does
// not come through a crash of the server exactly: crash recovery restores
// what was logged, which may be ahead of the last value (PostgreSQL logs
// sequences 32 values ahead) or behind it (the firing of a transaction that
// rolled back is not flushed). So the firings are counted in two parts:
// base, those up to the last crash, and the sequence's value now minus
// offset, its value right after the last restart. The play's faultsMu
// guards base and offset.
type dbFault struct {
	fault        *faults.Fault
	base, offset int64
}

// Kind is the fault's kind.
func (d *dbFault) Kind() string { return d.fault.Kind() }

// Fired counts the firings of the fault, correcting for crashes of the
// server.
func (d *dbFault) Fired(ctx context.Context) (int64, error) {
	raw, err := d.fault.Fired(ctx)
	if err != nil {
		return 0, err
	}
	return d.base + max(raw-d.offset, 0), nil
}

// serverCrash is one crash of the run's server: it fired once.
type serverCrash struct{}

func (serverCrash) Kind() string                         { return ServerCrashKind }
func (serverCrash) Fired(context.Context) (int64, error) { return 1, nil }

// Hooks are a play's Go-level fault hooks: [hooks.Set], whose Arm also
// records the fault, so that the run counts its firings.
type Hooks struct {
	hooks *hooks.Set
	play  *Play
}

// Arm arms p as [hooks.Set.Arm] does, and records the fault for
// [Run.FaultsFired].
func (h *Hooks) Arm(p hooks.Plan) *hooks.Fault {
	f := h.hooks.Arm(p)
	h.play.record(f)
	return f
}

// Effect is the [adapters.EffectHook] the play's effect calls (see
// [hooks.Set.Effect]).
func (h *Hooks) Effect(ctx context.Context, d adapters.Delivery) error {
	return h.hooks.Effect(ctx, d)
}

// Proxy is a play's wire proxy: a [pgproxy.Proxy] whose Arm also records
// the fault, so that the run counts its firings. The play closes it, and
// points its listeners at the server after a restart.
type Proxy struct {
	proxy *pgproxy.Proxy
	play  *Play
}

// Arm arms r as [pgproxy.Proxy.Arm] does, and records the fault for
// [Run.FaultsFired]. Scope it to an instance with [ProxyClient].
func (p *Proxy) Arm(r pgproxy.Rule) (*pgproxy.Fault, error) {
	f, err := p.proxy.Arm(r)
	if err != nil {
		return nil, err
	}
	p.play.record(f)
	return f, nil
}

// Seen is what the proxy saw of instance n's connections so far (see
// [pgproxy.Proxy.Seen]): how many came through its listeners, their
// statements and the application names they carried.
func (p *Proxy) Seen(n int) pgproxy.Seen { return p.proxy.Seen(ProxyClient(n)) }

// Listeners are instance n's listeners, one per host of the server's DSN,
// in the order they were opened (none before the instance's environment
// was made).
func (p *Proxy) Listeners(n int) []*pgproxy.Listener { return p.proxy.Listeners(ProxyClient(n)) }

// follow points the listeners whose upstream is none of addrs, the
// server's hosts now, at them: the one server's new address, or a
// formation's host in the listener's position. A listener whose upstream
// is one of addrs stays.
func (p *Proxy) follow(addrs []string) error {
	byClient := map[string][]*pgproxy.Listener{}
	for _, l := range p.proxy.Listeners("") {
		byClient[l.Client()] = append(byClient[l.Client()], l)
	}
	for client, ls := range byClient {
		for i, l := range ls {
			if slices.Contains(addrs, l.Upstream()) {
				continue
			}
			to := addrs[0]
			if len(addrs) > 1 {
				if len(ls) != len(addrs) {
					return fmt.Errorf("proxy: %s has %d listeners for a server of %d hosts, and %s is none of them", client, len(ls), len(addrs), l.Upstream())
				}
				to = addrs[i]
			}
			if err := l.SetUpstream(to); err != nil {
				return err
			}
		}
	}
	return nil
}

// countByKind counts the firings of armed by kind; kinds that did not fire
// are left out.
func countByKind(ctx context.Context, armed []faults.Armed) (map[string]int64, error) {
	counts := map[string]int64{}
	for _, f := range armed {
		n, err := f.Fired(ctx)
		if err != nil {
			return nil, fmt.Errorf("count the firings of fault %s: %w", f.Kind(), err)
		}
		counts[f.Kind()] += n
	}
	maps.DeleteFunc(counts, func(_ string, n int64) bool { return n == 0 })
	return counts, nil
}

// record notes a fault the play armed, for the run's counts.
func (s *Play) record(f faults.Armed) {
	s.faultsMu.Lock()
	defer s.faultsMu.Unlock()
	s.armed = append(s.armed, f)
}

// beforeCrash disarms the play's database-side faults, so that none
// planned for a delivery before the crash fires on one after the restart,
// and folds their firings so far into their base, while the server is
// still up.
func (s *Play) beforeCrash(ctx context.Context) error {
	if err := s.DisarmAll(ctx); err != nil {
		return err
	}
	return s.foldFired(ctx)
}

// DisarmAll disarms every database-side fault the play armed: none fires
// again, and their firings so far are still counted. A failover needs it
// done while the formation still replicates (see [Run.FailOver]).
func (s *Play) DisarmAll(ctx context.Context) error {
	s.faultsMu.Lock()
	defer s.faultsMu.Unlock()
	for _, d := range s.dbFaults {
		if err := d.fault.Disarm(ctx); err != nil {
			return err
		}
	}
	return nil
}

// ArmedFaults counts the database-side faults armed in the play's schema
// right now: armed and not disarmed yet. A soak's nemesis checks it before
// a failover, which must find none (see [Run.FailOver]).
func (s *Play) ArmedFaults(ctx context.Context) (int, error) {
	return faultplan.CountPlanned(ctx, s.run.admin, s.schema)
}

// foldFired folds the firings of the play's database-side faults so far
// into their base: only reads, so it works on a primary whose replication
// is stalled.
func (s *Play) foldFired(ctx context.Context) error {
	s.faultsMu.Lock()
	defer s.faultsMu.Unlock()
	for _, d := range s.dbFaults {
		n, err := d.Fired(ctx)
		if err != nil {
			return err
		}
		d.base, d.offset = n, 0
	}
	return nil
}

// afterRestart reads where the evidence sequences of the play's
// database-side faults stand after crash recovery: firings count from there.
func (s *Play) afterRestart(ctx context.Context) error {
	s.faultsMu.Lock()
	defer s.faultsMu.Unlock()
	for _, d := range s.dbFaults {
		raw, err := d.fault.Fired(ctx)
		if err != nil {
			return err
		}
		d.offset = raw
	}
	return nil
}

// SleepingInFaults counts the connections of the play's implementation
// instances whose backend sleeps in a [faults.Sleep] fault right now: the
// deliveries a sleep really holds in the database, as opposed to those
// whose sleep fired and then ended (a cancelled statement, a lost
// connection). The instances' connections are those open through the
// play's proxy, found by their backends' pids, of the run's role.
func (s *Play) SleepingInFaults(ctx context.Context) (int, error) {
	var n int
	err := s.run.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Timeout' AND wait_event = 'PgSleep' AND usename = current_user AND pid = ANY($1::int4[])`,
		s.instancePIDs()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the deliveries sleeping in a fault: %w", err)
	}
	return n, nil
}

// tally adds the firings of every fault the play armed to the run's counts.
// The play's instances are closed by then, so nothing fires any more. It
// fails when the play's schema holds database-side faults armed around
// [Play.Arm] (with faults.Arm directly): their firings would go uncounted.
func (s *Play) tally(ctx context.Context) error {
	s.faultsMu.Lock()
	tallied := s.tallied
	s.faultsMu.Unlock()
	if tallied {
		return nil // closed before: the run has the counts
	}
	counts, err := s.faultsSoFar(ctx)
	if err != nil {
		return err
	}
	inSchema, err := faultplan.CountArmed(ctx, s.run.admin, s.schema)
	if err != nil {
		return err
	}
	s.faultsMu.Lock()
	recorded, failed := len(s.dbFaults), s.failedArms
	s.faultsMu.Unlock()
	if inSchema > recorded+failed {
		return fmt.Errorf("the play's schema holds %d database-side faults, but %d were armed through Play.Arm (and %d attempts failed): faults armed around it are not counted", inSchema, recorded, failed)
	}
	s.faultsMu.Lock()
	s.dbFaults, s.armed, s.failedArms, s.tallied = nil, nil, 0, true
	s.faultsMu.Unlock()
	s.run.addFired(counts)
	return nil
}

// addFired adds counts to the run's firings; kinds that did not fire are
// left out.
func (r *Run) addFired(counts map[string]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for kind, n := range counts {
		if n > 0 {
			r.fired[kind] += n
		}
	}
}

// FaultsFired returns how many times faults of each kind fired in the run,
// by kind (see [ServerCrashKind] for the names): the faults armed by every
// play closed so far (through [Play.Arm], [Play.Hooks] and [Play.Proxy])
// and the crashes of [Run.CrashServer]. A kind that never fired is absent.
//
// A database-side fault that fires in the moment between the harness
// reading its count before a crash and the crash itself, or between the
// restart and the harness reading it again, is not counted: the crash
// leaves its evidence unreliable.
func (r *Run) FaultsFired() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.fired)
}
