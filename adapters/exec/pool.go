package exec

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/exec/protocol"
	"github.com/harmless-dev/harmless/internal/connstr"
	"github.com/harmless-dev/harmless/internal/effect"
	"github.com/harmless-dev/harmless/internal/redact"
)

// pool is one implementation instance: its child processes.
// It sends each request to a process with a free slot and starts another
// process when every slot is taken, so a child that handles one request at
// a time still sees real concurrency.
//
// The pool supervises its processes, as systemd or Kubernetes supervise a
// consumer: a process that exits, crashes, breaks the protocol, stops
// reading or is wedged (it leaves a deliver or purge unanswered until the
// request's deadline, see [wedges]) is killed and removed, what it had in
// flight fails unacknowledged (the
// broker redelivers it), and the next request that needs a process starts
// a new one. Every such failure is recorded (see [pool.Crashes]); the
// instance itself lives on. Restarts are paced (see [restartDelay] and
// [crashLoopLimit]), so a child that crashes on every request or before it
// answers hello costs a bounded number of processes, and its requests fail
// quickly.
type pool struct {
	cfg    Config
	info   Info
	env    adapters.Env
	effect effect.Effect // the harness's effect behind env.Effect
	setup  protocol.SetupParams
	// secrets holds the password of the DSN the children are given: the
	// quotes of their stderr mask it.
	secrets *redact.Redactor

	mu        sync.Mutex
	procs     []*member
	launching map[*process]bool // processes grow has started and not yet added to procs
	starting  int               // processes being started
	waiting   int               // callers waiting for a slot or a start
	started   int               // processes ever started, for labels
	freed     chan struct{}     // closed and replaced when a slot frees up
	closing   chan struct{}     // closed by Close and Abort: ends the restart delay
	closed    bool
	aborted   bool // Abort killed the processes; implies closed
	noDrain   bool // the child answered drain "unsupported"

	crashes     []crash
	lastFailure time.Time // when a process last crashed or failed to start
	startErr    error     // why the last start failed; nil after one succeeded
	attempt     *attempt  // the start under way while starts are on probation
	// streak counts the rounds of processes that crashed since a request
	// was last answered: a crash counts when its process started after
	// mark, the time of the last answer or counted crash, so processes
	// that crash together (a server crash ends every connection) count
	// once, and each restart that crashes again counts.
	streak int
	mark   time.Time
}

// member is a process of the pool with its request slots.
type member struct {
	*process
	slots chan struct{}
}

// crash is one failure of a process of the pool. Its description is read
// from the process until the process's stderr has ended, and kept then.
type crash struct {
	at   time.Time
	pid  int
	proc *process // nil once text is final
	text string
}

// attempt is a start that other callers wait for, rather than starting
// processes of their own, because starts are on probation: the start
// before it failed, or the pool is in a crash loop.
type attempt struct {
	done  chan struct{} // closed when the start has ended
	tried bool          // whether the process was started; false if the restart delay was cut short
	err   error         // why the start failed, when tried
}

// restartDelay is how long after a process of the pool crashed, or failed
// to start, the pool waits before it starts another: systemd's default
// RestartSec. It costs a child that crashed once a tenth of a second of a
// redelivery. While the last start failed, the pool also starts one
// process at a time, and the callers that need one wait for its outcome
// (see [pool.acquire]).
const restartDelay = 100 * time.Millisecond

// crashLoopLimit and crashLoopBackoff stop a crash loop, as systemd's
// start limit and Kubernetes's CrashLoopBackOff do: once crashLoopLimit
// rounds of processes in a row crashed without a request answered in
// between (see pool.streak), the pool starts no process until
// crashLoopBackoff after the last failure, and then one at a time. A
// request that needs a process meanwhile fails at once, unacknowledged,
// with the last crash, so a child that crashes on every request is judged
// in seconds rather than minutes, and costs one process a second.
// A child that crashes now and then, or whose processes crash together
// once, never reaches the limit.
const (
	crashLoopLimit   = 3
	crashLoopBackoff = time.Second
)

