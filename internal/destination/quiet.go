package destination

import (
	"context"
	"fmt"
	"time"
)

// Quiet returns once the destination has had no request in progress and
// none arriving (connections refused by Down included) for period, or with
// an error when ctx ends first. The harness uses it to wait for an
// implementation whose external effects are sent in the background and
// that cannot tell when it is idle (no adapters.Drainer).
func (s *Server) Quiet(ctx context.Context, period time.Duration) error {
	timer := time.NewTimer(period)
	defer timer.Stop()
	for {
		s.mu.Lock()
		busy := s.inFlight > 0
		wait := period - time.Since(s.last)
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
