package soak

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// Options say how a soak reports while it runs, and when it stops early.
type Options struct {
	// Name names the implementation in the report; "" means the adapter's
	// name.
	Name string
	// Progress, when set, is called about twice a second from a goroutine
	// of the soak's.
	Progress func(Progress)
	// Stop, when closed, ends the load early (Ctrl-C): the soak heals its
	// faults, settles for at most InterruptedSettle and reports what ran,
	// marked interrupted. Ending ctx instead abandons the run at once.
	Stop <-chan struct{}
	// Logf receives the soak's log lines; nil discards them.
	Logf func(format string, args ...any)
}

// Progress is a snapshot of a running soak.
type Progress struct {
	// Phase is "load", "settle" (redelivering what failed, with the
	// nemesis stopped), "drain" (waiting for the external effects) or
	// "check".
	Phase   string
	Elapsed time.Duration
	// Events counts the events generated; Delivered the deliveries that
	// ended; Acked those acknowledged with an outcome.
	Events    int
	Delivered int64
	Acked     int64
	// Throughput is acknowledged deliveries per second over the last
	// report's interval.
	Throughput float64
	// Anomalies counts events acknowledged Applied more than once so far:
	// the checker finds the rest at the end.
	Anomalies int
	// Fault is the fault in progress, or "".
	Fault string
	// Faults counts the faults injected and healed so far (the report's
	// windows).
	Faults int
	// Crashes counts the crashes of the implementation's processes so
	// far, each restarted (see Report.Crashes).
	Crashes int
}

// A delivery whose outcome is unknown is redelivered as the harness's
// broker does (harness.Backoff), for the patience (Config.RedeliveryPatience)
// since the copy's first unknown outcome; one that runs out of it during the
// load waits for the settling phase, when the nemesis is stopped, and gets
// a whole patience again.

// Settling bounds: how long the soak redelivers after the load at most,
// and after an interruption.
const (
	SettleTimeout     = 2 * time.Minute
	InterruptedSettle = 10 * time.Second
	progressInterval  = 500 * time.Millisecond
	phaseLoad         = "load"
	phaseSettle       = "settle"
	phaseDrain        = "drain"
	phaseCheck        = "check"
	verdictClean      = "clean"
	verdictAnomalies  = "anomalies"
	verdictNoAck      = "no-ack"
)

// Run soaks adapter on run's database as cfg says and checks the history.
// Its error is an environment error (the database, the implementation
// cannot be set up); anomalies are the report's.
func Run(ctx context.Context, run *harness.Run, adapter adapters.Adapter, cfg Config, opts Options) (Report, error) {
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Name == "" {
		opts.Name = adapter.Name
	}
	play, err := run.NewPlayWith(ctx, adapter, harness.PlayOptions{NoHistory: true, SystemClock: true})
	if err != nil {
		return Report{}, err
	}
	s := &soaker{
		cfg: cfg, opts: opts, run: run, play: play, gen: newGenerator(cfg),
		checker: NewChecker(Namespace), start: play.Started(),
		open: map[uint32]*eventState{}, concurrent: map[uint32]bool{},
		rng:  rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6272_6f6b_6572)), // "broker"
		wake: make(chan struct{}, 1), fatalCh: make(chan struct{}),
	}
	s.acks.restart(time.Now())
	s.nem = newNemesis(s)
	rep, err := s.soak(ctx)
	// Closing drops the play's schema, after the ledger was read.
	if cerr := play.Close(context.WithoutCancel(ctx)); cerr != nil {
		err = errors.Join(err, fmt.Errorf("clean up the soak's schema: %w", cerr))
	}
	rep.FaultsFired = run.FaultsFired()
	return rep, err
}

func (c Config) validate() error {
	switch {
	case c.Instances < 2:
		return fmt.Errorf("a soak needs at least 2 instances, not %d", c.Instances)
	case c.Duration < 0 || c.Events < 0:
		return errors.New("the duration and the number of events must not be negative")
	case c.Duplicates < 0 || c.Duplicates > 1 || c.Conflicts < 0 || c.Conflicts > 1:
		return errors.New("the shares of duplicates and conflicts must be between 0 and 1")
	case c.Events > 1<<31:
		return fmt.Errorf("at most %d events", 1<<31)
	}
	return nil
}