func newPool(ctx context.Context, cfg Config, info Info, env adapters.Env) (*pool, error) {
	// The child runs the effect's statement itself, so the pool needs the
	// statement, which only the harness's own effect carries.
	eff, ok := effect.Of(env.Effect)
	if !ok {
		return nil, fmt.Errorf("exec: the environment's effect (%T) was not built by the harmless harness; an exec adapter runs only under it", env.Effect)
	}
	conn, err := connectionOf(env.DSN)
	if err != nil {
		return nil, fmt.Errorf("exec: the instance's DSN: %w", err)
	}
	p := &pool{
		cfg:       cfg,
		info:      info,
		env:       env,
		effect:    eff,
		freed:     make(chan struct{}),
		closing:   make(chan struct{}),
		launching: map[*process]bool{},
		secrets:   redact.New(),
		setup: protocol.SetupParams{
			Instance:    env.Instance,
			DSN:         env.DSN,
			Connection:  conn,
			Schema:      env.Schema,
			Effect:      protocol.EffectSpec{SQL: eff.SQL()},
			Destination: env.Destination,
		},
	}
	p.secrets.AddDSN(env.DSN)
	// The same as the DSN's, but setup shows them as fields too: masked
	// whatever redact.Passwords makes of the DSN.
	p.secrets.Add(conn.Password)
	p.secrets.Add(conn.Parameters["sslpassword"])
	for _, param := range effect.Params() {
		p.setup.Effect.Params = append(p.setup.Effect.Params, protocol.EffectParam{Name: param.Name, Type: param.Type})
	}
	// The first process starts now, so a child that cannot start fails the
	// instance's construction, where the harness reports it.
	m, err := p.grow(ctx)
	if err != nil {
		return nil, err
	}
	<-m.slots // grow hands the new process over with a slot taken
	return p, nil
}

// connectionOf is setup's connection: dsn in parts, read from its text
// alone (see [connstr.PartsOf]).
func connectionOf(dsn string) (protocol.Connection, error) {
	parts, err := connstr.PartsOf(dsn)
	if err != nil {
		return protocol.Connection{}, err
	}
	return protocol.Connection{
		Hosts:      parts.Hosts,
		Ports:      parts.Ports,
		User:       parts.User,
		Password:   parts.Password,
		Database:   parts.Database,
		Parameters: parts.Params,
	}, nil
}

// grow starts one more process, runs hello and setup, and adds it to the
// pool with one slot taken for the caller. A process that fails to start
// is gone: grow kills it or shuts it down, records its crash if it
// crashed, and returns why.
func (p *pool) grow(ctx context.Context) (*member, error) {
	p.mu.Lock()
	p.started++
	label := fmt.Sprintf("process %d of instance %d", p.started, p.env.Instance)
	p.mu.Unlock()
	proc, err := launch(p.cfg, p.env.Instance, label, p.secrets)
	if err != nil {
		return nil, err
	}
	// Until it joins procs, the process is in launching, where Close and
	// Abort find and kill it; one launched after them is killed here.
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		reason := errClosing
		if p.aborted {
			reason = errAborted
		}
		proc.stop(reason)
		if err := proc.awaitExit(ctx); err != nil {
			return nil, err
		}
		return nil, errClosed
	}
	p.launching[proc] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.launching, proc)
		p.mu.Unlock()
	}()
	hello, err := handshake(ctx, proc)
	if err == nil && !hello.sameAs(p.info) {
		err = fmt.Errorf("%s declares %s, but the probe declared %s; every process must declare the same", label, describe(hello), describe(p.info))
	}
	if err == nil {
		err = proc.request(ctx, protocol.MethodSetup, p.setup, nil)
	}
	if err != nil {
		p.discard(ctx, proc, err)
		return nil, err
	}
	m := &member{process: proc, slots: make(chan struct{}, p.info.MaxInFlight)}
	m.slots <- struct{}{}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed { // Close or Abort found it in launching and killed it
		return nil, errClosed
	}
	p.procs = append(p.procs, m)
	return m, nil
}

