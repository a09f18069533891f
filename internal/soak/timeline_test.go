package soak

import (
	"testing"
	"time"
)

// The histogram's percentiles are within its 2% bucket width of the exact
// ones, and never above the largest latency seen.
func TestHistogramPercentiles(t *testing.T) {
	var h histogram
	for i := 1; i <= 10000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.50, 5 * time.Millisecond}, {0.95, 9500 * time.Microsecond}, {0.99, 9900 * time.Microsecond}} {
		got := h.quantile(tc.q)
		if got < tc.want || float64(got) > 1.02*float64(tc.want)+float64(time.Microsecond) {
			t.Errorf("p%.0f = %s; want %s within 2%%", tc.q*100, got, tc.want)
		}
	}
	if l := h.latency(); l.Max != 10*time.Millisecond || l.P99 > l.Max {
		t.Errorf("latency %+v", l)
	}
}

// The timeline has a second per second of the run, counts each delivery in
// the second it ended, and keeps the settling phase out of the load's
// figures.
func TestTimelineSeconds(t *testing.T) {
	var tl timeline
	tl.add(100*time.Millisecond, time.Millisecond, true)
	tl.add(900*time.Millisecond, 3*time.Millisecond, false)
	tl.add(2500*time.Millisecond, 2*time.Millisecond, true)
	tl.endLoad()
	tl.add(3100*time.Millisecond, 50*time.Millisecond, true)
	seconds, acked, latency := tl.result()
	if len(seconds) != 4 {
		t.Fatalf("%d seconds; want 4", len(seconds))
	}
	if s := seconds[0]; s.Completed != 2 || s.Acked != 1 || s.Latency.Max != 3*time.Millisecond {
		t.Errorf("second 0: %+v", s)
	}
	if s := seconds[1]; s.Completed != 0 || s.At != time.Second {
		t.Errorf("second 1: %+v", s)
	}
	if s := seconds[3]; s.Completed != 1 || s.Latency.P50 != 50*time.Millisecond {
		t.Errorf("second 3: %+v", s)
	}
	if acked != 2 || latency.Max != 3*time.Millisecond {
		t.Errorf("the load: %d acked, max latency %s; want 2 and 3ms (settling excluded)", acked, latency.Max)
	}
}
