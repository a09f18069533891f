package pgproxy

import (
	"maps"
	"slices"
	"sync/atomic"
)

// clientStats is what a proxy saw of one client's connections. The
// proxy's mu guards every field but the statement counts.
type clientStats struct {
	opened, open     int
	names            []string // distinct, in the order first seen
	inTx, autocommit atomic.Int64
}

// sawName notes an application_name a connection of the client carried,
// unless it is empty or known. The caller holds the proxy's mu.
func (st *clientStats) sawName(name string) {
	if name != "" && !slices.Contains(st.names, name) {
		st.names = append(st.names, name)
	}
}

// Seen is what a proxy saw of a client's connections (see [Proxy.Seen]).
type Seen struct {
	// Opened counts the connections that came in on the client's listeners
	// and started a session (sent a StartupMessage); Open those still open.
	// A cancel request, or a connection that sent nothing, is not counted.
	Opened, Open int
	// InTransaction and Autocommit count the statements the server
	// completed on them, inside a transaction block and outside one.
	InTransaction, Autocommit int64
	// ApplicationNames are the application_name values the connections
	// carried, each once, in the order first seen: in the StartupMessage,
	// and as the server reported them afterwards (application_name is
	// reported to the client in a ParameterStatus message whenever it
	// changes, by a SET say). None of them decides whose a connection is.
	ApplicationNames []string
	// PIDs are the process ids of the server backends of the open
	// connections, sorted, as the server announced them (BackendKeyData).
	PIDs []int
}

// Statements is the number of statements the server completed on the
// client's connections, in transaction blocks and outside them.
func (s Seen) Statements() int64 { return s.InTransaction + s.Autocommit }

// Seen reports what the proxy saw of client's connections so far, those
// closed included, except the PIDs, which are those of the connections
// open now. An empty client means every client.
func (p *Proxy) Seen(client string) Seen {
	p.mu.Lock()
	defer p.mu.Unlock()
	var s Seen
	for _, name := range slices.Sorted(maps.Keys(p.clients)) {
		if client != "" && name != client {
			continue
		}
		st := p.clients[name]
		s.Opened += st.opened
		s.Open += st.open
		s.InTransaction += st.inTx.Load()
		s.Autocommit += st.autocommit.Load()
		for _, n := range st.names {
			if !slices.Contains(s.ApplicationNames, n) {
				s.ApplicationNames = append(s.ApplicationNames, n)
			}
		}
	}
	for c := range p.conns {
		if client != "" && c.l.client != client {
			continue
		}
		if pid := c.info().PID; pid != 0 {
			s.PIDs = append(s.PIDs, pid)
		}
	}
	slices.Sort(s.PIDs)
	return s
}

// sawApplicationName notes an application_name the server reported on a
// connection that came in on l.
func (p *Proxy) sawApplicationName(l *Listener, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l.stats.sawName(name)
}
