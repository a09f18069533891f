package destination

import (
	"context"
	"fmt"
	"time"
)

// Quiet returns once the destination has had no request in progress and
// none arriving (connections refused by Down included) for period, counted
// from the call at the earliest, or with an error when ctx ends first. The
// harness uses it to wait for an implementation whose external effects are
// sent in the background, at its own pace. It counts from the call, not
// only from the last request, because the caller has just seen effects
// committed: a request that came long before the commits says nothing of
// when the relay will send them. [Server.Settle] ends sooner when the
// caller knows which effects are owed.
func (s *Server) Quiet(ctx context.Context, period time.Duration) error {
	called := time.Now()
	err := s.await(ctx, func() (time.Duration, time.Time) { return period, later(s.last, called) })
	if err != nil {
		return fmt.Errorf("destination %s: wait for %v without requests: %w", s.url, period, err)
	}
	return nil
}

// await returns once no request is in progress and quiet, called with
// s.mu held whenever something changed, says that a period has passed
// since the time it returns; or with ctx's cause when ctx ends first.
// Every arrival, completion and [Server.Expect] wakes it to ask again.
func (s *Server) await(ctx context.Context, quiet func() (period time.Duration, since time.Time)) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		s.mu.Lock()
		busy := s.inFlight > 0
		period, since := quiet()
		wait := period - time.Since(since)
		changed := s.changed
		s.mu.Unlock()
		if !busy && wait <= 0 {
			return nil
		}
		var elapsed <-chan time.Time
		if !busy {
			timer.Reset(wait)
			elapsed = timer.C
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-changed:
		case <-elapsed:
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
