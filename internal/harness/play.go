package harness

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/internal/backends"
	"github.com/harmless-dev/harmless/internal/hooks"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// Play is the environment of one play of a fixture (or of one variant of
// it): its own schema with the ledger and the fault points, its Go-level
// hooks, the implementation instances it built and the history of every
// delivery it made. The suite makes one play of each variant of a fixture
// and judges one or more rules on it; those rules (Ginkgo specs) share the
// play and all it gathered, and the play ends after the last of them.
type Play struct {
	run     *Run
	adapter adapters.Adapter
	name    string
	schema  string
	started time.Time
	opts    PlayOptions
	hooks   *Hooks
	clock   adapters.Clock
	manual  *ManualClock // the clock, when the adapter accepts the harness's; it runs
	// proxy stands between the instances and the server, made with the
	// first instance's environment (see useProxy). Atomic, not under mu:
	// Instance holds mu while it builds an instance, and the activity of
	// the others must be readable meanwhile.
	proxy atomic.Pointer[Proxy]
	dest  *Destination // the external destination, once OpenDestination started it; guarded by mu
	// holds are the write holds taken and not yet released, guarded by
	// mu: Close releases them first, so that a play stopped between
	// HoldWrites and Release (an interrupt) neither leaves the harness's
	// own connection idle in its transaction nor has its DROP SCHEMA wait
	// behind that transaction's lock.
	holds map[*WriteHold]struct{}

	// faultsMu guards the faults the play armed, counted when it closes:
	// every one in armed, the database-side ones in dbFaults too, to be
	// disarmed and recounted around a crash.
	faultsMu sync.Mutex
	armed    []faults.Armed
	dbFaults []*dbFault
	// failedArms counts the calls of Arm that failed: each may have left
	// an evidence sequence (see faultplan.CountArmed).
	failedArms int
	tallied    bool // the run has the counts

	budget budget  // see StartBudget
	broker *broker // the play's redelivery state, see DeliverUntilTerminal

	mu        sync.Mutex
	created   bool // the play created its schema and has not dropped it
	instances map[int]adapters.Implementation
	// stoppedCrashes keeps the crashes of the instances Stop forgot.
	stoppedCrashes map[int][]string
	attempts       map[eventKey]int
	history        []Attempt
	pending        int // deliveries in flight
	// inFlight counts the deliveries in flight per event, and released is
	// closed (and replaced) whenever one of them ends: a redelivery waits
	// on it for the event's other deliveries to end (see
	// DeliverUntilTerminal).
	inFlight map[eventKey]int
	released chan struct{}
}

type eventKey struct{ namespace, id string }

