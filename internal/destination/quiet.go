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
// when the relay will send them.
func (s *Server) Quiet(ctx context.Context, period time.Duration) error {
	called := time.Now()
	timer := time.NewTimer(period)
	defer timer.Stop()
	for {
		s.mu.Lock()
		busy := s.inFlight > 0
		wait := period - time.Since(later(s.last, called))
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
			return fmt.Errorf("destination %s: wait for %v without requests: %w", s.url, period, context.Cause(ctx))
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
