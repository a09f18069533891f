package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/faults/pgproxy"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/provision"
)

// The nemeses, by the names --nemesis takes.
const (
	NemesisKill            = "kill"              // terminate the implementation's connections
	NemesisCutBeforeCommit = "cut-before-commit" // the proxy cuts a connection as it sends COMMIT
	NemesisCutAfterCommit  = "cut-after-commit"  // ... after COMMIT's CommandComplete, before the client reads it
	NemesisDBRaise         = "db-raise"          // a trigger fails upcoming events' effect or commit
	NemesisDBSleep         = "db-sleep"          // a trigger holds upcoming events' transactions open, delivered concurrently
	NemesisCrash           = "crash"             // crash the server and restart it (a server harmless owns, not a formation)
	NemesisFailover        = "failover"          // fail a replicated formation over, controlled or by a hard kill, and restore it
	NemesisPurge           = "purge"             // purge old deduplication state concurrently (a declared window)
	NemesisDestination     = "destination"       // the external destination fails, drops answers, goes down
)

// Nemeses lists every nemesis, in the order the documentation gives them.
func Nemeses() []string {
	return []string{NemesisKill, NemesisCutBeforeCommit, NemesisCutAfterCommit, NemesisDBRaise, NemesisDBSleep,
		NemesisCrash, NemesisFailover, NemesisPurge, NemesisDestination}
}

// Database is what the nemeses need to know of the soak's database: the
// server faults they may make depend on who started it and on whether it
// is one server or a replicated formation. The command knows it before it
// starts anything (from the way --provision or the DSN plans), the soak
// from its run (DatabaseOf).
type Database struct {
	// Owned is set when harmless started the server (a container, a
	// throwaway cluster or a formation): it never crashes or fails over a
	// server named by a DSN, which may be someone else's.
	Owned bool
	// Formation is set when the database is a replicated formation
	// (--provision ha): a primary and a synchronous secondary, which fails
	// over where one server would crash.
	Formation bool
}

// DatabaseOf describes the database of run.
func DatabaseOf(run *harness.Run) Database {
	return Database{Owned: run.Server().Owned(), Formation: run.Formation() != nil}
}

// Unavailable says why nemesis cannot run against adapter on db, or ""
// when it can.
func Unavailable(nemesis string, adapter adapters.Adapter, db Database) string {
	switch nemesis {
	case NemesisCrash:
		// A formation's primary that crashes is failed over by its HA
		// engine: that is the failover nemesis, whose evidence and
		// restoration differ from a restart's.
		if db.Formation {
			return "on a replicated formation a crash of the primary is a failover: use the failover nemesis"
		}
		if !db.Owned {
			return "the server is named by a DSN: harmless crashes only a server it started (use --provision cluster or container)"
		}
	case NemesisFailover:
		if !db.Formation {
			return "the database is one server: a failover needs a replicated formation (use --provision ha)"
		}
	case NemesisPurge:
		if adapter.Declares.RedeliveryWindow <= 0 {
			return "the implementation declares no redelivery window, so it has no state to purge"
		}
	case NemesisDestination:
		if adapter.Declares.ExternalEffects == adapters.NoExternalEffects {
			return "the implementation declares no external effects"
		}
	case NemesisKill, NemesisCutBeforeCommit, NemesisCutAfterCommit, NemesisDBRaise, NemesisDBSleep:
	default:
		return fmt.Sprintf("no such nemesis (known: %s)", strings.Join(Nemeses(), ", "))
	}
	return ""
}

