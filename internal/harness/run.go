package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/connstr"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/internal/shortdur"
)

// Options configure a run.
type Options struct {
	// Provision chooses the database.
	Provision provision.Options
	// DeliveryTimeout bounds one call to Implementation.Deliver. An
	// implementation that does not return in time has hung: the attempt is
	// recorded as timed out and the run goes on.
	DeliveryTimeout time.Duration
	// Logf writes progress lines; nil discards them.
	Logf func(format string, args ...any)
	// RedeliveryPatience is how long the broker goes on redelivering while
	// none of a play's deliveries is acknowledged or refused (see
	// [Play.DeliverUntilTerminal]); 0 means [DefaultRedeliveryPatience].
	RedeliveryPatience time.Duration
	// Seed drives the run's random choices, such as the broker's jitter.
	Seed uint64
}

// DefaultDeliveryTimeout bounds one delivery unless Options say otherwise.
const DefaultDeliveryTimeout = 15 * time.Second

// Run is one harness run against one database.
type Run struct {
	id     string
	server *provision.Server
	admin  *pgxpool.Pool
	keeper *pgx.Conn
	opts   Options
	plays  atomic.Int64

	// acked is set at the run's first acknowledged delivery.
	acked atomic.Bool
	// reached is set when a play closes whose proxy saw an instance
	// connect through it (see ConnectedThroughProxy), applied when a play
	// closes whose ledger holds an effect (see EffectsApplied).
	reached, applied atomic.Bool

	mu    sync.Mutex
	open  map[*Play]struct{} // the plays not closed yet
	fired map[string]int64   // firings by fault kind, see FaultsFired
	// hopelessSince is set when a play's broker gave up while the run had
	// acknowledged nothing; "" until then.
	hopelessSince string
	// unacked is the first play whose broker ran out of patience on an
	// event whose effect was committed, and that event (see
	// noteMissingAck); nil until then.
	unacked *missingAck
	// disrupting counts the open plays that disrupt the server
	// (PlayOptions.DisruptsServer), and calmSince is when the last of them
	// closed: a stall that overlaps one proves nothing of the
	// implementation's own (see calm).
	disrupting int
	calmSince  time.Time
	// stalls are the replication stalls of StallReplication, resumed by
	// the close of every play (see resumeStalls).
	stalls []*provision.ReplicationStall
}

