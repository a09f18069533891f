package harness

import (
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"
)

// SystemClock is the adapters.Clock that reads the system's time: what an
// instance gets when its adapter does not accept the harness's clock, and
// what the harness's tests hand the instances they build themselves.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// ManualClock is the harness's clock for implementations that accept it.
// It runs at the pace of real time from wherever it was set, so that a
// lease or a timeout an implementation measures on it runs out as it would
// in production; the harness jumps it (Set) to play days in a moment, and
// stops it (Freeze) where a play needs exact times, as the retention
// plays do. It is safe for concurrent use.
type ManualClock struct {
	mu sync.Mutex
	// at is the clock's reading at since; since is zero while the clock
	// is frozen.
	at    time.Time
	since time.Time
}

// NewManualClock returns a frozen clock that reads t until it is set or
// started.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{at: t} }

// NewRunningClock returns a clock that reads t now and runs on from there.
func NewRunningClock(t time.Time) *ManualClock { return &ManualClock{at: t, since: time.Now()} }

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

func (c *ManualClock) nowLocked() time.Time {
	if c.since.IsZero() {
		return c.at
	}
	return c.at.Add(time.Since(c.since))
}

// Set moves the clock to t, forwards or backwards; a running clock runs
// on from t.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = t
	if !c.since.IsZero() {
		c.since = time.Now()
	}
}

// Freeze stops the clock where it is.
func (c *ManualClock) Freeze() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.since = c.nowLocked(), time.Time{}
}

// Run starts a frozen clock again, from where it stands.
func (c *ManualClock) Run() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.since.IsZero() {
		c.since = time.Now()
	}
}

// clockEpoch is where the harness's clocks start their draw: far from the
// real time, so that an implementation that reads the system clock
// instead is noticed.
var clockEpoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// ClockStart is the time a play's clock starts at: a day in the ten years
// from 2030 and a time of day, to the microsecond, both drawn from the
// run's seed and the play's name. A run's plays do not all start at
// midnight, so a key or a check that depends on the calendar (the claim's
// UTC day or hour) meets days and hours that end inside a play.
func ClockStart(seed uint64, play string) time.Time {
	h := fnv.New64a()
	h.Write([]byte("clock " + play))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	day := rng.IntN(3653)
	tod := time.Duration(rng.Int64N(int64(24*time.Hour/time.Microsecond))) * time.Microsecond
	return clockEpoch.AddDate(0, 0, day).Add(tod)
}