// ParseNemeses reads --nemesis: a comma-separated list, "all" (every
// nemesis the environment allows, the default) or "none". Naming one the
// environment does not allow is an error that says why.
func ParseNemeses(list string, adapter adapters.Adapter, db Database) ([]string, error) {
	switch strings.TrimSpace(list) {
	case "", "all":
		var out []string
		for _, n := range Nemeses() {
			if Unavailable(n, adapter, db) == "" {
				out = append(out, n)
			}
		}
		return out, nil
	case "none":
		return nil, nil
	}
	var out []string
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if why := Unavailable(n, adapter, db); why != "" {
			return nil, fmt.Errorf("--nemesis %s: %s", n, why)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// nemesis injects one fault at a time on a schedule drawn from the seed,
// and records each as a FaultWindow.
type nemesis struct {
	s     *soaker
	rng   *rand.Rand
	kinds []string
	// failovers is how many failovers the nemesis made: their kinds
	// alternate, from one the rng draws, so that a soak with two of them
	// has both (see failoverKind).
	failovers int
	firstKind provision.FailoverKind

	mu      sync.Mutex
	windows []FaultWindow
	current string // the fault in progress, for the progress line
}

func newNemesis(s *soaker) *nemesis {
	return &nemesis{s: s, rng: rand.New(rand.NewPCG(uint64(s.cfg.Seed), 0x4e3e)), kinds: s.cfg.Nemeses}
}

// Current describes the fault in progress, or "".
func (n *nemesis) Current() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.current
}

// Injected counts the faults injected and healed so far.
func (n *nemesis) Injected() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.windows)
}

// Windows returns the faults injected so far.
func (n *nemesis) Windows() []FaultWindow {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.windows)
}

