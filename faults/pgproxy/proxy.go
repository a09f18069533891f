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

	"github.com/harmless-dev/harmless/internal/pgaddr"
)

// listenAddr is where a listener listens: a free port on the IPv4
// loopback, so that only processes on this machine reach it.
const listenAddr = "127.0.0.1:0"

// dialTimeout bounds the connection to the upstream server.
const dialTimeout = 10 * time.Second

// acceptBackoff is how long a listener waits after a failed accept that
// did not come from Close.
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

// Proxy is a PostgreSQL wire-protocol proxy. It has listeners on the
// loopback ([Proxy.Listen]), each of which belongs to a client and
// forwards to an upstream server; a connection belongs to the client of
// the listener it came in on, whatever it says about itself. Its methods
// are safe for concurrent use.
type Proxy struct {
	ctx    context.Context // ends at Close; bounds dials
	cancel context.CancelFunc
	wg     sync.WaitGroup           // the accept loops and every connection's goroutines
	rules  atomic.Pointer[[]*Fault] // copy on write, under mu

	mu        sync.Mutex
	listeners []*Listener // in the order opened
	clients   map[string]*clientStats
	conns     map[*conn]struct{}
	closed    bool

	closeOnce sync.Once
	closeErr  error
}

// Listener is one of a proxy's listeners: a port on the loopback whose
// connections belong to a client and go to an upstream server.
type Listener struct {
	p      *Proxy
	ln     net.Listener
	client string
	stats  *clientStats

	mu       sync.Mutex
	upstream string
}

// New returns a proxy with no listener yet: open them with
// [Proxy.Listen], or let [Proxy.DSN] open them. Stop it with
// [Proxy.Close].
func New() *Proxy {
	ctx, cancel := context.WithCancel(context.Background())
	return &Proxy{
		ctx:     ctx,
		cancel:  cancel,
		clients: map[string]*clientStats{},
		conns:   map[*conn]struct{}{},
	}
}

func checkUpstream(addr string) error {
	if pgaddr.IsSocket(addr) {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("upstream %q: want host:port, or a Unix-domain socket's path: %w", addr, err)
	}
	if host == "" || port == "" {
		return fmt.Errorf("upstream %q: want host:port, or a Unix-domain socket's path", addr)
	}
	return nil
}

// Listen opens a listener for client on a free port of the IPv4 loopback
// ([Listener.Addr]) that forwards its connections to the server at
// upstream (host:port). Every connection that comes in on it is client's:
// the rules scoped to client ([Scope]) apply to it, and [Proxy.Seen]
// counts it. A client may have several listeners, one for each server of
// a replicated database, say. client must not be empty.
func (p *Proxy) Listen(client, upstream string) (*Listener, error) {
	if client == "" {
		return nil, errors.New("pgproxy: listen: a listener needs a client name")
	}
	if err := checkUpstream(upstream); err != nil {
		return nil, fmt.Errorf("pgproxy: listen for %s: %w", client, err)
	}
	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, fmt.Errorf("pgproxy: listen for %s: %w", client, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		ln.Close()
		return nil, fmt.Errorf("pgproxy: listen for %s: %w", client, net.ErrClosed)
	}
	l := &Listener{p: p, ln: ln, client: client, stats: p.statsOf(client), upstream: upstream}
	p.listeners = append(p.listeners, l)
	p.wg.Add(1)
	go l.accept()
	return l, nil
}

// statsOf is client's record, made on first use. The caller holds p.mu.
func (p *Proxy) statsOf(client string) *clientStats {
	st, ok := p.clients[client]
	if !ok {
		st = &clientStats{}
		p.clients[client] = st
	}
	return st
}

// Listeners returns client's listeners, in the order they were opened;
// every client's for "", as [Proxy.Seen] counts them.
func (p *Proxy) Listeners(client string) []*Listener {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*Listener
	for _, l := range p.listeners {
		if client == "" || l.client == client {
			out = append(out, l)
		}
	}
	return out
}

// Addr is the address the listener listens on, host:port.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Client is the client the listener's connections belong to.
func (l *Listener) Client() string { return l.client }

// Upstream is the server address the listener's new connections go to.
func (l *Listener) Upstream() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.upstream
}

// SetUpstream sends the listener's new connections to addr (host:port),
// for instance after the server restarted on another port, so that
// clients keep the listener's address. Open connections stay with their
// server; cancel requests for them still go there.
func (l *Listener) SetUpstream(addr string) error {
	if err := checkUpstream(addr); err != nil {
		return fmt.Errorf("pgproxy: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.upstream = addr
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

// Close stops every listener, cuts every connection, and returns once all
// the proxy's goroutines have ended. Calling it again returns the same
// error.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.cancel()
		p.mu.Lock()
		p.closed = true
		var errs []error
		for _, l := range p.listeners {
			if err := l.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, fmt.Errorf("pgproxy: close listener %s: %w", l.Addr(), err))
			}
		}
		for c := range p.conns {
			c.cut()
		}
		p.mu.Unlock()
		p.closeErr = errors.Join(errs...)
	})
	p.wg.Wait()
	return p.closeErr
}

func (l *Listener) accept() {
	p := l.p
	defer p.wg.Done()
	for {
		nc, err := l.ln.Accept()
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
		c := &conn{p: p, l: l, client: nc}
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
	if c.started {
		c.l.stats.open--
	}
	p.mu.Unlock()
}

// opened counts c, whose client has sent its StartupMessage, as one of its
// client's connections.
func (p *Proxy) opened(c *conn, applicationName string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.started = true
	c.l.stats.opened++
	c.l.stats.open++
	c.l.stats.sawName(applicationName)
}

// cancelTarget is the server a cancel request for (pid, key) that came in
// on l goes to: that of the connection whose backend it names, else l's
// current upstream.
func (p *Proxy) cancelTarget(l *Listener, pid uint32, key []byte) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if c.owns(pid, key) {
			return c.info().Upstream
		}
	}
	return l.Upstream()
}