// discard ends proc, which failed to start with err: a process that
// failed is dead already, and its crash is recorded; one that did not
// answer in time is killed; one that answered hello or setup with an
// error, or declared otherwise, is shut down, within the shutdown timeout.
func (p *pool) discard(ctx context.Context, proc *process, err error) {
	switch {
	case errors.Is(err, errProcessFailed):
		p.mu.Lock()
		if !p.closed {
			p.recordLocked(proc)
		}
		p.mu.Unlock()
	case errors.Is(err, errNoAnswer):
		proc.stop(errStartDeadline)
	default:
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.shutdownWait())
		defer cancel()
		_ = proc.shutdown(sctx)
	}
}

var errClosed = errors.New("the instance is closed")

// An instance drains its children's external effects, can be stopped
// abruptly and reports its processes' crashes; the harness looks for all
// three.
var (
	_ adapters.Drainer                          = (*pool)(nil)
	_ interface{ Abort(context.Context) error } = (*pool)(nil)
	_ interface{ Crashes() []string }           = (*pool)(nil)
)

// Crashes returns every failure of one of the instance's processes so far,
// oldest first: one line each, with the process's label, when and how it
// failed (it exited, its stdout broke the protocol, quoting the offending
// line, it stopped reading, it left a deliver or purge unanswered until
// the request's deadline and was killed for it), and the first lines of
// its stderr's last crash report (see [stderrQuote.Excerpt]), the DSN's
// secrets masked. A process that failed to start counts when it failed
// so, not when it answered hello or setup with an error. The processes
// the harness kills for reasons of its own are not crashes: Abort's,
// those Close stops, one still starting at the deadline of the request
// that needed it, and one that stopped reading in the middle of the line
// of a request other than deliver and purge until the deadline.
func (p *pool) Crashes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.reapLocked()
	}
	out := make([]string, len(p.crashes))
	for i := range p.crashes {
		out[i] = p.describeLocked(i)
	}
	return out
}

// describeLocked describes crash i. The caller holds p.mu.
func (p *pool) describeLocked(i int) string {
	c := &p.crashes[i]
	if c.proc != nil {
		c.text = c.proc.crashReport()
		select {
		case <-c.proc.stderrDone: // the description is final
			c.proc = nil
		default:
		}
	}
	return c.text
}

// reapLocked removes the processes that have failed from the pool and
// records their crashes. The caller holds p.mu.
func (p *pool) reapLocked() {
	var live []*member
	for i, m := range p.procs {
		select {
		case <-m.failed:
			if live == nil {
				live = append(make([]*member, 0, len(p.procs)), p.procs[:i]...)
			}
			p.recordLocked(m.process)
		default:
			if live != nil {
				live = append(live, m)
			}
		}
	}
	if live != nil {
		p.procs = live
	}
}

// recordLocked records proc's failure among the instance's crashes unless
// the harness killed it. The caller holds p.mu.
func (p *pool) recordLocked(proc *process) {
	if !proc.crashed() {
		return
	}
	c := crash{at: proc.failedAt, pid: proc.cmd.Process.Pid, proc: proc}
	i, _ := slices.BinarySearchFunc(p.crashes, c.at, func(c crash, at time.Time) int {
		if c.at.After(at) {
			return 1
		}
		return -1 // equal times keep the order they were recorded in
	})
	p.crashes = slices.Insert(p.crashes, i, c)
	if c.at.After(p.lastFailure) {
		p.lastFailure = c.at
	}
	if proc.startedAt.After(p.mark) {
		p.streak++
		p.mark = c.at
	}
}

