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
	"github.com/harmless-dev/harmless/internal/effect"
	"github.com/harmless-dev/harmless/internal/redact"
)

// pool is one implementation instance: the child processes of one worker.
// It sends each request to a process with a free slot and starts another
// process when every slot is taken, so a child that handles one request at
// a time still sees real concurrency.
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
	waiting   int               // callers waiting for a slot
	started   int               // processes ever started, for labels
	freed     chan struct{}     // closed and replaced when a slot frees up
	err       error             // set when the instance is dead
	closed    bool
	aborted   bool // Abort killed the processes; implies closed
	noDrain   bool // the child answered drain "unsupported"
}

// member is a process of the pool with its request slots.
type member struct {
	*process
	slots chan struct{}
}

func newPool(ctx context.Context, cfg Config, info Info, env adapters.Env) (*pool, error) {
	// The child runs the effect's statement itself, so the pool needs the
	// statement, which only the harness's own effect carries.
	eff, ok := effect.Of(env.Effect)
	if !ok {
		return nil, fmt.Errorf("%s: the environment's effect (%T) was not built by the harmless harness; an exec adapter runs only under it", Name, env.Effect)
	}
	p := &pool{
		cfg:       cfg,
		info:      info,
		env:       env,
		effect:    eff,
		freed:     make(chan struct{}),
		launching: map[*process]bool{},
		secrets:   redact.New(),
		setup: protocol.SetupParams{
			Instance:    env.Instance,
			DSN:         env.DSN,
			Schema:      env.Schema,
			Effect:      protocol.EffectSpec{SQL: eff.SQL()},
			Destination: env.Destination,
		},
	}
	p.secrets.AddDSN(env.DSN)
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

// grow starts one more process, runs hello and setup, and adds it to the
// pool with one slot taken for the caller.
func (p *pool) grow(ctx context.Context) (*member, error) {
	p.mu.Lock()
	p.started++
	label := fmt.Sprintf("process %d of instance %d", p.started, p.env.Instance)
	p.mu.Unlock()
	proc, err := launch(p.cfg, p.env.Instance, label, p.secrets)
	if err != nil {
		return nil, err
	}
	// Until it joins procs, the process is in launching, where Abort finds
	// it; one launched after Abort is killed here.
	p.mu.Lock()
	if p.aborted {
		p.mu.Unlock()
		if err := proc.abort(ctx); err != nil {
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
	hello, err := handshake(ctx, proc, p.cfg.HarnessVersion)
	if err == nil && !hello.sameAs(p.info) {
		err = fmt.Errorf("%s declares %s, but the probe declared %s; every process must declare the same", label, describe(hello), describe(p.info))
	}
	if err == nil {
		err = proc.request(ctx, protocol.MethodSetup, p.setup, nil)
	}
	if err != nil {
		_ = proc.shutdown(context.WithoutCancel(ctx))
		return nil, err
	}
	m := &member{process: proc, slots: make(chan struct{}, p.info.MaxInFlight)}
	m.slots <- struct{}{}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		if !p.aborted { // Abort has killed it already
			go m.shutdown(context.Background())
		}
		return nil, errClosed
	}
	p.procs = append(p.procs, m)
	return m, nil
}

var errClosed = errors.New("the instance is closed")

// An instance drains its children's external effects and can be stopped
// abruptly; the harness looks for both.
var (
	_ adapters.Drainer                          = (*pool)(nil)
	_ interface{ Abort(context.Context) error } = (*pool)(nil)
)

// startMayRetry reports whether a process that failed to start failed for
// a moment, not for a bug: its hello or setup answered the error class
// transient (a connection refused while the server restarts, say) or did
// not answer before the request's deadline. The process is gone, the
// request that needed it fails unacknowledged and is redelivered, and the
// instance lives on to start another. A process that died, broke the
// protocol, declared otherwise or answered another class has a bug, and
// ends the instance (see pool.die).
func startMayRetry(err error) bool {
	var answer *AnswerError
	if errors.As(err, &answer) {
		return answer.Err.Class == protocol.Transient
	}
	return errors.Is(err, ErrNoAnswer) && !errors.Is(err, ErrProcessFailed)
}

// acquire returns a process with a slot taken for one request. When every
// slot is taken it starts another process, unless the processes already
// starting have spare slots for every caller already waiting.
func (p *pool) acquire(ctx context.Context) (*member, error) {
	for {
		p.mu.Lock()
		if p.err != nil || p.closed {
			err := p.err
			p.mu.Unlock()
			if err == nil {
				err = errClosed
			}
			return nil, err
		}
		for _, m := range p.procs {
			select {
			case m.slots <- struct{}{}:
				p.mu.Unlock()
				return m, nil
			default:
			}
		}
		spare := p.starting * (p.info.MaxInFlight - 1) // a starter takes one slot itself
		if len(p.procs)+p.starting < p.cfg.maxProcesses() && p.waiting >= spare {
			p.starting++
			p.mu.Unlock()
			m, err := p.grow(ctx)
			if err != nil && !startMayRetry(err) {
				err = p.die(err)
			}
			p.mu.Lock()
			p.starting--
			p.wake()
			p.mu.Unlock()
			return m, err
		}
		p.waiting++
		freed := p.freed
		p.mu.Unlock()
		var err error
		select {
		case <-freed:
		case <-ctx.Done():
			err = fmt.Errorf("%w: every process of instance %d was busy until the deadline: %w", ErrNoAnswer, p.env.Instance, context.Cause(ctx))
		}
		p.mu.Lock()
		p.waiting--
		p.mu.Unlock()
		if err != nil {
			return nil, err
		}
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

// die marks the instance dead with cause and returns cause. A dead
// instance never starts processes again: a child that crashed has a bug, and
// restarting it would hide the bug from the rules that would catch it.
func (p *pool) die(cause error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = cause
	}
	return cause
}

// call runs one request on some process of the pool.
func (p *pool) call(ctx context.Context, method string, params, result any) error {
	m, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	defer p.release(m)
	err = m.request(ctx, method, params, result)
	if errors.Is(err, ErrProcessFailed) {
		return p.die(err)
	}
	return err
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
	if !p.info.Declares.AcceptsClock || p.env.Clock == nil {
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
// error wrapping [ErrDrainUnsupported], at once on later calls. Processes
// still starting have committed nothing and are not asked.
func (p *pool) Drain(ctx context.Context) error {
	p.mu.Lock()
	procs, err := slices.Clone(p.procs), p.err
	switch {
	case err != nil:
	case p.closed:
		err = errClosed
	case p.noDrain:
		err = ErrDrainUnsupported
	}
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("drain instance %d: %w", p.env.Instance, err)
	}
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, m := range procs {
		wg.Go(func() { errs[i] = p.drain(ctx, m) })
	}
	wg.Wait()
	for _, err := range errs {
		// Every process runs the same program: one answer says it for all.
		if errors.Is(err, ErrDrainUnsupported) {
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
		return fmt.Errorf("%w: %s was busy until the deadline: %w", ErrNoAnswer, m.label, context.Cause(ctx))
	}
	defer p.release(m)
	err := m.request(ctx, protocol.MethodDrain, nil, nil)
	switch {
	case errors.Is(err, ErrProcessFailed):
		return p.die(err)
	case errors.Is(err, ErrUnsupported):
		p.mu.Lock()
		p.noDrain = true
		p.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrDrainUnsupported, err)
	}
	return err
}

// Abort stops the instance abruptly, as a crash or the OOM killer would:
// it kills every process of the instance, with its process group, by
// SIGKILL and without shutdown, then waits until each has exited or ctx
// ends. Whatever a child had committed but not yet sent to the external
// destination stays in its database, for the next instance on the schema
// to find. Requests in flight fail with [ErrProcessFailed], later requests
// fail, and Close becomes a no-op: the harness builds a new instance and
// never uses an aborted one again.
func (p *pool) Abort(ctx context.Context) error {
	p.mu.Lock()
	p.closed, p.aborted = true, true
	victims := make([]*process, 0, len(p.procs)+len(p.launching))
	for _, m := range p.procs {
		victims = append(victims, m.process)
	}
	for proc := range p.launching {
		victims = append(victims, proc)
	}
	p.procs = nil
	p.wake() // callers waiting for a slot see the instance closed
	p.mu.Unlock()
	for _, proc := range victims { // all at once, then wait
		proc.stop()
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

// Close shuts every process down, each within the shutdown timeout.
func (p *pool) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	procs := p.procs
	p.procs = nil
	p.mu.Unlock()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, m := range procs {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, p.cfg.shutdownTimeout())
			defer cancel()
			if err := m.shutdown(sctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
