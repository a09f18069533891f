package pgproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// listenAddr is where a proxy listens: a free port on the IPv4 loopback,
// so that only processes on this machine reach it.
const listenAddr = "127.0.0.1:0"

// dialTimeout bounds the connection to the upstream server.
const dialTimeout = 10 * time.Second

// acceptBackoff is how long the proxy waits after a failed accept that did
// not come from Close.
const acceptBackoff = 5 * time.Millisecond

// connInfo describes one client connection of a proxy.
type connInfo struct {
	// ApplicationName, User and Database are the parameters of the client's
	// StartupMessage (empty until it arrives).
	ApplicationName, User, Database string
	// Upstream is the server address the connection was made to.
	Upstream string
	// PID is the process id of the connection's server backend, from the
	// BackendKeyData the server sent (0 until then).
	PID int
}

// Proxy is a PostgreSQL wire-protocol proxy listening on the loopback. Its
// methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	ctx    context.Context // ends at Close; bounds dials
	cancel context.CancelFunc
	wg     sync.WaitGroup           // the accept loop and every connection's goroutines
	rules  atomic.Pointer[[]*Fault] // copy on write, under mu

	mu       sync.Mutex
	upstream string
	conns    map[*conn]struct{}
	closed   bool

	closeOnce sync.Once
	closeErr  error
}

// New starts a proxy to the PostgreSQL server at upstream (host:port),
// listening on a free port of the IPv4 loopback ([Proxy.Addr]). It listens
// at once; stop it with [Proxy.Close].
func New(upstream string) (*Proxy, error) {
	if err := checkUpstream(upstream); err != nil {
		return nil, fmt.Errorf("pgproxy: %w", err)
	}
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, fmt.Errorf("pgproxy: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		ln:       ln,
		ctx:      ctx,
		cancel:   cancel,
		upstream: upstream,
		conns:    make(map[*conn]struct{}),
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func checkUpstream(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("upstream %q: want host:port: %w", addr, err)
	}
	if host == "" || port == "" {
		return fmt.Errorf("upstream %q: want host:port", addr)
	}
	return nil
}

// Addr is the address the proxy listens on, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// currentUpstream is the server address new connections go to.
func (p *Proxy) currentUpstream() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.upstream
}

// SetUpstream sends new connections to addr (host:port), for instance after
// the server restarted on another port, so that clients keep the proxy's
// address. Open connections stay with their server; cancel requests for
// them still go there.
func (p *Proxy) SetUpstream(addr string) error {
	if err := checkUpstream(addr); err != nil {
		return fmt.Errorf("pgproxy: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.upstream = addr
	return nil
}

// Arm validates r and arms it: from now on it fires at its point on every
// connection in its scope, open or new, until it has fired r.Times times
// or the proxy closes. Rules fire in the order they were armed; at one
// point, the first cut ends the connection.
func (p *Proxy) Arm(r Rule) (*Fault, error) {
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("pgproxy: rule %s: %w", r, err)
	}
	f := &Fault{rule: r}
	p.mu.Lock()
	defer p.mu.Unlock()
	var rules []*Fault
	if old := p.rules.Load(); old != nil {
		rules = slices.Clone(*old)
	}
	rules = append(rules, f)
	p.rules.Store(&rules)
	return f, nil
}

// Close stops listening, cuts every connection, and returns once all the
// proxy's goroutines have ended. Calling it again returns the same error.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.cancel()
		if err := p.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			p.closeErr = fmt.Errorf("pgproxy: close listener: %w", err)
		}
		p.mu.Lock()
		p.closed = true
		for c := range p.conns {
			c.cut()
		}
		p.mu.Unlock()
	})
	p.wg.Wait()
	return p.closeErr
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors, say: wait a little, then go on.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(acceptBackoff):
			}
			continue
		}
		c := &conn{p: p, client: nc}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			nc.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go c.serve()
	}
}

func (p *Proxy) forget(c *conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// cancelTarget is the server a cancel request for (pid, key) goes to: that
// of the connection whose backend it names, else the current upstream.
func (p *Proxy) cancelTarget(pid uint32, key []byte) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if c.owns(pid, key) {
			return c.info().Upstream
		}
	}
	return p.upstream
}