// servedLocked notes that a process answered a request: the child works,
// and a crash loop, if any, is over. The caller holds p.mu.
func (p *pool) servedLocked() {
	p.streak, p.mark = 0, time.Now()
}

// crashLoopLocked returns the error of a request that needs a process
// while the pool backs off a crash loop, or nil. The caller holds p.mu.
func (p *pool) crashLoopLocked() error {
	if p.streak < crashLoopLimit || len(p.crashes) == 0 {
		return nil
	}
	until := p.lastFailure.Add(crashLoopBackoff)
	if !time.Now().Before(until) {
		return nil
	}
	return fmt.Errorf("%w: instance %d is in a crash loop and starts no process until %s: %d rounds of its processes crashed without a request answered in between; the last crash: %s",
		errProcessFailed, p.env.Instance, until.UTC().Format(crashTime), p.streak, p.describeLocked(len(p.crashes)-1))
}

// acquire returns a process with a slot taken for one request. When every
// slot is taken it starts another process, unless the processes already
// starting have spare slots for every caller already waiting. While starts
// are on probation (the last start failed, or the pool is in a crash
// loop), only one process starts at a time: the other callers that need
// one wait for it, and fail with its error if it fails to start. While the
// pool backs off a crash loop, it fails at once.
func (p *pool) acquire(ctx context.Context) (*member, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, errClosed
		}
		p.reapLocked()
		for _, m := range p.procs {
			select {
			case m.slots <- struct{}{}:
				p.mu.Unlock()
				return m, nil
			default:
			}
		}
		if a := p.attempt; a != nil {
			p.waiting++
			p.mu.Unlock()
			var err error
			select {
			case <-a.done:
				if a.tried {
					err = a.err
				}
			case <-ctx.Done():
				err = fmt.Errorf("%w: instance %d was starting a process, one at a time after processes failed, until the deadline: %w", errNoAnswer, p.env.Instance, context.Cause(ctx))
			}
			p.mu.Lock()
			p.waiting--
			p.mu.Unlock()
			if err != nil {
				return nil, err
			}
			continue
		}
		spare := p.starting * (p.info.MaxInFlight - 1) // a starter takes one slot itself
		if len(p.procs)+p.starting < p.cfg.processLimit() && p.waiting >= spare {
			if err := p.crashLoopLocked(); err != nil {
				p.mu.Unlock()
				return nil, err
			}
			return p.start(ctx) // unlocks p.mu
		}
		p.waiting++
		freed := p.freed
		p.mu.Unlock()
		var err error
		select {
		case <-freed:
		case <-ctx.Done():
			err = fmt.Errorf("%w: every process of instance %d was busy until the deadline: %w", errNoAnswer, p.env.Instance, context.Cause(ctx))
		}
		p.mu.Lock()
		p.waiting--
		p.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
}

// start starts a process for the caller, restartDelay after the last
// failure at the earliest. The caller holds p.mu, which start unlocks.
func (p *pool) start(ctx context.Context) (*member, error) {
	var a *attempt
	if p.startErr != nil || p.streak >= crashLoopLimit {
		a = &attempt{done: make(chan struct{})}
		p.attempt = a
	}
	p.starting++
	delay := time.Until(p.lastFailure.Add(restartDelay))
	p.mu.Unlock()

	var m *member
	err := p.pause(ctx, delay)
	if err == nil && ctx.Err() != nil {
		// A process started now could not answer hello in time: not a
		// failure of the child.
		err = fmt.Errorf("%w: no time was left to start a process of instance %d: %w", errNoAnswer, p.env.Instance, context.Cause(ctx))
	}
	tried := err == nil
	if tried {
		m, err = p.grow(ctx)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	p.starting--
	switch {
	case !tried || errors.Is(err, errClosed):
	case err != nil:
		p.startErr, p.lastFailure = err, time.Now()
	default:
		p.startErr = nil
	}
	if a != nil {
		a.tried, a.err = tried, err
		p.attempt = nil
		close(a.done)
	}
	p.wake()
	return m, err
}

// pause waits for d, or until ctx ends or the instance is closed.
func (p *pool) pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-p.closing:
		return errClosed
	case <-ctx.Done():
		return fmt.Errorf("%w: instance %d was waiting %s after a process failed before it starts another, until the deadline: %w", errNoAnswer, p.env.Instance, restartDelay, context.Cause(ctx))
	}
}

