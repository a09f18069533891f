package harness

import (
	"context"
	"fmt"

	"github.com/harmless-dev/harmless/faults/pgproxy"
	"github.com/harmless-dev/harmless/internal/backends"
	"github.com/harmless-dev/harmless/internal/pgaddr"
)

// Every play puts a wire-protocol proxy (package faults/pgproxy) between
// its implementation instances and the server: instance n connects through
// listeners of its own, one for each host of the server's DSN, in the
// DSN's order, and a connection is instance n's because it came in on one
// of them. So the harness can cut an instance's connections at protocol
// points, whatever the implementation's language and whatever
// application_name it gives its connections, and find their backends by
// the pids the proxy saw, never by a name the implementation chose. On a
// replicated formation, instance n has a listener per node and its DSN
// stays multi-host, so that a client that tries the hosts in turn finds
// the primary as it would without the proxy, and one that uses only the
// first host reaches only that node.

// ProxyClient is the name of instance n's client on the play's proxy, for
// rules scoped to its connections (pgproxy.Scope{Client:
// ProxyClient(n)}): "instance n".
func ProxyClient(n int) string { return fmt.Sprintf("instance %d", n) }

// Proxy returns the play's wire proxy (package faults/pgproxy), which
// stands between every instance of the play and the server, so that the
// harness can cut their connections at protocol points, and the instances
// keep their addresses when the server comes back from a crash at another
// one (see [Run.RestartServer]). The play closes it at its end; the run
// counts the firings of the rules armed on it (see [Run.FaultsFired]).
// Every call returns the same proxy.
func (s *Play) Proxy() *Proxy { return s.useProxy() }

// useProxy is the play's proxy, made on first use.
func (s *Play) useProxy() *Proxy {
	if p := s.proxy.Load(); p != nil {
		return p
	}
	p := &Proxy{proxy: pgproxy.New(), play: s}
	if s.proxy.CompareAndSwap(nil, p) {
		return p
	}
	// Another caller made one first; this one has no listener yet.
	_ = p.proxy.Close()
	return s.proxy.Load()
}

// followServer points the listeners of the play's proxy at the server at
// dsn, for the connections opened from now on: after a restart, a
// container's server is at a new host port, while the instances keep the
// listeners' addresses. A listener whose upstream is still one of the
// server's hosts stays: a formation's nodes keep their ports, and only
// the order of its DSN changes when the primary does.
func (s *Play) followServer(dsn string) error {
	proxy := s.proxy.Load()
	if proxy == nil {
		return nil
	}
	addrs, err := serverAddrs(dsn)
	if err != nil {
		return err
	}
	return proxy.follow(addrs)
}

// serverAddrs lists the address of every server dsn names, in order, as
// pgx reads and dials it.
func serverAddrs(dsn string) ([]string, error) {
	addrs, err := pgaddr.Of(dsn)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	return addrs, nil
}

// instanceDSN is the DSN instance n connects with: the server's, through
// listeners of instance n's own on the play's proxy.
func (s *Play) instanceDSN(n int) (string, error) {
	dsn, err := s.useProxy().proxy.DSN(ProxyClient(n), s.run.server.DSN())
	if err != nil {
		return "", fmt.Errorf("instance %d's DSN through the play's proxy: %w", n, err)
	}
	return dsn, nil
}

// instancePIDs are the pids of the server backends of the connections the
// play's instances have open through its proxy now.
func (s *Play) instancePIDs() []int {
	proxy := s.proxy.Load()
	if proxy == nil {
		return nil
	}
	return proxy.proxy.Seen("").PIDs
}

// TerminateConnections terminates the server backends of the connections
// the play's instances have open through its proxy, of the run's role
// only, and waits until they are gone (see [backends.Terminate]). It
// returns their pids. The instances see their connections die as in a
// server-side kill (SQLSTATE 57P01), and reconnect as they do.
func (s *Play) TerminateConnections(ctx context.Context) ([]int, error) {
	pinned, err := backends.Backends(ctx, s.run.admin, s.instancePIDs()...)
	if err != nil {
		return nil, fmt.Errorf("terminate the connections of play %s: %w", s.name, err)
	}
	pids, err := backends.Terminate(ctx, s.run.admin, pinned...)
	if err != nil {
		return pids, fmt.Errorf("terminate the connections of play %s: %w", s.name, err)
	}
	return pids, nil
}

// WaitCut waits until the server backends of the connections fault cut are
// gone, so that what follows does not race their rollback: a cut backend
// ends on its own time and may hold locks (an event's marker row) until
// then. It pins the backends by pid and start time first (see
// [backends.Backends]), so a pid the system reuses meanwhile is not waited
// for.
func (s *Play) WaitCut(ctx context.Context, fault *pgproxy.Fault) error {
	pinned, err := backends.Backends(ctx, s.run.admin, fault.PIDs()...)
	if err != nil {
		return fmt.Errorf("wait for the backends cut by %s: %w", fault, err)
	}
	if err := backends.WaitGone(ctx, s.run.admin, pinned...); err != nil {
		return fmt.Errorf("wait for the backends cut by %s: %w", fault, err)
	}
	return nil
}