// soaker is one soak in progress.
type soaker struct {
	cfg     Config
	opts    Options
	run     *harness.Run
	play    *harness.Play
	proxy   *harness.Proxy
	gen     *generator
	checker *Checker
	nem     *nemesis
	tl      timeline
	start   time.Time

	delivered, acked atomic.Int64
	acks             ackWatch

	mu          sync.Mutex
	next        uint32                 // events generated
	open        map[uint32]*eventState // events with deliveries still to make
	due         jobHeap
	parked      []job      // ran out of patience during the load: redelivered when settling
	rng         *rand.Rand // the broker's jitter; guarded by mu
	outstanding int        // jobs queued, delayed, parked or running
	settling    bool
	phase       string
	concurrent  map[uint32]bool // upcoming events the nemesis wants delivered concurrently
	// panics counts, per instance, the deliveries that panicked (the play
	// keeps no history, where Play.CrashesOf would find them), with the
	// first.
	panics  map[int]*Crash
	wake    chan struct{}
	fatal   error
	fatalCh chan struct{}
}

// eventState is what the dispatcher knows of an event with deliveries
// still to make; it is dropped once none remain.
type eventState struct {
	firstInvoke time.Duration // when its first delivery started; -1 before
	pending     int           // its jobs not finished
	again       bool          // deliver once more when the first delivery ends
	conflict    bool          // send a conflicting copy once the original is acknowledged
	acked       bool          // the original was acknowledged
}

// job is one delivery to make.
type job struct {
	event   uint32
	variant Variant
	due     time.Duration // from the start, for delayed jobs
	tries   int           // failed deliveries of this copy so far
	// failing is when the copy's first unknown outcome ended, from the
	// start: its patience counts from there.
	failing time.Duration
}

type jobHeap []job

func (h jobHeap) Len() int           { return len(h) }
func (h jobHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h jobHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *jobHeap) Push(x any)        { *h = append(*h, x.(job)) }
func (h *jobHeap) Pop() any {
	old := *h
	j := old[len(old)-1]
	*h = old[:len(old)-1]
	return j
}

func (s *soaker) since() time.Duration { return time.Since(s.start) }
func (s *soaker) logf(format string, args ...any) {
	s.opts.Logf(format, args...)
}

// fail ends the soak for a reason of the environment.
func (s *soaker) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fatal == nil {
		s.fatal = err
		close(s.fatalCh)
	}
}

func (s *soaker) soak(ctx context.Context) (Report, error) {
	rep := Report{Adapter: s.opts.Name, Config: s.cfg, Started: s.start}
	rep.Environment = Environment{Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), Server: s.run.Server().String()}
	if v, err := s.run.ServerVersion(ctx); err == nil {
		rep.Environment.ServerVersion = v
	}
	if err := s.setup(ctx); err != nil {
		return rep, err
	}

	queue := make(chan job)
	var deliverers sync.WaitGroup
	for n := 1; n <= s.cfg.Instances; n++ {
		deliverers.Go(func() { s.work(ctx, n, queue) })
	}
	progressDone := make(chan struct{})
	stopProgress := s.reportProgress(progressDone)
	watchDone := make(chan struct{})
	stopWatch := s.watchAcks(ctx, watchDone)

	// The load, with the nemesis.
	s.setPhase(phaseLoad)
	nemCtx, stopNemesis := context.WithCancel(ctx)
	nemDone := make(chan struct{})
	go func() { defer close(nemDone); s.nem.run(nemCtx) }()
	var deadline <-chan time.Time
	if s.cfg.Duration > 0 {
		t := time.NewTimer(s.cfg.Duration)
		defer t.Stop()
		deadline = t.C
	}
	s.dispatch(ctx, queue, true, deadline)
	loadElapsed := s.since()
	s.tl.endLoad()
	stopNemesis()
	<-nemDone
	rep.Interrupted = stopped(s.opts.Stop) || ctx.Err() != nil

	// Settling: redeliver what failed, with every fault healed.
	s.setPhase(phaseSettle)
	settle := SettleTimeout
	if rep.Interrupted {
		settle = InterruptedSettle
	}
	s.mu.Lock()
	s.settling = true
	for _, j := range s.parked {
		j.tries, j.due, j.failing = 0, s.since(), s.since()
		heap.Push(&s.due, j)
	}
	s.parked = nil
	s.mu.Unlock()
	settleCtx, cancelSettle := context.WithTimeout(ctx, settle)
	s.dispatch(settleCtx, queue, false, nil)
	cancelSettle()
	close(queue)
	deliverers.Wait()
	close(watchDone)
	stopWatch()
	rep.Crashes = s.crashes()

	s.setPhase(phaseCheck)
	err := s.observe(ctx, &rep)
	close(progressDone)
	stopProgress()
	if err != nil {
		return rep, err
	}
	s.mu.Lock()
	fatal := s.fatal
	var noAck *NoAckError
	stalled := errors.As(fatal, &noAck)
	// Only an interruption, or an implementation that stopped
	// acknowledging, leaves events unsettled: after the settling timeout
	// an event never acknowledged is judged, so an implementation that
	// fails some deliveries for good is found, not excused. One that
	// answers nothing at all is no evidence about the events it never
	// answered, even those whose redeliveries had run out of patience: the
	// soak ends with its error, not millions of lost events.
	if rep.Interrupted {
		for i, st := range s.open {
			if !st.acked {
				s.checker.Unsettled(i)
			}
		}
	}
	if stalled {
		s.checker.UnsettleUnanswered()
	}
	s.mu.Unlock()
	if fatal != nil && !stalled {
		return rep, fatal
	}

	rep.Totals, rep.Anomalies, rep.Unknowns = s.checker.Check(ctx)
	if rep.Totals.Events == 0 {
		// Nothing delivered is no evidence: never a clean verdict.
		return rep, errors.New("the soak delivered no event: nothing to judge")
	}
	rep.Elapsed = s.since()
	rep.Timeline, rep.Throughput, rep.Latency = s.figures(loadElapsed)
	rep.Faults = s.nem.Windows()
	rep.Verdict = verdictClean
	if !rep.Clean() {
		rep.Verdict = verdictAnomalies
	}
	if stalled {
		rep.Verdict, rep.Error = verdictNoAck, noAck.Error()
		return rep, noAck
	}
	return rep, ctx.Err()
}