// run injects faults until ctx ends, each healed before the next begins
// and the last healed before it returns.
func (n *nemesis) run(ctx context.Context) {
	if len(n.kinds) == 0 {
		return
	}
	order := slices.Clone(n.kinds)
	for k := 0; ; k++ {
		if k%len(order) == 0 {
			n.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		quiet := time.Duration(500+n.rng.IntN(1500)) * time.Millisecond
		if !wait(ctx, quiet) {
			return
		}
		kind := order[k%len(order)]
		hold := time.Duration(300+n.rng.IntN(1200)) * time.Millisecond
		w := FaultWindow{Kind: kind, Start: n.s.since()}
		n.mu.Lock()
		n.current = kind
		n.mu.Unlock()
		detail, err := n.inject(ctx, kind, hold)
		w.End, w.Detail = n.s.since(), detail
		if err != nil {
			w.Err = err.Error()
			n.s.logf("soak: nemesis %s: %v", kind, err)
		}
		n.mu.Lock()
		n.current = ""
		n.windows = append(n.windows, w)
		n.mu.Unlock()
		if errors.Is(err, errFatal) {
			n.s.fail(err)
			return
		}
	}
}

// errFatal marks a nemesis error after which the run cannot go on: the
// server did not come back from a crash, or the formation did not fail
// over or did not get its secondary back.
var errFatal = errors.New("the soak cannot go on")

// wait waits d or until ctx ends, reporting whether d passed.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// inject does one fault of kind, holds it for hold (or until ctx ends)
// and heals it. Healing never depends on ctx: it uses a context of its
// own, so a fault never outlives the nemesis.
func (n *nemesis) inject(ctx context.Context, kind string, hold time.Duration) (string, error) {
	heal, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	s := n.s
	switch kind {
	case NemesisKill:
		pids, err := s.play.TerminateConnections(ctx)
		return fmt.Sprintf("terminated %d connections of the implementation", len(pids)), err

	case NemesisCutBeforeCommit, NemesisCutAfterCommit:
		at := pgproxy.BeforeCommit
		if kind == NemesisCutAfterCommit {
			at = pgproxy.AfterCommitComplete
		}
		f, err := s.proxy.Arm(pgproxy.Rule{At: at, Action: pgproxy.Cut, Times: 1})
		if err != nil {
			return "", err
		}
		deadline := time.Now().Add(hold)
		for time.Now().Before(deadline) {
			if fired, _ := f.Fired(ctx); fired > 0 {
				return fmt.Sprintf("cut a connection %s", at), nil
			}
			if !wait(ctx, 20*time.Millisecond) {
				break
			}
		}
		// A rule that has not fired yet stays armed: it cuts one later
		// commit, which is no less a fault.
		return fmt.Sprintf("armed a cut %s; it had not fired when the window ended", at), nil

	case NemesisDBRaise, NemesisDBSleep:
		targets := s.upcoming(3, kind == NemesisDBSleep)
		var armed []*faults.Fault
		var names []string
		point := faults.AtEffect
		if n.rng.IntN(2) == 0 && kind == NemesisDBRaise {
			point = faults.AtCommit
		}
		for _, i := range targets {
			p := faults.Plan{Namespace: Namespace, ID: EventID(i), Times: 1, Point: point, Action: faults.Raise}
			if kind == NemesisDBSleep {
				p.Attempt, p.Point, p.Action, p.Sleep = 0, faults.AtEffect, faults.Sleep, 200*time.Millisecond
			}
			f, err := s.play.Arm(ctx, p)
			if err != nil {
				return "", errors.Join(err, disarm(heal, s.play, armed))
			}
			armed = append(armed, f)
			names = append(names, EventID(i))
		}
		// Held until every planned fault fired (its event may be
		// delivered only after the window) or a while longer.
		fired := waitFired(ctx, s.play, armed, hold+3*time.Second, hold)
		what := "raise at " + string(point) + " of attempt 1"
		if kind == NemesisDBSleep {
			what = "sleep 200ms at the effect of every attempt, delivered concurrently,"
		}
		return fmt.Sprintf("%s of %s; %d of %d fired", what, strings.Join(names, ", "), fired, len(armed)), disarm(heal, s.play, armed)

	case NemesisCrash:
		// The crash runs under heal, not ctx: a crash that the end of the
		// load interrupts (pg_ctl killed after its signal was sent) would
		// leave the server down with nobody to restart it.
		if ctx.Err() != nil {
			return "", nil
		}
		c, err := s.run.CrashServer(heal)
		if err != nil {
			return "", fmt.Errorf("%w: crash the server: %w", errFatal, err)
		}
		wait(ctx, hold)
		rec, err := s.run.RestartServer(heal, c)
		if err != nil {
			return "crashed the server", fmt.Errorf("%w: restart after the crash: %w", errFatal, err)
		}
		if p := rec.Problem(); p != "" {
			return rec.String(), fmt.Errorf("%w: %s", errFatal, p)
		}
		return rec.String(), nil

	case NemesisFailover:
		// Under heal too, as a crash: a failover the end of the load
		// interrupted would leave the formation without a secondary, or
		// half way through a switchover.
		if ctx.Err() != nil {
			return "", nil
		}
		return n.failOver(ctx, heal, hold)

	case NemesisPurge:
		cutoff, ok := s.purgeCutoff()
		if !ok {
			return "nothing old enough to purge yet", nil
		}
		removed, err := s.play.Purge(ctx, 1+n.rng.IntN(s.cfg.Instances), cutoff)
		return fmt.Sprintf("purged %d rows claimed before %s", removed, cutoff.Format("15:04:05.000")), err

	case NemesisDestination:
		d := s.play.Destination()
		switch n.rng.IntN(3) {
		case 0:
			if _, err := d.Down(); err != nil {
				return "", err
			}
			wait(ctx, hold)
			d.Up()
			return fmt.Sprintf("destination down for %s", hold.Round(time.Millisecond)), nil
		case 1:
			var names []string
			for _, i := range s.upcoming(3, false) {
				ev := s.gen.event(i, Original)
				if _, err := d.Fail(ev, 1, 503); err != nil {
					return "", err
				}
				names = append(names, ev.ID)
			}
			wait(ctx, hold)
			return "503 to the first request of " + strings.Join(names, ", "), nil
		default:
			var names []string
			for _, i := range s.upcoming(3, false) {
				ev := s.gen.event(i, Original)
				if _, err := d.DropAfterProcess(ev, 1); err != nil {
					return "", err
				}
				names = append(names, ev.ID)
			}
			wait(ctx, hold)
			return "processed, then dropped the answer to, the first request of " + strings.Join(names, ", "), nil
		}
	}
	return "", fmt.Errorf("no such nemesis %q", kind)
}

// failoverKind is the kind of the next failover: the rng draws the first,
// then they alternate, so that every soak with two failovers or more has
// both a controlled one and a hard kill.
func (n *nemesis) failoverKind() provision.FailoverKind {
	if n.failovers == 0 {
		n.firstKind = provision.FailoverControlled
		if n.rng.IntN(2) == 0 {
			n.firstKind = provision.FailoverHardKill
		}
	}
	kind := n.firstKind
	if n.failovers%2 == 1 {
		kind = provision.FailoverControlled
		if n.firstKind == provision.FailoverControlled {
			kind = provision.FailoverHardKill
		}
	}
	n.failovers++
	return kind
}

// failOver fails the formation over, holds the old primary out of it for
// hold (a hard-killed node stays down, a demoted one is left as the
// failover left it), and restores the formation: the old primary rejoins
// as the secondary, and the next fault waits until it has. A failover
// before that would find no standby to promote, and writes would hang
// waiting for a synchronous standby that is not there.
//
// Everything runs under heal, never ctx: the formation must never be left
// half way. Failing to fail over or to restore is fatal for the soak, as a
// crash that did not come back is; a failover whose evidence has a problem
// is an error of the window (it did not happen as planned), and the soak
// goes on.
func (n *nemesis) failOver(ctx, heal context.Context, hold time.Duration) (string, error) {
	s := n.s
	kind := n.failoverKind()
	// The failover and the restoration get a budget each, apart from the
	// window's: under the soak's load on a busy machine a controlled
	// failover (which returns once the old primary follows the new one)
	// and a rejoin after a hard kill (pg_rewind, then catching up) were
	// measured at 19 to 40 s each, far beyond their times on an idle
	// formation.
	foCtx, cancelFo := context.WithTimeout(context.WithoutCancel(ctx), failoverTimeout)
	defer cancelFo()
	// The nemesis heals each fault before the next, so no database-side
	// fault of the soak should be armed here. A disarm that failed at the
	// end of a db-raise or db-sleep window would leave one: it must not
	// fire after the failover on a delivery it was never planned for, and
	// disarming is a write, which the formation takes now, before the
	// failover, and replicates.
	var before []string
	armed, err := s.play.ArmedFaults(heal)
	if err != nil {
		return "", fmt.Errorf("%w: before a %s failover: %w", errFatal, kind, err)
	}
	if armed > 0 {
		if err := s.play.DisarmAll(heal); err != nil {
			return "", fmt.Errorf("%w: disarm the %d database-side faults left armed before a %s failover: %w", errFatal, armed, kind, err)
		}
		before = append(before, fmt.Sprintf("disarmed %d database-side faults left armed", armed))
		s.logf("soak: nemesis failover: %d database-side faults were still armed: disarmed them before the failover", armed)
	}
	fo, err := s.run.FailOver(foCtx, kind)
	if err != nil {
		return describe(before, fmt.Sprintf("%s failover", kind)), fmt.Errorf("%w: %s failover: %w", errFatal, kind, err)
	}
	detail := describe(before, fo.String())
	out := time.Now()
	wait(ctx, hold) // shorter when the load ends
	began := time.Now()
	restore, cancelRestore := context.WithTimeout(context.WithoutCancel(ctx), failoverTimeout)
	defer cancelRestore()
	if err := s.run.RestoreFormation(restore); err != nil {
		return detail, fmt.Errorf("%w: restore the formation after the %s failover: %w", errFatal, kind, err)
	}
	detail += fmt.Sprintf("; the old primary left out for %s, then the formation restored (a primary and a secondary) in %s",
		began.Sub(out).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	if p := fo.Problem(); p != "" {
		return detail, errors.New(p)
	}
	return detail, nil
}

// failoverTimeout bounds a failover, and apart from it the restoration of
// the formation after it.
const failoverTimeout = 2 * time.Minute

// describe joins what the nemesis did before a fault with the fault.
func describe(before []string, what string) string {
	return strings.Join(append(before, what), "; ")
}

// waitFired waits at least hold and until every fault of armed fired, or
// limit passed or ctx ended; it returns how many fired.
func waitFired(ctx context.Context, play *harness.Play, armed []*faults.Fault, limit, hold time.Duration) int {
	start := time.Now()
	for {
		fired := 0
		for _, f := range armed {
			if n, err := play.Fired(ctx, f); err == nil && n > 0 {
				fired++
			}
		}
		elapsed := time.Since(start)
		if (fired == len(armed) && elapsed >= hold) || elapsed >= limit || !wait(ctx, 50*time.Millisecond) {
			return fired
		}
	}
}

func disarm(ctx context.Context, play *harness.Play, armed []*faults.Fault) error {
	var errs []error
	for _, f := range armed {
		errs = append(errs, play.Disarm(ctx, f))
	}
	return errors.Join(errs...)
}
