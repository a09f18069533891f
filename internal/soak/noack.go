package soak

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/harmless-dev/harmless/internal/harness"
)

// NoAckError ends a soak in which no delivery was acknowledged or refused
// for Config.NoAckTimeout while deliveries kept ending with an unknown
// outcome, the first deliveries of new events among them, and no fault was
// in progress. Such an implementation is dead
// (its processes crash, perhaps on every delivery) or cannot work where it
// runs (it cannot reach its database): what it did not acknowledge is no
// evidence of how it deduplicates, so the soak stops rather than drive
// millions of deliveries at it and judge every event lost. The report's
// verdict is then "no-ack", and the events never acknowledged or refused are
// unsettled.
type NoAckError struct {
	// For is how long no delivery was acknowledged: from the last
	// answer, the start or the end of the last fault, whichever was last.
	For time.Duration
	// Unknown counts the deliveries that ended with an unknown outcome in
	// that time, and FirstError is the first one's error.
	Unknown    int
	FirstError string
	// Crashes counts the crashes of the implementation's processes in
	// that time, and TotalCrashes in the whole soak; FirstCrash describes
	// the first crash of instance FirstCrashOf, the lowest instance that
	// crashed ("" and 0 without a crash).
	Crashes, TotalCrashes int
	FirstCrashOf          int
	FirstCrash            string
}

func (e *NoAckError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "no delivery was acknowledged for %s (%d ended with an unknown outcome, none was refused)", e.For.Round(100*time.Millisecond), e.Unknown)
	switch {
	case e.Crashes > 0:
		fmt.Fprintf(&b, ", during which the implementation's processes crashed %s and were restarted", harness.Times(e.Crashes))
		if e.TotalCrashes > e.Crashes {
			fmt.Fprintf(&b, " (%s in the whole soak)", harness.Times(e.TotalCrashes))
		}
		fmt.Fprintf(&b, "; the first crash of instance %d: %s", e.FirstCrashOf, e.FirstCrash)
	case e.TotalCrashes > 0:
		fmt.Fprintf(&b, "; the implementation's processes did not crash in that time (%s before)", harness.Times(e.TotalCrashes))
	}
	if e.FirstError != "" {
		fmt.Fprintf(&b, "; the first delivery error in that time: %s", e.FirstError)
	}
	return b.String()
}

// ackWatch is what the no-ack watchdog knows of the deliveries since the
// last answer. The instances' delivery loops update it as each delivery
// ends.
type ackWatch struct {
	mu       sync.Mutex
	since    time.Time // the last answer, or the start or the end of the last fault
	unknowns int       // deliveries ended with an unknown outcome since then
	fresh    int       // those of them that were their event's first delivery
	firstErr string    // the first of their errors
}

// restart begins a new period without an answer at at: a delivery was
// answered, or a fault was in progress, which excuses what came before.
func (w *ackWatch) restart(at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if at.After(w.since) {
		w.since = at
	}
	w.unknowns, w.fresh, w.firstErr = 0, 0, ""
}

// answered notes a delivery acknowledged or refused.
func (w *ackWatch) answered(at time.Time) { w.restart(at) }

// unknown notes a delivery that ended with err, an unknown outcome; first
// says it was its event's first delivery.
func (w *ackWatch) unknown(err error, first bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unknowns++
	if first {
		w.fresh++
	}
	if w.firstErr == "" && err != nil {
		w.firstErr = err.Error()
	}
}

func (w *ackWatch) state() (since time.Time, unknowns, fresh int, firstErr string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.since, w.unknowns, w.fresh, w.firstErr
}

// noAckTimeout is Config.NoAckTimeout, or its default.
func (s *soaker) noAckTimeout() time.Duration {
	if s.cfg.NoAckTimeout > 0 {
		return s.cfg.NoAckTimeout
	}
	return DefaultNoAckTimeout
}

// watchAcks ends the soak with a NoAckError once no delivery was answered
// for the no-ack timeout while deliveries ended with an unknown outcome,
// among them the first deliveries of as many new events as there are
// instances. Failed redeliveries alone are no evidence that the
// implementation is dead: one that fails some events for good (a poison
// message) and answers every other still fails those alone for the whole
// settling phase, and they are judged lost, as they should be; a dead
// implementation fails the new events too.
// Time while a fault is in progress does not count: a crashed server
// refuses every connection until the nemesis restarts it, however long
// that takes, and that is the harness's doing. A delivery still running is
// no evidence either way until it ends (at the latest at its delivery
// timeout, as hung). It watches until done closes or ctx ends; the
// returned function waits for it.
func (s *soaker) watchAcks(ctx context.Context, done <-chan struct{}) func() {
	limit := s.noAckTimeout()
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(max(min(limit/10, 250*time.Millisecond), 10*time.Millisecond))
		defer t.Stop()
		// crashesBefore counts the crashes before period, the start of the
		// current period without an answer, as seen at the first tick after
		// it began (at the start, none: no delivery was made yet).
		period, _, _, _ := s.acks.state()
		crashesBefore := s.crashCount()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-s.fatalCh:
				return
			case now := <-t.C:
				if s.nem.Current() != "" {
					s.acks.restart(now)
				}
				since, unknowns, fresh, firstErr := s.acks.state()
				if !since.Equal(period) {
					period, crashesBefore = since, s.crashCount()
				}
				if fresh < s.cfg.Instances || now.Sub(since) < limit {
					continue
				}
				crashes := s.crashes()
				e := &NoAckError{For: now.Sub(since), Unknown: unknowns, FirstError: firstErr}
				for _, c := range crashes {
					e.TotalCrashes += c.Count
				}
				if len(crashes) > 0 {
					e.FirstCrashOf, e.FirstCrash = crashes[0].Instance, crashes[0].First
				}
				e.Crashes = max(e.TotalCrashes-crashesBefore, 0)
				s.fail(e)
				return
			}
		}
	}()
	return func() { <-finished }
}

// crashes returns the crashes of each instance of the implementation so
// far, as the harness's supervisor of its processes recorded them (see
// harness.Play.CrashCounts)
// and the deliveries that panicked (see harness.PanicCrash), by instance.
func (s *soaker) crashes() []Crash {
	byInstance := map[int]*Crash{}
	for n, c := range s.play.CrashCounts() {
		byInstance[n] = &Crash{Instance: n, Count: len(c), First: c[0]}
	}
	s.mu.Lock()
	for n, p := range s.panics {
		if c := byInstance[n]; c != nil {
			c.Count += p.Count // an instance in a process of its own does not panic here: never both
		} else {
			byInstance[n] = &Crash{Instance: n, Count: p.Count, First: p.First}
		}
	}
	s.mu.Unlock()
	out := make([]Crash, 0, len(byInstance))
	for _, n := range slices.Sorted(maps.Keys(byInstance)) {
		out = append(out, *byInstance[n])
	}
	return out
}

// crashCount counts the crashes so far.
func (s *soaker) crashCount() int {
	n := len(s.play.Crashes())
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.panics {
		n += p.Count
	}
	return n
}

// panicked notes that a delivery by instance n panicked, crash describing it.
func (s *soaker) panicked(n int, crash string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.panics == nil {
		s.panics = map[int]*Crash{}
	}
	if p := s.panics[n]; p != nil {
		p.Count++
	} else {
		s.panics[n] = &Crash{Instance: n, Count: 1, First: crash}
	}
}