// setup opens what the chosen nemeses need, before any instance exists
// (an instance connects through the proxy and learns the destination when
// it is built), then builds every instance.
func (s *soaker) setup(ctx context.Context) error {
	for _, n := range s.cfg.Nemeses {
		switch n {
		case NemesisCutBeforeCommit, NemesisCutAfterCommit:
			s.proxy = s.play.Proxy()
		case NemesisDestination:
			d, err := s.play.OpenDestination(ctx)
			if err != nil {
				return err
			}
			// The checker needs only the counts per event.
			d.ForgetRequests()
		case NemesisCrash, NemesisFailover, NemesisPurge:
			if why := Unavailable(n, s.play.Adapter(), DatabaseOf(s.run)); why != "" {
				return fmt.Errorf("nemesis %s: %s", n, why)
			}
		}
	}
	for n := 1; n <= s.cfg.Instances; n++ {
		if _, err := s.play.Instance(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

func (s *soaker) setPhase(p string) {
	s.mu.Lock()
	s.phase = p
	s.mu.Unlock()
}

// dispatch hands jobs to the instances' delivery loops (see work): delayed
// jobs when due, else, while generating, new events. Generating ends when
// the load's deadline, its number of events or Stop is reached; without
// generating it returns once no job is left, or when ctx ends.
func (s *soaker) dispatch(ctx context.Context, queue chan<- job, generating bool, deadline <-chan time.Time) {
	send := func(j job) bool {
		select {
		case queue <- j:
			return true
		case <-ctx.Done():
		case <-s.fatalCh:
		}
		return false
	}
	for {
		if generating {
			select {
			case <-deadline:
				return
			case <-s.opts.Stop:
				return
			case <-ctx.Done():
				return
			case <-s.fatalCh:
				return
			default:
			}
			if s.cfg.Events > 0 && int(s.next) >= s.cfg.Events {
				return
			}
		}
		s.mu.Lock()
		now := s.since()
		var j job
		ready := len(s.due) > 0 && s.due[0].due <= now
		if ready {
			j = heap.Pop(&s.due).(job)
		}
		wait := time.Hour
		if len(s.due) > 0 {
			wait = max(s.due[0].due-now, 0)
		}
		idle := s.outstanding == 0
		s.mu.Unlock()
		switch {
		case ready:
			if !send(j) {
				return
			}
			continue
		case generating:
			for _, j := range s.generate() {
				if !send(j) {
					return
				}
			}
			continue
		case idle:
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-s.wake:
		case <-t.C:
		case <-ctx.Done():
		case <-s.fatalCh:
		}
		t.Stop()
		if ctx.Err() != nil || stopped(s.fatalCh) {
			return
		}
	}
}

// generate makes the next event and returns its deliveries due now; a
// later duplicate goes to the delayed jobs.
func (s *soaker) generate() []job {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.next
	s.next++
	dup, delay, conflict := s.gen.plan()
	if s.concurrent[i] {
		delete(s.concurrent, i)
		dup = concurrently
	}
	st := &eventState{firstInvoke: -1, conflict: conflict}
	s.open[i] = st
	now := []job{{event: i}}
	switch dup {
	case atOnce:
		st.again = true
	case concurrently:
		now = append(now, job{event: i})
	case later:
		s.scheduleLocked(job{event: i, due: s.since() + delay})
	}
	st.pending += len(now)
	s.outstanding += len(now)
	return now
}

// scheduleLocked adds a delayed job; the caller holds s.mu.
func (s *soaker) scheduleLocked(j job) {
	heap.Push(&s.due, j)
	s.open[j.event].pending++
	s.outstanding++
	s.signal()
}

func (s *soaker) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// upcoming returns k events not generated yet, for faults planned on their
// first delivery; with concurrent, each is delivered to two instances at
// once. They are a quarter of a second ahead at the rate events are
// generated, so that planning the fault (a round trip to the server) ends
// before they are delivered, however fast the implementation is.
func (s *soaker) upcoming(k int, concurrent bool) []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	lead := uint32(10)
	if elapsed := s.since(); elapsed > 0 {
		lead = max(lead, uint32(float64(s.next)/elapsed.Seconds()/4))
	}
	var out []uint32
	for n := range k {
		i := s.next + lead + uint32(3*n)
		out = append(out, i)
		if concurrent {
			s.concurrent[i] = true
		}
	}
	return out
}

// purgeCutoff returns a time before every claim that may still be
// delivered: the first delivery of every event with deliveries still to
// make started after it. Purging state claimed before it can never make a
// correct implementation apply an effect twice.
func (s *soaker) purgeCutoff() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	oldest := s.since()
	for _, st := range s.open {
		if st.firstInvoke >= 0 && st.firstInvoke < oldest {
			oldest = st.firstInvoke
		}
	}
	oldest -= 100 * time.Millisecond
	if oldest <= 0 {
		return time.Time{}, false
	}
	return s.start.Add(oldest), true
}

// work is instance n's delivery loop: it delivers jobs to instance n until
// the queue closes.
func (s *soaker) work(ctx context.Context, n int, queue <-chan job) {
	for j := range queue {
		ev := s.gen.event(j.event, j.variant)
		s.mu.Lock()
		st := s.open[j.event]
		first := st.firstInvoke < 0
		if first {
			st.firstInvoke = s.since()
		}
		s.mu.Unlock()
		a := s.play.Deliver(ctx, n, ev)
		op := s.record(n, j, a, first)
		s.after(j, op)
	}
}

// record adds the attempt to the history and the timeline; first says it
// was its event's first delivery.
func (s *soaker) record(n int, j job, a harness.Attempt, first bool) Op {
	op := Op{Event: j.event, Instance: uint16(n), Attempt: uint16(min(a.Delivery.Attempt, 1<<16-1)), Variant: j.variant,
		Invoke: a.Started, Return: a.Ended}
	switch {
	case a.Err == nil:
		op.Status, op.Outcome = OK, a.Outcome
	case errors.Is(a.Err, adapters.ErrPayloadConflict):
		op.Status, op.Refusal = Fail, RefusedConflict
	case errors.Is(a.Err, adapters.ErrInvalidInput):
		op.Status, op.Refusal = Fail, RefusedInvalid
	default:
		op.Status, op.Hung = Info, errors.Is(a.Err, harness.ErrHung)
	}
	s.checker.Record(op, a.Err)
	s.tl.add(a.Ended, a.Ended-a.Started, op.Status == OK)
	if op.Status == Info {
		s.acks.unknown(a.Err, first)
		if c, ok := harness.PanicCrash(a); ok {
			s.panicked(n, c)
		}
	} else {
		s.acks.answered(time.Now())
	}
	s.delivered.Add(1)
	if op.Status == OK {
		s.acked.Add(1)
	}
	return op
}

// after decides what the end of job j brings: a redelivery after an
// unknown outcome, a conflicting copy once the original is acknowledged,
// the duplicate planned for when the first delivery ends.
func (s *soaker) after(j job, op Op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.signal()
	st := s.open[j.event]
	now := s.since()
	switch op.Status {
	case Info:
		if j.tries == 0 {
			j.failing = now
		}
		j.tries++
		next := job{event: j.event, variant: j.variant, tries: j.tries, failing: j.failing, due: now + harness.Backoff(j.tries, s.rng)}
		switch {
		case next.due-j.failing < s.patience():
			s.scheduleLocked(next)
		case !s.settling:
			s.parked = append(s.parked, next)
			st.pending++
			s.outstanding++
		}
	case OK:
		if j.variant == Original && !st.acked {
			st.acked = true
			if st.conflict {
				st.conflict = false
				s.scheduleLocked(job{event: j.event, variant: Conflicting, due: now + s.gen.jitter(200*time.Millisecond)})
			}
		}
	}
	if st.again && j.variant == Original {
		st.again = false
		s.scheduleLocked(job{event: j.event, due: now})
	}
	st.pending--
	s.outstanding--
	if st.pending == 0 {
		delete(s.open, j.event)
	}
}

// patience is the broker's patience with one copy.
func (s *soaker) patience() time.Duration {
	if s.cfg.RedeliveryPatience > 0 {
		return s.cfg.RedeliveryPatience
	}
	return harness.DefaultRedeliveryPatience
}

// observe reads what happened: it drains the implementation's external
// effects, reads every effect from the ledger and the destination's
// counts, and hands them to the checker.
func (s *soaker) observe(ctx context.Context, rep *Report) error {
	d := s.play.Destination()
	if d != nil {
		s.setPhase(phaseDrain)
		rep.Drain, rep.DrainError = s.drain(ctx, d)
		s.setPhase(phaseCheck)
	}
	rows, err := s.run.Admin().Query(ctx, `SELECT event_id, attempt, payload_digest FROM `+ledger.Table(s.play.Schema())+
		` WHERE namespace = $1`, []byte(Namespace))
	if err != nil {
		return fmt.Errorf("read the ledger: %w", err)
	}
	var id []byte
	var attempt int
	var digest string
	_, err = pgx.ForEachRow(rows, []any{&id, &attempt, &digest}, func() error {
		i, ok := ParseEventID(string(id))
		if !ok || i >= s.next {
			return fmt.Errorf("the ledger holds an effect of %q, an event the soak never delivered", id)
		}
		original, conflicting := s.gen.digests(i)
		switch digest {
		case original:
			s.checker.Effect(i, attempt, Original)
		case conflicting:
			s.checker.Effect(i, attempt, Conflicting)
		default:
			return fmt.Errorf("the ledger holds an effect of %s with payload digest %s, a payload the soak never delivered", id, digest)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the ledger: %w", err)
	}
	if d != nil {
		for i := range s.next {
			s.checker.Destination(i, d.Processed(s.gen.event(i, Original)))
		}
	}
	return nil
}

// DrainTimeout bounds how long a soak waits for the external effects
// committed during the load while the destination still sees progress.
const DrainTimeout = 10 * time.Minute

// drain waits until the implementation has made the external effects it
// committed. Play.Drain is bounded (harness.DrainLimit), and after a long
// load an outbox may hold a backlog its relay needs minutes to send: drain
// asks again as long as the destination processed more since the last
// try, up to DrainTimeout. When it gives up, the effects not made are
// judged lost at the destination, and the report says why.
func (s *soaker) drain(ctx context.Context, d *harness.Destination) (how, failed string) {
	start := time.Now()
	for {
		before := d.ProcessedTotal()
		how, err := s.play.Drain(ctx)
		took := time.Since(start).Round(time.Millisecond)
		if err == nil {
			return fmt.Sprintf("%s in %s", how, took), ""
		}
		if d.ProcessedTotal() == before || time.Since(start) > DrainTimeout || ctx.Err() != nil {
			return fmt.Sprintf("%s for %s", how, took), err.Error()
		}
		s.logf("soak: the external effects are still being made (%d so far): draining again", d.ProcessedTotal())
	}
}

// figures returns the timeline, the load's throughput and its latency.
func (s *soaker) figures(load time.Duration) ([]Second, float64, Latency) {
	seconds, acked, latency := s.tl.result()
	var throughput float64
	if load > 0 {
		throughput = float64(acked) / load.Seconds()
	}
	return seconds, throughput, latency
}

// reportProgress calls the Progress option until done closes; the returned
// function waits for its last call.
func (s *soaker) reportProgress(done <-chan struct{}) func() {
	if s.opts.Progress == nil {
		return func() {}
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		var lastAcked int64
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				acked := s.acked.Load()
				p := Progress{Elapsed: s.since(), Delivered: s.delivered.Load(), Acked: acked,
					Throughput: float64(acked-lastAcked) / now.Sub(last).Seconds(),
					Anomalies:  s.checker.Suspicious(), Fault: s.nem.Current(), Faults: s.nem.Injected(), Crashes: s.crashCount()}
				lastAcked, last = acked, now
				s.mu.Lock()
				p.Phase, p.Events = s.phase, int(s.next)
				s.mu.Unlock()
				s.opts.Progress(p)
			}
		}
	}()
	return func() { <-finished }
}