// Start provisions the database, opens the run's keeper connection and drops
// the leftovers of runs that are no longer alive.
func Start(ctx context.Context, opts Options) (_ *Run, err error) {
	if opts.DeliveryTimeout <= 0 {
		opts.DeliveryTimeout = DefaultDeliveryTimeout
	}
	if opts.RedeliveryPatience <= 0 {
		opts.RedeliveryPatience = DefaultRedeliveryPatience
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Provision.Logf == nil {
		opts.Provision.Logf = opts.Logf
	}
	var raw [4]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, fmt.Errorf("run id: %w", err)
	}
	r := &Run{id: hex.EncodeToString(raw[:]), opts: opts, open: map[*Play]struct{}{}, fired: map[string]int64{}}

	r.server, err = provision.Open(ctx, opts.Provision)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r.Close(context.WithoutCancel(ctx))
		}
	}()

	keeperDSN, err := WithApplicationName(r.server.DSN(), r.appName("keeper"))
	if err != nil {
		return nil, err
	}
	if r.keeper, err = pgx.Connect(ctx, keeperDSN); err != nil {
		return nil, fmt.Errorf("connect to %s database: %w", r.server.Kind, err)
	}
	adminDSN, err := WithApplicationName(r.server.DSN(), r.appName("admin"))
	if err != nil {
		return nil, err
	}
	adminCfg, err := pgxpool.ParseConfig(adminDSN)
	if err != nil {
		return nil, fmt.Errorf("connect to %s database: %w", r.server.Kind, err)
	}
	adminCfg.BeforeConnect = r.toCurrentServer
	// Plays run side by side, and each reads the ledger at every
	// acknowledgement and polls the activity of its instances. The pool
	// opens all its connections now and keeps them (see openAll).
	adminCfg.MaxConns, adminCfg.MinConns = adminConns, adminConns
	if r.admin, err = pgxpool.NewWithConfig(ctx, adminCfg); err != nil {
		return nil, fmt.Errorf("connect to %s database: %w", r.server.Kind, err)
	}
	if err := openAll(ctx, r.admin); err != nil {
		return nil, fmt.Errorf("connect to %s database: %w", r.server.Kind, err)
	}
	if err := r.canCreateSchemas(ctx); err != nil {
		return nil, err
	}
	if err := r.dropLeftovers(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// openAll opens every connection pool may hold, before any play runs, and
// returns once they are open. A server named by a DSN is often shared:
// other runs, other tests, the application itself take its connections
// too, and one that has none left refuses a login ("sorry, too many
// clients already"). A pool that connected lazily would meet that refusal
// in the middle of a play, reading a ledger or counting a fault's
// firings, where it would end the play for a reason that is none of the
// implementation's; opened now, the run holds what it needs from its
// start, and a server that cannot give it says so before anything runs.
// The pool keeps them: its MinConns is its MaxConns, so none is closed for
// being idle.
func openAll(ctx context.Context, pool *pgxpool.Pool) error {
	conns := make([]*pgxpool.Conn, 0, pool.Config().MaxConns)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range pool.Config().MaxConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("open the harness's %d connections: %w", pool.Config().MaxConns, err)
		}
		conns = append(conns, c)
	}
	return nil
}

// canCreateSchemas checks the one privilege the harness needs beyond
// connecting: CREATE on the database, for the schema of each play. Without
// it every play would fail alike; this says so once, before any runs.
func (r *Run) canCreateSchemas(ctx context.Context) error {
	var can bool
	var role, database string
	err := r.admin.QueryRow(ctx, `SELECT has_database_privilege(current_database(), 'CREATE'), current_user, current_database()`).
		Scan(&can, &role, &database)
	if err != nil {
		return fmt.Errorf("check the privileges of the harness's role: %w", err)
	}
	if !can {
		return fmt.Errorf("role %q may not create schemas in database %q, and harmless creates one for each play of a fixture: grant it with GRANT CREATE ON DATABASE %s TO %s (see docs/safety.md)",
			role, database, pgx.Identifier{database}.Sanitize(), pgx.Identifier{role}.Sanitize())
	}
	return nil
}

// toCurrentServer sends a new connection of the admin pool to the server's
// address now, which changes when a container comes back from a crash (see
// [Run.RestartServer]).
func (r *Run) toCurrentServer(_ context.Context, cfg *pgx.ConnConfig) error {
	now, err := pgx.ParseConfig(r.server.DSN())
	if err != nil {
		return fmt.Errorf("parse the server's DSN: %w", err)
	}
	cfg.Host, cfg.Port, cfg.Fallbacks = now.Host, now.Port, now.Fallbacks
	return nil
}

// ID is the run's random id.
func (r *Run) ID() string { return r.id }

// Server is the database server of the run.
func (r *Run) Server() *provision.Server { return r.server }

// Admin is the harness's own pool; implementations never get it.
func (r *Run) Admin() *pgxpool.Pool { return r.admin }

// AppNamePrefix is the application_name prefix of every connection the run
// opens.
func (r *Run) AppNamePrefix() string { return "harmless-" + r.id + "-" }

func (r *Run) appName(part string) string { return r.AppNamePrefix() + part }

