package destination

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults"
)

type action int

const (
	actFail action = iota
	actDrop
	actSlow
	actHold
	actDown
)

// slot is where a per-request fault is planned.
type slot struct {
	id      Identity
	attempt int
}

// Fault is one planned destination fault. It is a faults.Armed.
type Fault struct {
	kind    string
	action  action
	status  int
	delay   time.Duration
	fired   atomic.Int64
	arrived chan struct{}
	once    sync.Once // closes arrived
	release chan struct{}
	relOnce sync.Once // closes release
}

var _ faults.Armed = (*Fault)(nil)

func newFault(kind string, a action) *Fault {
	return &Fault{kind: kind, action: a, arrived: make(chan struct{}), release: make(chan struct{})}
}

// Kind is "dest:status-500", "dest:status-503", "dest:drop-after-process",
// "dest:slow", "dest:hold" or "dest:down".
func (f *Fault) Kind() string { return f.kind }

// Fired reports how many times the fault fired: at most once for a fault
// planned on one attempt, once per refused connection for Down. A firing
// counts before the fault acts. It reads a counter in memory and never
// fails; ctx and the error are there to make a Fault a faults.Armed.
func (f *Fault) Fired(context.Context) (int64, error) { return f.fired.Load(), nil }

// Arrived is closed when the fault first fires: for Hold, when its request
// arrived and is being held; for Slow, once the request was processed and
// its answer is being delayed (its key is then in progress).
func (f *Fault) Arrived() <-chan struct{} { return f.arrived }

// Release lets a Hold fault's request go: the destination drops it, closing
// the connection without an answer and without processing it. Releasing
// before the request arrives makes it drop at once. It does nothing for the
// other faults and may be called more than once.
func (f *Fault) Release() { f.relOnce.Do(func() { close(f.release) }) }

func (f *Fault) fire() {
	f.fired.Add(1)
	f.once.Do(func() { close(f.arrived) })
}

// Fail makes the destination answer ev's attempt-th request with status
// (500 or 503) without processing it or taking its key, as a failing proxy
// in front of the API would.
func (s *Server) Fail(ev adapters.Event, attempt, status int) (*Fault, error) {
	if status != 500 && status != 503 {
		return nil, fmt.Errorf("destination: plan a failure with status %d: only 500 and 503", status)
	}
	return s.plan(ev, attempt, newFault(fmt.Sprintf("dest:status-%d", status), actFail), func(f *Fault) { f.status = status })
}

// DropAfterProcess makes the destination handle ev's attempt-th request as
// usual (processing it if it is the first with its key, and keeping the
// answer for replays), then close the connection without answering: the
// ambiguous outcome of an external call. A retry with the same key gets the
// kept answer, replayed.
func (s *Server) DropAfterProcess(ev adapters.Event, attempt int) (*Fault, error) {
	return s.plan(ev, attempt, newFault("dest:drop-after-process", actDrop), nil)
}

// Slow makes the destination handle ev's attempt-th request as usual at
// once (processing it if it is the first with its key) and answer only d
// later. Until then the key is in progress: other requests with it get 409.
// If the client gives up first, or the server closes, the request is
// dropped, its processing done.
func (s *Server) Slow(ev adapters.Event, attempt int, d time.Duration) (*Fault, error) {
	if d <= 0 {
		return nil, fmt.Errorf("destination: plan a slow answer of %v: the delay must be positive", d)
	}
	return s.plan(ev, attempt, newFault("dest:slow", actSlow), func(f *Fault) { f.delay = d })
}

// Hold makes the destination hold ev's attempt-th request, unprocessed,
// until [Fault.Release] (or Close, or the client giving up), then drop it
// without processing it or taking its key. [Fault.Arrived] tells when the
// request is held: the harness uses it to stop an implementation between
// its commit and its send.
func (s *Server) Hold(ev adapters.Event, attempt int) (*Fault, error) {
	return s.plan(ev, attempt, newFault("dest:hold", actHold), nil)
}

// plan records f for ev's attempt-th request; set, if not nil, completes f.
func (s *Server) plan(ev adapters.Event, attempt int, f *Fault, set func(*Fault)) (*Fault, error) {
	if attempt < 1 {
		return nil, fmt.Errorf("destination: plan %s for %s attempt %d: attempts count from 1", f.kind, ev, attempt)
	}
	if set != nil {
		set(f)
	}
	k := slot{IdentityOf(ev), attempt}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.planned[k]; ok {
		return nil, fmt.Errorf("destination: plan %s for %s attempt %d: %s is already planned there", f.kind, ev, attempt, old.kind)
	}
	s.planned[k] = f
	return f, nil
}

// ErrDown is returned by Down when the destination is already down.
var ErrDown = errors.New("destination is already down")

// Down takes the destination down until [Server.Up]: every connection
// accepted meanwhile is reset at once, before anything is read, and
// recorded as Refused; the returned fault fires once per such connection.
// Requests already being handled finish as usual. A client sees a reset
// connection (ECONNRESET or EOF) rather than ECONNREFUSED: keeping the
// listener open is what lets the destination count the attempts it refused,
// and keeps the port its own, so that the URL stays the same.
func (s *Server) Down() (*Fault, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.outage != nil {
		return nil, ErrDown
	}
	s.outage = newFault("dest:down", actDown)
	s.logf("destination %s: down", s.url)
	return s.outage, nil
}

// Up ends the outage Down began; it does nothing when the destination is up.
func (s *Server) Up() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.outage != nil {
		s.logf("destination %s: up after refusing %d connections", s.url, s.outage.fired.Load())
	}
	s.outage = nil
}

// gate is the server's listener: while the destination is down, it resets
// every connection it accepts.
type gate struct {
	net.Listener
	s *Server
}

func (g *gate) Accept() (net.Conn, error) {
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !g.s.refuse() {
			return c, nil
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // reset rather than close gracefully
		}
		_ = c.Close()
	}
}

// refuse records a refused connection and tells whether the destination is
// down.
func (s *Server) refuse() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.outage == nil {
		return false
	}
	s.outage.fire()
	s.refused = time.Now()
	s.record(&Record{At: s.refused, Outcome: Refused, Fault: s.outage.kind})
	s.touchLocked()
	return true
}
