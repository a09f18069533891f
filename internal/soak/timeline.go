package soak

import (
	"math"
	"slices"
	"sync"
	"time"
)

// timeline gathers what the report draws: per second, the deliveries that
// ended and their latencies, and over the whole load a latency histogram.
// A second's latencies are kept only until the second is over, so memory
// does not grow with the run.
type timeline struct {
	mu       sync.Mutex
	seconds  []Second
	open     int       // the second whose latencies are in samples
	samples  []float64 // latencies (ns) of the deliveries that ended in it
	load     histogram // every delivery of the load phase
	acked    int       // acknowledged deliveries of the load phase
	loadOver bool
}

// add records a delivery that ended at end (from the start) after latency.
func (t *timeline) add(end, latency time.Duration, acked bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sec := int(end / time.Second)
	if sec < t.open {
		sec = t.open // a late clock read: count it in the open second
	}
	for t.open < sec {
		t.closeOpen()
	}
	for len(t.seconds) <= sec {
		t.seconds = append(t.seconds, Second{At: time.Duration(len(t.seconds)) * time.Second})
	}
	s := &t.seconds[sec]
	s.Completed++
	if acked {
		s.Acked++
	}
	t.samples = append(t.samples, float64(latency))
	if !t.loadOver {
		t.load.add(latency)
		if acked {
			t.acked++
		}
	}
}

// closeOpen computes the open second's percentiles and opens the next.
func (t *timeline) closeOpen() {
	if t.open < len(t.seconds) {
		t.seconds[t.open].Latency = percentiles(t.samples)
	}
	t.samples = t.samples[:0]
	t.open++
}

// endLoad marks the end of the load phase: later deliveries (settling)
// are drawn but not counted in the load's throughput and latency.
func (t *timeline) endLoad() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.loadOver = true
}

// result returns the timeline, the load's acknowledged deliveries and its
// latency.
func (t *timeline) result() ([]Second, int, Latency) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open < len(t.seconds) {
		t.seconds[t.open].Latency = percentiles(t.samples)
	}
	return slices.Clone(t.seconds), t.acked, t.load.latency()
}

// percentiles of samples (ns), which it sorts.
func percentiles(samples []float64) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	slices.Sort(samples)
	at := func(q float64) time.Duration {
		return time.Duration(samples[min(len(samples)-1, int(q*float64(len(samples))))])
	}
	return Latency{P50: at(0.50), P95: at(0.95), P99: at(0.99), Max: time.Duration(samples[len(samples)-1])}
}

// histogram counts latencies in buckets 2% wide, from a microsecond to
// hours: percentiles within 2% in a few kilobytes, however long the run.
type histogram struct {
	counts [histBuckets]int64
	total  int64
	max    time.Duration
}

const (
	histGrowth  = 1.02
	histBuckets = 1500 // 1.02^1500 µs is far beyond any timeout
)

func (h *histogram) add(d time.Duration) {
	us := max(float64(d)/float64(time.Microsecond), 1)
	b := min(int(math.Log(us)/math.Log(histGrowth)), histBuckets-1)
	h.counts[b]++
	h.total++
	h.max = max(h.max, d)
}

func (h *histogram) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.total)))
	var seen int64
	for b, n := range h.counts {
		if seen += n; seen >= rank {
			// The bucket's upper bound, never above the largest seen.
			return min(time.Duration(math.Pow(histGrowth, float64(b+1))*float64(time.Microsecond)), h.max)
		}
	}
	return h.max
}

func (h *histogram) latency() Latency {
	return Latency{P50: h.quantile(0.50), P95: h.quantile(0.95), P99: h.quantile(0.99), Max: h.max}
}