// release gives back m's slot.
func (p *pool) release(m *member) {
	<-m.slots
	p.mu.Lock()
	p.wake()
	p.mu.Unlock()
}

// wake tells the waiting callers to look for a slot again. The caller holds
// p.mu.
func (p *pool) wake() {
	close(p.freed)
	p.freed = make(chan struct{})
}

// closeLocked marks the instance closed, reaping the processes that failed
// before, so that their crashes count, and wakes every waiting caller. It
// reports whether the instance was open. The caller holds p.mu.
func (p *pool) closeLocked() bool {
	if p.closed {
		return false
	}
	p.reapLocked()
	p.closed = true
	close(p.closing)
	p.wake()
	return true
}

// call runs one request on some process of the pool. A request whose
// process failed removes the process from the pool, so that the next
// request finds another.
func (p *pool) call(ctx context.Context, method string, params, result any) error {
	ctx = withBegun(ctx)
	m, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	defer p.release(m)
	err = m.request(ctx, method, params, result)
	p.settle(err)
	return err
}

// settle takes note of the outcome of a request to a process of the pool:
// a process that failed, or was killed because the request found it
// wedged, is removed, and an answer ends a crash loop.
func (p *pool) settle(err error) {
	var answer *answerError
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case errors.Is(err, errProcessFailed), errors.Is(err, errNoAnswer):
		p.reapLocked()
	case err == nil, errors.As(err, &answer):
		p.servedLocked()
	}
}

// AppliesEffectRemotely reports that the child processes run the effect's
// statement themselves: the harness's Go hook in the effect cannot reach
// them (see [effect.Remote]).
func (p *pool) AppliesEffectRemotely() bool { return true }

// Deliver sends one delivery to a child process.
func (p *pool) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	params := protocol.DeliverParams{
		Namespace:  []byte(d.Namespace),
		EventID:    []byte(d.ID),
		Payload:    d.Payload,
		Attempt:    d.Attempt,
		EffectArgs: p.effect.Args(d),
		Now:        p.now(),
	}
	var outcome adapters.Outcome
	if err := p.call(ctx, protocol.MethodDeliver, params, &outcome); err != nil {
		return 0, fmt.Errorf("deliver %s attempt %d: %w", d.Event, d.Attempt, err)
	}
	return outcome, nil
}

// Purge asks a child process to purge markers claimed before cutoff.
func (p *pool) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	var removed int64
	if err := p.call(ctx, protocol.MethodPurge, protocol.PurgeParams{Cutoff: wireTime(cutoff), Now: p.now()}, &removed); err != nil {
		return 0, err
	}
	return removed, nil
}

// now is the harness's time for a child that accepts the clock.
func (p *pool) now() *time.Time {
	if !p.info.declares.AcceptsClock || p.env.Clock == nil {
		return nil
	}
	t := wireTime(p.env.Clock.Now())
	return &t
}