func (s *Play) install(ctx context.Context) error {
	s.hooks = &Hooks{hooks: hooks.NewSet(), play: s}
	s.clock = SystemClock{}
	if s.adapter.Declares.AcceptsClock && !s.opts.SystemClock {
		s.manual = NewRunningClock(ClockStart(s.run.opts.Seed, s.name))
		s.clock = s.manual
	}
	s.instances = map[int]adapters.Implementation{}
	s.attempts = map[eventKey]int{}
	s.inFlight = map[eventKey]int{}
	s.released = make(chan struct{})
	// One transaction: the schema never exists half installed, nor without
	// the marker by which a later run tells it from a user's schema of a
	// similar name.
	//
	// Once CREATE SCHEMA has succeeded in it, the play counts the schema
	// as its own, whether or not the transaction then commits: a COMMIT
	// whose answer is lost (the run interrupted, the connection cut) may
	// have committed it, and Close drops it only if it exists and carries
	// this play's marker.
	err := pgx.BeginFunc(ctx, s.run.admin, func(tx pgx.Tx) error {
		quoted := pgx.Identifier{s.schema}.Sanitize()
		if _, err := tx.Exec(ctx, `CREATE SCHEMA `+quoted); err != nil {
			return fmt.Errorf("create schema %s: %w", s.schema, err)
		}
		s.mu.Lock()
		s.created = true
		s.mu.Unlock()
		// COMMENT takes no parameters: the marker is quoted as a literal.
		marker := schemaMarker(s.run.id, s.name)
		if _, err := tx.Exec(ctx, `COMMENT ON SCHEMA `+quoted+` IS `+quoteLiteral(marker)); err != nil {
			return fmt.Errorf("mark schema %s as harmless's: %w", s.schema, err)
		}
		if err := ledger.Install(ctx, tx, s.schema); err != nil {
			return err
		}
		if err := faults.Install(ctx, tx, s.schema); err != nil {
			return fmt.Errorf("install fault points: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return nil
}

// quoteLiteral quotes s as an SQL string literal. It is for the harness's
// markers, made of letters, digits and spaces only: what it does not handle
// (a backslash with standard_conforming_strings off) never occurs there.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Clock returns the clock the play's instances get and, when the adapter
// accepts the harness's clock, the manual clock behind it (else nil).
func (s *Play) Clock() (clock adapters.Clock, manual *ManualClock) { return s.clock, s.manual }

// Schema is the play's schema.
func (s *Play) Schema() string { return s.schema }

// AppNamePrefix is the application_name prefix of the DSNs the play's
// implementation instances are given: a courtesy to whoever reads
// pg_stat_activity, never how the harness recognises an instance's
// connections (see [ProxyClient]).
func (s *Play) AppNamePrefix() string { return s.run.AppNamePrefix() + s.name + "-" }

// title names the play in the broker's messages: its name, and what it
// plays when PlayOptions.Title says.
func (s *Play) title() string {
	if s.opts.Title == "" {
		return "play " + s.name
	}
	return fmt.Sprintf("play %s (%s)", s.name, s.opts.Title)
}

// Adapter is the adapter under test.
func (s *Play) Adapter() adapters.Adapter { return s.adapter }

// Hooks are the play's Go-level fault hooks, called by the effect. The
// run counts the firings of the faults armed on them (see
// [Run.FaultsFired]).
func (s *Play) Hooks() *Hooks { return s.hooks }

// Arm plans a database-side fault in the play's schema. The run counts its
// firings when the play closes (see [Run.FaultsFired]). It is the only way
// to arm one: Close fails when the schema holds a fault it did not arm.
func (s *Play) Arm(ctx context.Context, p faults.Plan) (*faults.Fault, error) {
	f, err := faults.Arm(ctx, s.run.admin, s.schema, p)
	if err != nil {
		s.faultsMu.Lock()
		s.failedArms++
		s.faultsMu.Unlock()
		return nil, err
	}
	d := &dbFault{fault: f}
	s.faultsMu.Lock()
	defer s.faultsMu.Unlock()
	s.dbFaults = append(s.dbFaults, d)
	s.armed = append(s.armed, d)
	return f, nil
}

// Disarm disarms a database-side fault (see [faults.Fault.Disarm]): it never
// fires again, and its firings so far are still counted.
func (s *Play) Disarm(ctx context.Context, f *faults.Fault) error {
	return f.Disarm(ctx)
}

// Fired reports how often a database-side fault fired. For a fault armed
// with [Play.Arm] it corrects for crashes of the server, which leave the
// fault's evidence unreliable (see [Run.FaultsFired]).
func (s *Play) Fired(ctx context.Context, f *faults.Fault) (int64, error) {
	s.faultsMu.Lock()
	defer s.faultsMu.Unlock()
	for _, d := range s.dbFaults {
		if d.fault == f {
			return d.Fired(ctx)
		}
	}
	return f.Fired(ctx)
}

// AllEffects returns every effect in the play's ledger, of any event.
func (s *Play) AllEffects(ctx context.Context) ([]ledger.Entry, error) {
	return ledger.All(ctx, s.run.admin, s.schema)
}

// Effects returns the ledger's effects of ev.
func (s *Play) Effects(ctx context.Context, ev adapters.Event) ([]ledger.Entry, error) {
	return ledger.Entries(ctx, s.run.admin, s.schema, ev.Namespace, ev.ID)
}

// Env is the environment handed to instance n of the implementation.
func (s *Play) Env(n int) (adapters.Env, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.env(n)
}

// env is Env for a caller that holds s.mu.
func (s *Play) env(n int) (adapters.Env, error) {
	through, err := s.instanceDSN(n)
	if err != nil {
		return adapters.Env{}, err
	}
	// A courtesy: the implementation may name its connections as it likes.
	dsn, err := WithApplicationName(through, fmt.Sprintf("%si%d", s.AppNamePrefix(), n))
	if err != nil {
		return adapters.Env{}, err
	}
	return adapters.Env{
		DSN:      dsn,
		Schema:   s.schema,
		Effect:   ledger.Effect(s.schema, s.hooks.Effect),
		Clock:    s.clock,
		Instance: n,
		Logf:     s.run.opts.Logf,
		// One destination per play, for every instance: the plays'
		// records never mix.
		Destination: s.destinationURL(),
	}, nil
}

// Instance returns implementation instance n (from 1), building it with the
// adapter's factory the first time. Instances are built one at a time.
func (s *Play) Instance(ctx context.Context, n int) (adapters.Implementation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if impl, ok := s.instances[n]; ok {
		return impl, nil
	}
	env, err := s.env(n)
	if err != nil {
		return nil, err
	}
	ctx, release, ok := s.bounded(ctx)
	defer release()
	if !ok {
		return nil, fmt.Errorf("build instance %d of %s: %w", n, s.adapter.Name, ErrBudgetExpired)
	}
	impl, err := guardFactory(ctx, s.adapter, env, s.run.opts.DeliveryTimeout)
	if err != nil {
		return nil, fmt.Errorf("build instance %d of %s: %w", n, s.adapter.Name, err)
	}
	s.instances[n] = impl
	return impl, nil
}

// crashReporter is implemented by instances that run in processes the
// harness supervises (an exec pool): Crashes lists every failure of one
// of their processes so far, which the harness restarted.
type crashReporter interface{ Crashes() []string }

// processCrashes counts the failures of instance n's processes so far
// (see crashReporter); 0 for an instance not built, or one that runs in
// the harness's own process.
func (s *Play) processCrashes(n int) int {
	s.mu.Lock()
	impl := s.instances[n]
	s.mu.Unlock()
	if r, ok := impl.(crashReporter); ok {
		return len(r.Crashes())
	}
	return 0
}

// CrashesOf returns the crashes of instance n in the play: each failure of
// one of its processes (an exec pool's, see crashReporter) and each
// delivery to it that panicked, unless the panic was one the harness
// injected (an in-process implementation's panic would crash a real
// service's process).
func (s *Play) CrashesOf(n int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	crashes := slices.Clone(s.stoppedCrashes[n])
	if r, ok := s.instances[n].(crashReporter); ok {
		crashes = append(crashes, r.Crashes()...)
	}
	for _, a := range s.history {
		if c, ok := PanicCrash(a); ok && a.Instance == n {
			crashes = append(crashes, c)
		}
	}
	return crashes
}

// PanicCrash describes attempt a as a crash when its delivery panicked,
// unless the panic was one the harness injected: a crash of an in-process
// implementation, as [Play.CrashesOf] counts it. A caller that keeps no
// history (PlayOptions.NoHistory) counts them with it as deliveries end.
func PanicCrash(a Attempt) (string, bool) {
	if !errors.Is(a.Err, ErrPanicked) || errors.Is(a.Err, hooks.ErrInjected) {
		return "", false
	}
	return fmt.Sprintf("the delivery of %s attempt %d panicked: %s", a.Delivery.Event, a.Delivery.Attempt, firstLine(a.Err.Error())), true
}

// Crashes returns the crashes of every instance of the play (see
// [Play.CrashesOf]), by instance.
func (s *Play) Crashes() []string {
	var all []string
	for _, n := range s.instanceNumbers() {
		all = append(all, s.CrashesOf(n)...)
	}
	return all
}

// CrashCounts returns how many crashes each instance of the play had, and
// the first of each; instances without a crash are left out.
func (s *Play) CrashCounts() map[int][]string {
	counts := map[int][]string{}
	for _, n := range s.instanceNumbers() {
		if c := s.CrashesOf(n); len(c) > 0 {
			counts[n] = c
		}
	}
	return counts
}

// instanceNumbers lists the instances the play built or stopped, sorted.
func (s *Play) instanceNumbers() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[int]bool{}
	for n := range s.instances {
		seen[n] = true
	}
	for n := range s.stoppedCrashes {
		seen[n] = true
	}
	for _, a := range s.history {
		seen[a.Instance] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

// Unacknowledged says, when none of the play's deliveries was
// acknowledged, how they ended: "" when one was, or none was made.
func (s *Play) Unacknowledged() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	refused := 0
	var first *Attempt
	for i, a := range s.history {
		switch {
		case a.Acked():
			return ""
		case a.Terminal():
			refused++
		case first == nil || a.Started < first.Started:
			// The history is in the order deliveries ended: the
			// first error is the delivery that started first.
			first = &s.history[i]
		}
	}
	if len(s.history) == 0 || first == nil {
		return ""
	}
	msg := fmt.Sprintf("none of the play's %d deliveries was acknowledged", len(s.history))
	if refused > 0 {
		msg += fmt.Sprintf(" (%d were refused as invalid input or a conflict)", refused)
	}
	return msg + fmt.Sprintf("; the first error, of attempt %d of %s: %s", first.Delivery.Attempt, first.Delivery.Event, firstLine(first.Err.Error()))
}

// StateRows counts the rows the implementation stores in the play's schema:
// every table there but the harness's own. It is how the harness sees
// deduplication state without knowing the implementation's tables.
func (s *Play) StateRows(ctx context.Context) (int64, error) {
	tables, err := s.StateTables(ctx)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, table := range tables {
		var n int64
		if err := s.run.admin.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			return 0, fmt.Errorf("count rows of %s: %w", table, err)
		}
		total += n
	}
	return total, nil
}

// StateTables lists the tables the implementation keeps in the play's
// schema, every table there but the harness's own, each quoted and
// schema-qualified.
func (s *Play) StateTables(ctx context.Context) ([]string, error) {
	rows, err := s.run.admin.Query(ctx, `SELECT format('%I.%I', schemaname, tablename) FROM pg_tables
WHERE schemaname = $1 AND tablename NOT LIKE 'harmless\_%' ORDER BY tablename`, s.schema)
	if err != nil {
		return nil, fmt.Errorf("list the implementation's tables: %w", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list the implementation's tables: %w", err)
	}
	return tables, nil
}

// Purge asks instance n to purge the state of events claimed before cutoff.
// It never panics and never hangs, as Deliver.
func (s *Play) Purge(ctx context.Context, n int, cutoff time.Time) (int64, error) {
	ctx, release, ok := s.bounded(ctx)
	defer release()
	if !ok {
		return 0, fmt.Errorf("Purge(%s): %w", cutoff.Format(time.RFC3339Nano), ErrBudgetExpired)
	}
	impl, err := s.Instance(ctx, n)
	if err != nil {
		return 0, err
	}
	purger, ok := impl.(adapters.Purger)
	if !ok {
		return 0, fmt.Errorf("%s does not implement adapters.Purger, so its state can never be removed", s.adapter.Name)
	}
	removed, err := guard(ctx, s.run.opts.DeliveryTimeout, func(ctx context.Context) (int64, error) {
		return purger.Purge(ctx, cutoff)
	})
	if err != nil {
		return 0, fmt.Errorf("Purge(%s): %w", cutoff.Format(time.RFC3339Nano), err)
	}
	return removed, nil
}

// Close closes the play's instances, ends any connection they left behind
// (see [Play.closeProxy]), adds the firings of the faults the play armed to the run's counts (see
// [Run.FaultsFired]) and drops the play's schema, if it is still the
// harness's (see [dropOwnSchema]).
func (s *Play) Close(ctx context.Context) error {
	s.run.forget(s)
	s.stopBudget()
	var errs []error
	s.mu.Lock()
	instances := s.instances
	s.instances = nil
	holds := slices.Collect(maps.Keys(s.holds))
	s.mu.Unlock()
	for _, h := range holds {
		if err := h.Release(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	// Likewise a replication stall, for the writes below.
	if err := s.run.resumeStalls(); err != nil {
		errs = append(errs, err)
	}
	for n, impl := range instances {
		if err := guardClose(ctx, impl, s.run.opts.DeliveryTimeout); err != nil {
			errs = append(errs, fmt.Errorf("close instance %d: %w", n, err))
		}
	}
	// After the instances: a relay still sending when its instance closes
	// must not see the destination vanish first.
	if err := s.closeDestination(); err != nil {
		errs = append(errs, err)
	}
	if err := s.closeProxy(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := s.tally(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := s.noteEffects(ctx); err != nil {
		errs = append(errs, err)
	}
	// Only a schema this play created, and only while it still carries the
	// marker and belongs to the harness's role: a schema of that name that
	// already existed (CREATE SCHEMA failed on it) is someone else's.
	s.mu.Lock()
	created := s.created
	s.mu.Unlock()
	if created {
		var notOurs *notOursError
		_, err := dropOwnSchema(ctx, s.run.admin, s.schema)
		switch {
		case errors.As(err, &notOurs):
			errs = append(errs, fmt.Errorf("left schema %s in place: %s", s.schema, notOurs.reason))
		case err != nil:
			errs = append(errs, err)
		default:
			s.mu.Lock()
			s.created = false
			s.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// Started is when the play began: the attempts' Started and Ended are
// offsets from it.
func (s *Play) Started() time.Time { return s.started }

// closeProxy ends the connections the play's instances left behind: it
// closes the play's proxy, which cuts every connection through it, and
// then terminates the backends of those connections that are still there
// (one busy in a statement notices its client has gone only when the
// statement ends), of the run's role only, and waits until they are gone.
// The backends are pinned by pid and start time before the cut (see
// [backends.Backends]), so that a pid the system gives to another backend
// meanwhile is never terminated. A connection an instance opened around
// the proxy is not the harness's to end. It also notes, for the run,
// whether an instance ever connected through the proxy.
func (s *Play) closeProxy(ctx context.Context) error {
	proxy := s.proxy.Load()
	if proxy == nil {
		return nil
	}
	if proxy.proxy.Seen("").Opened > 0 {
		s.run.reached.Store(true)
	}
	pinned, err := backends.Backends(ctx, s.run.admin, s.instancePIDs()...)
	if err != nil {
		return fmt.Errorf("close the play's proxy: %w", err)
	}
	if err := proxy.proxy.Close(); err != nil {
		return fmt.Errorf("close the play's proxy: %w", err)
	}
	if _, err := backends.Terminate(ctx, s.run.admin, pinned...); err != nil {
		return fmt.Errorf("end the backends the play's instances left: %w", err)
	}
	return nil
}

// noteEffects notes, for the run, whether the play's ledger holds an
// effect (see [Run.EffectsApplied]), until one play's does.
func (s *Play) noteEffects(ctx context.Context) error {
	s.mu.Lock()
	created := s.created
	s.mu.Unlock()
	if !created || s.run.applied.Load() {
		return nil
	}
	var held bool
	if err := s.run.admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+ledger.Table(s.schema)+`)`).Scan(&held); err != nil {
		return fmt.Errorf("look for the play's effects: %w", err)
	}
	if held {
		s.run.applied.Store(true)
	}
	return nil
}
