package pgproxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultListenAddr is where a proxy listens unless [WithListenAddr] says
// otherwise: a free port on the IPv4 loopback.
const DefaultListenAddr = "127.0.0.1:0"

// DefaultDialTimeout bounds the connection to the upstream server unless
// [WithDialTimeout] says otherwise.
const DefaultDialTimeout = 10 * time.Second

// acceptBackoff is how long the proxy waits after a failed accept that did
// not come from Close.
const acceptBackoff = 5 * time.Millisecond

// Option configures [New].
type Option func(*config)

type config struct {
	listen      string
	dialTimeout time.Duration
}

// WithListenAddr makes the proxy listen on addr (host:port) instead of
// [DefaultListenAddr]. The host must be a loopback address (127.0.0.0/8,
// ::1) or "localhost"; New refuses any other.
func WithListenAddr(addr string) Option {
	return func(c *config) { c.listen = addr }
}

// WithDialTimeout bounds each connection to the upstream server, instead of
// [DefaultDialTimeout].
func WithDialTimeout(d time.Duration) Option {
	return func(c *config) { c.dialTimeout = d }
}

// ConnInfo describes one client connection of a proxy.
type ConnInfo struct {
	// ID identifies the connection within its proxy.
	ID ConnID
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
	ln          net.Listener
	dialTimeout time.Duration
	ctx         context.Context // ends at Close; bounds dials
	cancel      context.CancelFunc
	wg          sync.WaitGroup // the accept loop and every connection's goroutines
	nextID      atomic.Uint64
	rules       atomic.Pointer[[]*Fault] // copy on write, under mu

	mu       sync.Mutex
	upstream string
	conns    map[*conn]struct{}
	closed   bool

	closeOnce sync.Once
	closeErr  error
}

// New starts a proxy to the PostgreSQL server at upstream (host:port). It
// listens at once; stop it with [Proxy.Close].
func New(upstream string, opts ...Option) (*Proxy, error) {
	cfg := config{listen: DefaultListenAddr, dialTimeout: DefaultDialTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	if err := checkUpstream(upstream); err != nil {
		return nil, fmt.Errorf("pgproxy: %w", err)
	}
	if cfg.dialTimeout <= 0 {
		return nil, fmt.Errorf("pgproxy: dial timeout %s: want more than zero", cfg.dialTimeout)
	}
	if err := checkLoopback(cfg.listen); err != nil {
		return nil, fmt.Errorf("pgproxy: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return nil, fmt.Errorf("pgproxy: listen: %w", err)
	}
	// "localhost" could resolve to anything: check what was bound.
	if a, ok := ln.Addr().(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
		ln.Close()
		return nil, fmt.Errorf("pgproxy: refusing to listen on %s: not a loopback address", ln.Addr())
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		ln:          ln,
		dialTimeout: cfg.dialTimeout,
		ctx:         ctx,
		cancel:      cancel,
		upstream:    upstream,
		conns:       make(map[*conn]struct{}),
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// checkLoopback accepts host:port with a loopback host.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("refusing to listen on %q: the proxy listens only on a loopback address (127.0.0.1, ::1, localhost)", addr)
	}
	return nil
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

// Upstream is the server address new connections go to.
func (p *Proxy) Upstream() string {
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
// or is disarmed. Rules fire in the order they were armed; at one point,
// delays add up and the first cut ends the connection.
func (p *Proxy) Arm(r Rule) (*Fault, error) {
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("pgproxy: rule %s: %w", r, err)
	}
	f := &Fault{rule: r, proxy: p}
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

// remove drops a disarmed fault from the rules.
func (p *Proxy) remove(f *Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.rules.Load()
	if old == nil {
		return
	}
	rules := slices.DeleteFunc(slices.Clone(*old), func(g *Fault) bool { return g == f })
	p.rules.Store(&rules)
}

// Conns lists the open client connections, by ID.
func (p *Proxy) Conns() []ConnInfo {
	p.mu.Lock()
	infos := make([]ConnInfo, 0, len(p.conns))
	for c := range p.conns {
		infos = append(infos, c.info())
	}
	p.mu.Unlock()
	slices.SortFunc(infos, func(a, b ConnInfo) int { return cmp.Compare(a.ID, b.ID) })
	return infos
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
		c := &conn{p: p, client: nc, done: make(chan struct{})}
		c.id = ConnID(p.nextID.Add(1))
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