// wireTime is t as the protocol sends it: UTC, in whole microseconds, the
// precision of PostgreSQL's timestamptz and of most languages' clocks.
func wireTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// Drain sends drain to every live process of the instance at once, each
// when it has a free slot, and returns when all have answered: then every
// external effect the instance committed before the call has been
// acknowledged by the destination (see [adapters.Drainer]). A child that
// does not implement drain answers "unsupported", and Drain returns an
// error wrapping [errDrainUnsupported], at once on later calls. Processes
// still starting have committed nothing and are not asked. When no process
// is live, every one having crashed, Drain starts one and asks it: what
// the dead ones committed waits in the database for a new process to send.
func (p *pool) Drain(ctx context.Context) error {
	p.mu.Lock()
	var err error
	switch {
	case p.closed:
		err = errClosed
	case p.noDrain:
		err = errDrainUnsupported
	}
	p.reapLocked()
	procs := slices.Clone(p.procs)
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("drain instance %d: %w", p.env.Instance, err)
	}
	var errs []error
	if len(procs) == 0 {
		m, err := p.acquire(ctx)
		if err != nil {
			return fmt.Errorf("drain instance %d: %w", p.env.Instance, err)
		}
		errs = []error{p.drainHeld(ctx, m)}
	} else {
		errs = make([]error, len(procs))
		var wg sync.WaitGroup
		for i, m := range procs {
			wg.Go(func() { errs[i] = p.drain(ctx, m) })
		}
		wg.Wait()
	}
	for _, err := range errs {
		// Every process runs the same program: one answer says it for all.
		if errors.Is(err, errDrainUnsupported) {
			return fmt.Errorf("drain instance %d: %w", p.env.Instance, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("drain instance %d: %w", p.env.Instance, err)
	}
	return nil
}

// drain sends drain to m in one of its slots, so that a process never has
// more requests at once than it declared.
func (p *pool) drain(ctx context.Context, m *member) error {
	select {
	case m.slots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: %s was busy until the deadline: %w", errNoAnswer, m.label, context.Cause(ctx))
	}
	return p.drainHeld(ctx, m)
}

// drainHeld sends drain to m, whose slot the caller has taken, and gives
// the slot back.
func (p *pool) drainHeld(ctx context.Context, m *member) error {
	defer p.release(m)
	err := m.request(ctx, protocol.MethodDrain, nil, nil)
	p.settle(err)
	switch {
	case errors.Is(err, errUnsupported):
		p.mu.Lock()
		p.noDrain = true
		p.mu.Unlock()
		return fmt.Errorf("%w: %w", errDrainUnsupported, err)
	}
	return err
}

// Abort stops the instance abruptly, as a crash or the OOM killer would:
// it kills every process of the instance, with its process group, by
// SIGKILL and without shutdown, then waits until each has exited or ctx
// ends. Whatever a child had committed but not yet sent to the external
// destination stays in its database, for the next instance on the schema
// to find. Requests in flight fail with [errProcessFailed], later requests
// fail, and Close becomes a no-op: the harness builds a new instance and
// never uses an aborted one again. The processes Abort kills are not
// crashes.
func (p *pool) Abort(ctx context.Context) error {
	p.mu.Lock()
	p.closeLocked()
	p.aborted = true
	victims := make([]*process, 0, len(p.procs)+len(p.launching))
	for _, m := range p.procs {
		victims = append(victims, m.process)
	}
	for proc := range p.launching {
		victims = append(victims, proc)
	}
	p.procs = nil
	p.mu.Unlock()
	for _, proc := range victims { // all at once, then wait
		proc.stop(errAborted)
	}
	var errs []error
	for _, proc := range victims {
		if err := proc.awaitExit(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("abort instance %d: %w", p.env.Instance, err)
	}
	return nil
}

// Close shuts every process down, each within the shutdown timeout, and
// kills the processes still starting, which have done nothing yet, and
// waits until they have exited or ctx ends. Requests waiting for a process
// fail. None of this counts as a crash.
func (p *pool) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closeLocked()
	procs := p.procs
	p.procs = nil
	var starting []*process
	if !p.aborted { // Abort has killed them already
		for proc := range p.launching {
			starting = append(starting, proc)
		}
	}
	p.mu.Unlock()
	for _, proc := range starting {
		proc.stop(errClosing)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, m := range procs {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, p.cfg.shutdownWait())
			defer cancel()
			if err := m.shutdown(sctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, proc := range starting {
		if err := proc.awaitExit(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
