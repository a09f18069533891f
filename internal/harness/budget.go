package harness

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrBudgetExpired marks a call to the implementation that the harness did
// not make, or cut short, because the play's budget had run out (see
// [Play.StartBudget]).
var ErrBudgetExpired = errors.New("the play's budget ran out")

// CallSlot is the longest one guarded call to an implementation can take
// with the given timeout: the timeout, then the grace period the guard
// allows a call that ignores its cancelled context.
func CallSlot(timeout time.Duration) time.Duration { return timeout + grace(timeout) }

// budget bounds a play's calls to its implementation in time.
type budget struct {
	mu       sync.Mutex
	limit    time.Duration
	started  time.Time
	ctx      context.Context // done when the budget has run out
	stop     context.CancelCauseFunc
	timer    *time.Timer
	progress *Progress // the play's progress when the budget ran out
}

// StartBudget bounds the play's calls to the implementation: once limit has
// passed, calls in flight have their contexts cancelled (an attempt then
// ends with an error wrapping [ErrBudgetExpired]) and no new call is made.
// The harness's own work, reading the ledger and the history, goes on, so
// that a play whose budget ran out can still report what it saw.
// Without StartBudget a play has no budget. Calling it again restarts the
// budget.
func (s *Play) StartBudget(limit time.Duration) {
	s.budget.mu.Lock()
	defer s.budget.mu.Unlock()
	s.releaseBudgetLocked()
	ctx, stop := context.WithCancelCause(context.Background())
	s.budget.limit, s.budget.started, s.budget.ctx, s.budget.stop = limit, time.Now(), ctx, stop
	s.budget.progress = nil
	s.budget.timer = time.AfterFunc(limit, func() {
		// Count the deliveries before cancelling them: a call cut short
		// by the budget is pending at expiry, not one more made.
		s.mu.Lock()
		p := Progress{Deliveries: len(s.history), Pending: s.pending}
		s.mu.Unlock()
		stop(ErrBudgetExpired)
		if !errors.Is(context.Cause(ctx), ErrBudgetExpired) {
			return // restarted or released first
		}
		p.Budget, p.Elapsed = limit, limit
		// The play's faults are counted from the database: give the
		// snapshot a moment of its own, independent of every caller.
		qctx, cancel := context.WithTimeout(context.Background(), snapshotTimeout)
		defer cancel()
		p.Faults, p.FaultsErr = s.faultsSoFar(qctx)
		s.budget.mu.Lock()
		defer s.budget.mu.Unlock()
		if s.budget.ctx == ctx {
			s.budget.progress = &p
		}
	})
}

// releaseBudgetLocked stops the budget's timer and releases its context
// without marking it run out. s.budget.mu must be held.
func (s *Play) releaseBudgetLocked() {
	if s.budget.timer != nil {
		s.budget.timer.Stop()
	}
	if s.budget.stop != nil {
		s.budget.stop(nil)
	}
}

// snapshotTimeout bounds the database reads of a progress snapshot.
const snapshotTimeout = 10 * time.Second

// BudgetExpired returns the play's progress at the moment its budget ran
// out, or nil while it has not (or the play has no budget). Right after
// the budget runs out the snapshot may still be being taken: ok is then
// true and the progress nil only until it is done.
func (s *Play) BudgetExpired() (p *Progress, ok bool) {
	s.budget.mu.Lock()
	ctx := s.budget.ctx
	s.budget.mu.Unlock()
	if ctx == nil || !errors.Is(context.Cause(ctx), ErrBudgetExpired) {
		return nil, false
	}
	deadline := time.NewTimer(snapshotTimeout + time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s.budget.mu.Lock()
		p := s.budget.progress
		s.budget.mu.Unlock()
		if p != nil {
			return p, true
		}
		select {
		case <-deadline.C:
			return nil, true
		case <-tick.C:
		}
	}
}

// OutOfBudget reports whether the play's budget has run out, without
// waiting for the snapshot of [Play.BudgetExpired].
func (s *Play) OutOfBudget() bool {
	s.budget.mu.Lock()
	ctx := s.budget.ctx
	s.budget.mu.Unlock()
	return ctx != nil && errors.Is(context.Cause(ctx), ErrBudgetExpired)
}

// bounded returns ctx, cancelled too when the play's budget runs out, and a
// function that releases it. It reports false, with ctx unchanged, when
// the budget has run out already.
func (s *Play) bounded(ctx context.Context) (context.Context, func(), bool) {
	s.budget.mu.Lock()
	b := s.budget.ctx
	s.budget.mu.Unlock()
	if b == nil {
		return ctx, func() {}, true
	}
	if b.Err() != nil {
		return ctx, func() {}, false
	}
	cctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(b, func() { cancel(ErrBudgetExpired) })
	return cctx, func() { stop(); cancel(nil) }, true
}

// stopBudget releases the budget's timer.
func (s *Play) stopBudget() {
	s.budget.mu.Lock()
	defer s.budget.mu.Unlock()
	s.releaseBudgetLocked()
}

// Progress is what a play has done so far: the evidence a play
// reports when it cannot finish.
type Progress struct {
	// Deliveries counts the deliveries that ended; Pending those still in
	// flight.
	Deliveries, Pending int
	// Faults counts, by kind, the firings of the faults the play armed so
	// far (see [Run.FaultsFired] for the kinds).
	Faults map[string]int64
	// FaultsErr is set when the faults could not be counted.
	FaultsErr error
	// Elapsed is the time since the play's budget started (or the play,
	// without one); Budget the budget, 0 without one.
	Elapsed, Budget time.Duration
}

// Progress returns what the play has done so far.
func (s *Play) Progress(ctx context.Context) Progress {
	s.mu.Lock()
	p := Progress{Deliveries: len(s.history), Pending: s.pending}
	s.mu.Unlock()
	s.budget.mu.Lock()
	p.Budget = s.budget.limit
	since := s.budget.started
	s.budget.mu.Unlock()
	if since.IsZero() {
		since = s.started
	}
	p.Elapsed = time.Since(since)
	p.Faults, p.FaultsErr = s.faultsSoFar(ctx)
	return p
}

// String says, on one line, what the progress shows, e.g. "118
// deliveries made, 3 pending; faults fired: db:sleep@effect 7".
func (p Progress) String() string {
	s := fmt.Sprintf("%d deliveries made, %d pending; faults fired: ", p.Deliveries, p.Pending)
	switch {
	case p.FaultsErr != nil:
		s += "unknown (" + p.FaultsErr.Error() + ")"
	case len(p.Faults) == 0:
		s += "none"
	default:
		var kinds []string
		for _, k := range slices.Sorted(maps.Keys(p.Faults)) {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, p.Faults[k]))
		}
		s += strings.Join(kinds, ", ")
	}
	return s
}

// faultsSoFar counts the firings of every fault the play armed, so far.
func (s *Play) faultsSoFar(ctx context.Context) (map[string]int64, error) {
	s.faultsMu.Lock()
	defer s.faultsMu.Unlock()
	return countByKind(ctx, s.armed)
}
