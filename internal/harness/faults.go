package harness

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/faults/pgproxy"
)

// Kinds of faults, as [Run.FaultsFired] counts them. A kind names where a
// fault is injected and what it does, never which event it targets, so the
// names are stable from run to run:
//
//   - "db:<action>@<point>": a database-side fault of package faults,
//     e.g. "db:raise@effect", "db:sleep@effect", "db:terminate@commit"
//     (see [DBFaultKind]);
//   - "hook:<action>": a Go-level hook in the effect, e.g. "hook:panic"
//     (see [HookFaultKind]);
//   - "proxy:<action>@<point>": a rule of the wire proxy, the point's words
//     joined by hyphens, e.g. "proxy:cut@before-commit",
//     "proxy:cut@after-commit-complete", "proxy:cut@after-statement"
//     (see [ProxyFaultKind]);
//   - [ServerCrashKind]: a crash of the run's server.
const (
	// ServerCrashKind counts the crashes of [Run.CrashServer].
	ServerCrashKind = "server:crash"
)

// DBFaultKind is the kind of a database-side fault: "db:" action "@" point,
// e.g. "db:raise@commit".
func DBFaultKind(p faults.Plan) string { return fmt.Sprintf("db:%s@%s", p.Action, p.Point) }

// HookFaultKind is the kind of a Go-level hook fault: "hook:" action, e.g.
// "hook:cancel".
func HookFaultKind(p faults.HookPlan) string { return "hook:" + string(p.Action) }

// ProxyFaultKind is the kind of a rule of the wire proxy: "proxy:" action
// "@" point with its words joined by hyphens, e.g.
// "proxy:cut@after-commit-complete". The statement number of an
// after-statement rule is not part of the kind.
func ProxyFaultKind(r pgproxy.Rule) string {
	return fmt.Sprintf("proxy:%s@%s", r.Action, strings.ReplaceAll(string(r.At), " ", "-"))
}

// dbFault is a database-side fault a spec armed. Its evidence sequence does
// not come through a crash of the server exactly: crash recovery restores
// what was logged, which may be ahead of the last value (PostgreSQL logs
// sequences 32 values ahead) or behind it (the firing of a transaction that
// rolled back is not flushed). So the firings are counted in two parts:
// base, those up to the last crash, and the sequence's value now minus
// offset, its value right after the last restart.
type dbFault struct {
	fault        *faults.Fault
	base, offset int64
}

// Hooks are a spec's Go-level fault hooks: [faults.Hooks], whose Arm also
// records the fault, so that the run counts its firings.
type Hooks struct {
	*faults.Hooks
	spec *Spec
}

// Arm arms p as [faults.Hooks.Arm] does, and records the fault for
// [Run.FaultsFired].
func (h *Hooks) Arm(p faults.HookPlan) *faults.HookFault {
	f := h.Hooks.Arm(p)
	h.spec.record(HookFaultKind(p), func(context.Context) (int64, error) { return f.Fired(), nil })
	return f
}

// Proxy is a spec's wire proxy: a [pgproxy.Proxy] whose Arm also records
// the fault, so that the run counts its firings.
type Proxy struct {
	*pgproxy.Proxy
	spec *Spec
}

// Arm arms r as [pgproxy.Proxy.Arm] does, and records the fault for
// [Run.FaultsFired].
func (p *Proxy) Arm(r pgproxy.Rule) (*pgproxy.Fault, error) {
	f, err := p.Proxy.Arm(r)
	if err != nil {
		return nil, err
	}
	p.spec.record(ProxyFaultKind(r), func(context.Context) (int64, error) { return int64(f.Fired()), nil })
	return f, nil
}

// armed is a Go-level or proxy fault a spec armed: its kind and how to
// count its firings.
type armed struct {
	kind  string
	fired func(context.Context) (int64, error)
}

// record notes a Go-level or proxy fault the spec armed.
func (s *Spec) record(kind string, fired func(context.Context) (int64, error)) {
	s.faultsMu.Lock()
	defer s.faultsMu.Unlock()
	s.armed = append(s.armed, armed{kind: kind, fired: fired})
}

// dbFired counts the firings of d, correcting for crashes of the server.
func (s *Spec) dbFired(ctx context.Context, d *dbFault) (int64, error) {
	raw, err := d.fault.Fired(ctx, s.run.admin)
	if err != nil {
		return 0, err
	}
	return d.base + max(raw-d.offset, 0), nil
}

// beforeCrash disarms the spec's database-side faults, so that none
// planned for a delivery before the crash fires on one after the restart,
// and folds their firings so far into their base, while the server is
// still up.
func (s *Spec) beforeCrash(ctx context.Context) error {
	s.faultsMu.Lock()
	defer s.faultsMu.Unlock()
	for _, d := range s.dbFaults {
		if err := d.fault.Disarm(ctx, s.run.admin); err != nil {
			return err
		}
	}
	for _, d := range s.dbFaults {
		n, err := s.dbFired(ctx, d)
		if err != nil {
			return err
		}
		d.base, d.offset = n, 0
	}
	return nil
}

// afterRestart reads where the evidence sequences of the spec's
// database-side faults stand after crash recovery: firings count from there.
func (s *Spec) afterRestart(ctx context.Context) error {
	s.faultsMu.Lock()
	defer s.faultsMu.Unlock()
	for _, d := range s.dbFaults {
		raw, err := d.fault.Fired(ctx, s.run.admin)
		if err != nil {
			return err
		}
		d.offset = raw
	}
	return nil
}

// SleepingInFaults counts the connections of the spec's implementation
// instances whose backend sleeps in a [faults.Sleep] fault right now: the
// deliveries a sleep really holds in the database, as opposed to those
// whose sleep fired and then ended (a cancelled statement, a lost
// connection).
func (s *Spec) SleepingInFaults(ctx context.Context) (int, error) {
	var n int
	err := s.run.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Timeout' AND wait_event = 'PgSleep' AND usename = current_user AND starts_with(application_name, $1)`,
		s.AppNamePrefix()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the deliveries sleeping in a fault: %w", err)
	}
	return n, nil
}

// tally adds the firings of every fault the spec armed to the run's counts.
// The spec's instances are closed by then, so nothing fires any more.
func (s *Spec) tally(ctx context.Context) error {
	counts, err := s.faultsSoFar(ctx)
	if err != nil {
		return err
	}
	s.faultsMu.Lock()
	s.dbFaults, s.armed = nil, nil
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
// spec closed so far (through [Spec.Arm], [Spec.Hooks] and [Spec.UseProxy])
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