// dropLeftovers drops the schemas of runs that are gone: the harness's own
// schemas (see [schemaFacts.ownership]) of another run whose keeper
// connection is no longer there, as a run killed before it could clean up
// leaves them. Every other schema whose name starts with harmless_ is left
// in place, with the reason logged.
func (r *Run) dropLeftovers(ctx context.Context) error {
	rows, err := r.admin.Query(ctx, schemaFactsSQL+`WHERE starts_with(n.nspname, 'harmless_') ORDER BY n.nspname`)
	if err != nil {
		return fmt.Errorf("list leftover schemas: %w", err)
	}
	schemas, err := pgx.CollectRows(rows, pgx.RowToStructByName[schemaFacts])
	if err != nil {
		return fmt.Errorf("list leftover schemas: %w", err)
	}
	for _, schema := range schemas {
		id, notOurs := schema.ownership()
		switch {
		case notOurs != "":
			r.opts.Logf("left schema %s in place: %s", schema.Name, notOurs)
			continue
		case id == r.id:
			continue
		}
		var alive bool
		err := r.admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = $1)`,
			"harmless-"+id+"-keeper").Scan(&alive)
		if err != nil {
			return fmt.Errorf("check run %s: %w", id, err)
		}
		if alive {
			r.opts.Logf("left schema %s in place: its run %s is still alive", schema.Name, id)
			continue
		}
		existed, err := dropOwnSchema(ctx, r.admin, schema.Name)
		var refused *notOursError
		switch {
		case errors.As(err, &refused):
			r.opts.Logf("left schema %s in place: %s", schema.Name, refused.reason)
		case err != nil:
			return fmt.Errorf("drop leftover schema of run %s: %w", id, err)
		case existed:
			r.opts.Logf("dropped leftover schema %s of run %s, which is gone", schema.Name, id)
		}
	}
	return nil
}

// ServerVersion reports the server's version string.
func (r *Run) ServerVersion(ctx context.Context) (string, error) {
	var v string
	if err := r.admin.QueryRow(ctx, `SHOW server_version`).Scan(&v); err != nil {
		return "", fmt.Errorf("server version: %w", err)
	}
	return v, nil
}

// Close closes the plays still open, then the run's connections, and
// releases the server. Plays are normally closed one by one as they end;
// one still open here was cut off, e.g. by an interrupt arriving between
// two specs of a Ginkgo Ordered container, which skips the rest of the
// container and with it the cleanup registered by its BeforeAll.
func (r *Run) Close(ctx context.Context) error {
	var errs []error
	for _, s := range r.openPlays() {
		r.opts.Logf("closing play %s, which was left open", s.name)
		if err := s.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close play %s: %w", s.name, err))
		}
	}
	if r.admin != nil {
		if err := closePool(r.admin, poolCloseTimeout); err != nil {
			errs = append(errs, fmt.Errorf("close the harness's connections: %w", err))
		}
	}
	if r.keeper != nil {
		errs = append(errs, r.keeper.Close(ctx))
	}
	if r.server != nil {
		errs = append(errs, r.server.Close(ctx))
	}
	return errors.Join(errs...)
}

// poolCloseTimeout bounds the wait of Close for the harness's own
// connections: every play is closed before, so none is in use but by a bug,
// and a run must end all the same.
const poolCloseTimeout = 10 * time.Second

// closePool closes pool, waiting at most limit. pgxpool's Close waits for
// every connection in use to be given back, without a deadline: one kept
// by a bug would hold the run's end for good. Past limit the pool is left
// to close by itself and its connections end with the process.
func closePool(pool *pgxpool.Pool, limit time.Duration) error {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		pool.Close()
	}()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-closed:
		return nil
	case <-timer.C:
		return fmt.Errorf("%d still in use after %s: left to close with the process", pool.Stat().AcquiredConns(), limit)
	}
}

// NewPlay creates a fresh environment, with a schema of its own, for one
// play of a fixture, or of one variant of it, with adapter. The run names
// its plays s1, s2, ... in turn.
func (r *Run) NewPlay(ctx context.Context, adapter adapters.Adapter) (*Play, error) {
	return r.NewPlayWith(ctx, adapter, PlayOptions{})
}

// PlayOptions change what a play keeps and hands out; the zero value is
// what the fixtures use.
type PlayOptions struct {
	// NoHistory keeps no history of the play's deliveries ([Play.History]
	// is empty): a soak of a million events records each delivery
	// compactly itself, from what [Play.Deliver] returns.
	NoHistory bool
	// SystemClock hands the instances the system clock even when the
	// adapter accepts the harness's: a soak's purges compare claim times
	// with the real time.
	SystemClock bool
	// Title says what the play is in the broker's messages, beside its
	// name s<n>: the fixture and variant it plays, e.g. "double-delivery".
	Title string
	// DisruptsServer marks a play that crashes, restarts or fails over
	// the run's server. Its broker keeps to the play's own patience:
	// while the server is away, or just back, a correct implementation's
	// redeliveries fail for a while, even of events whose effect is
	// committed, until it has reconnected. So no stall of such a play,
	// nor of any play while one is open, counts as evidence that the
	// implementation leaves acknowledgements missing, and none is cut
	// short by that evidence (see [Play.RedeliverUntilTerminal]).
	DisruptsServer bool
}

// NewPlayWith is NewPlay with options.
func (r *Run) NewPlayWith(ctx context.Context, adapter adapters.Adapter, opts PlayOptions) (*Play, error) {
	n := r.plays.Add(1)
	name := fmt.Sprintf("s%d", n)
	s := &Play{
		run:     r,
		adapter: adapter,
		name:    name,
		schema:  fmt.Sprintf("harmless_%s_%s", r.id, name),
		started: time.Now(),
		opts:    opts,
		broker:  newBroker(r.opts.RedeliveryPatience, r.opts.Seed, name),
	}
	r.mu.Lock()
	r.open[s] = struct{}{}
	if opts.DisruptsServer {
		r.disrupting++
	}
	r.mu.Unlock()
	if err := s.install(ctx); err != nil {
		s.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return s, nil
}

// acknowledged records an acknowledged delivery somewhere in the run.
func (r *Run) acknowledged() { r.acked.Store(true) }

// Acknowledged reports whether any delivery of the run was acknowledged.
func (r *Run) Acknowledged() bool { return r.acked.Load() }

// EffectsApplied reports whether the ledger of any play closed so far held
// an effect: the implementation wrote to the database, through some
// connection.
func (r *Run) EffectsApplied() bool { return r.applied.Load() }

// ConnectedThroughProxy reports whether an implementation instance of any
// play, closed or open, ever connected through the listeners of its
// play's proxy. An implementation that acknowledges deliveries without
// ever doing so connects to the server some other way than the DSN it is
// given says, and no fault of the proxy can reach it.
func (r *Run) ConnectedThroughProxy() bool {
	if r.reached.Load() {
		return true
	}
	for _, s := range r.openPlays() {
		if proxy := s.proxy.Load(); proxy != nil && proxy.proxy.Seen("").Opened > 0 {
			return true
		}
	}
	return false
}

// gaveUp records that a play's broker ran out of patience: while the run
// has acknowledged nothing, the implementation is taken to acknowledge
// nothing, and later plays are not waited for (see hopeless).
func (r *Run) gaveUp() {
	if r.acked.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hopelessSince == "" {
		r.hopelessSince = "an earlier play"
	}
}

// hopeless says why the broker should not wait for redeliveries at all,
// "" when it should: the run has acknowledged no delivery, and a play's
// broker has run out of patience already. An implementation that has
// acknowledged no delivery of the run in a whole patience acknowledges
// none (it may refuse odd input, which needs no redelivery); a correct one
// acknowledges its first deliveries long before, so this only makes a run
// of one that acknowledges nothing end in one patience rather than one per
// play.
func (r *Run) hopeless() string {
	if r.acked.Load() {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hopelessSince == "" {
		return ""
	}
	return fmt.Sprintf("no delivery of the run has been acknowledged, and %s ran out of the broker's patience (%s) already, so the broker waits for no more redeliveries until one is", r.hopelessSince, shortdur.Format(r.opts.RedeliveryPatience))
}

// forget removes s from the run's open plays.
func (r *Run) forget(s *Play) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, open := r.open[s]; open && s.opts.DisruptsServer {
		r.disrupting--
		r.calmSince = time.Now()
	}
	delete(r.open, s)
}

// missingAck is the run's evidence that the implementation leaves
// acknowledgements missing: a play whose broker redelivered an event for a
// whole patience without a terminal attempt, while the event's effect was
// committed.
type missingAck struct {
	play  string // the play, as [Play.title] gives it
	event adapters.Event
}

// noteMissingAck records that the broker of play ran out of patience on
// ev, whose effect was committed, unless the run has such evidence
// already: the first is kept.
func (r *Run) noteMissingAck(play string, ev adapters.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unacked == nil {
		r.unacked = &missingAck{play: play, event: ev}
	}
}

// missingAcks says, when the run has the evidence of noteMissingAck, what
// it is and what the broker makes of it; "" while it has none.
//
// An implementation that has been redelivered an event whose effect was
// committed for a whole patience, without answering Duplicate (or
// anything a broker stops at), does not answer such redeliveries: it errs
// on them, by design or by a bug (a unique violation passed up as an
// error, say). Waiting a whole patience again in each later play, for an
// acknowledgement the implementation has shown it does not give, changes
// no verdict: the rules judge the missing acknowledgement, not how long it
// was awaited. A correct implementation never gives this evidence: the
// effect it commits is answered Duplicate on the next redelivery.
func (r *Run) missingAcks() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unacked == nil {
		return ""
	}
	return fmt.Sprintf("in %s the broker redelivered such an event, %s, for a whole patience (%s) without an acknowledgement, so it waits no more for acknowledgements that are only missing in this run",
		r.unacked.play, r.unacked.event, shortdur.Format(r.opts.RedeliveryPatience))
}

// calm reports whether no play that disrupts the server
// (PlayOptions.DisruptsServer) is open, nor closed after since: what the
// implementation did since then is its own doing, not the aftermath of a
// crash or a failover.
func (r *Run) calm(since time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.disrupting == 0 && !r.calmSince.After(since)
}

// openPlays returns the plays not closed yet.
func (r *Run) openPlays() []*Play {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Collect(maps.Keys(r.open))
}

// adminConns is the size of the run's admin pool: enough for the plays
// that run side by side to read the ledger and the server's activity
// without queueing behind one another.
const adminConns = 8

// OwnConnections is how many connections a run holds from its start to
// its end, whatever it plays: its admin pool's and the keeper.
const OwnConnections = adminConns + 1

// FreeConnections is how many more connections the server accepts from the
// run's role now: its max_connections, less the slots reserved for
// superusers unless the role is one, less those open. The engine sizes
// how many plays run side by side from it.
func (r *Run) FreeConnections(ctx context.Context) (int, error) {
	var free int
	err := r.admin.QueryRow(ctx, `SELECT current_setting('max_connections')::int
	- CASE WHEN (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN 0
	       ELSE current_setting('superuser_reserved_connections')::int END
	- (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int`).Scan(&free)
	if err != nil {
		return 0, fmt.Errorf("count the server's free connections: %w", err)
	}
	return free, nil
}

// WithApplicationName returns dsn with its application_name set to name. It
// understands both URL and keyword/value connection strings.
func WithApplicationName(dsn, name string) (string, error) {
	if _, err := pgx.ParseConfig(dsn); err != nil {
		return "", fmt.Errorf("invalid connection string: %w", err)
	}
	out, err := connstr.SetParam(dsn, "application_name", name)
	if err != nil {
		return "", fmt.Errorf("invalid connection string: %w", err)
	}
	return out, nil
}
