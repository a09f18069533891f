package harness

import (
	"testing"
	"time"
)

// TestBackoffDoublesToItsCap: redeliveries wait 0, 10 ms, 20 ms, ...
// doubling up to maxBackoff, so that DefaultMaxTries attempts span about
// two seconds: time for a lock or a dead pooled connection to clear, and
// a bounded wait for an implementation that never acknowledges.
func TestBackoffDoublesToItsCap(t *testing.T) {
	want := []time.Duration{0, 10, 20, 40, 80, 160, 320, 500, 500, 500}
	var total time.Duration
	for k := 1; k <= DefaultMaxTries; k++ {
		got := backoff(k)
		if got != want[k-1]*time.Millisecond {
			t.Errorf("backoff(%d) = %s; want %s", k, got, want[k-1]*time.Millisecond)
		}
		total += got
	}
	if total != 2130*time.Millisecond {
		t.Errorf("%d attempts wait %s in all; want 2.13s", DefaultMaxTries, total)
	}
	if got := backoff(100); got != maxBackoff {
		t.Errorf("backoff(100) = %s; want the cap %s", got, maxBackoff)
	}
}
