package harness

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/faults/pgproxy"
	"github.com/harmless-dev/harmless/internal/backends"
)

// UseProxy puts a wire-protocol proxy (package faults/pgproxy) between the
// play's implementation and the server: every instance built after the call
// connects through it, so the harness can cut connections at protocol
// points, whatever the implementation's language, and the implementation
// keeps its address when the server comes back from a crash at another
// one (see [Run.RestartServer]). It returns the proxy,
// which the play closes at its end; the run counts the firings of the rules
// armed on it (see [Run.FaultsFired]). Calling it again returns the same
// proxy.
func (s *Play) UseProxy(ctx context.Context) (*Proxy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proxy != nil {
		return s.proxy, nil
	}
	upstream, err := upstreamOf(s.run.server.DSN())
	if err != nil {
		return nil, err
	}
	proxy, err := pgproxy.New(upstream)
	if err != nil {
		return nil, fmt.Errorf("proxy to %s: %w", upstream, err)
	}
	s.proxy = &Proxy{proxy: proxy, play: s, upstream: upstream}
	return s.proxy, nil
}

// followServer points the play's proxy, if it has one, at the server at
// dsn, for the connections opened from now on: after a restart, a
// container's server is at a new host port, while the implementation keeps
// the proxy's address.
func (s *Play) followServer(dsn string) error {
	s.mu.Lock()
	proxy := s.proxy
	s.mu.Unlock()
	if proxy == nil {
		return nil
	}
	upstream, err := upstreamOf(dsn)
	if err != nil {
		return err
	}
	return proxy.follow(upstream)
}

// upstreamOf is the host:port a proxy reaches the server at dsn on.
func upstreamOf(dsn string) (string, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", fmt.Errorf("proxy: parse the server's DSN: %w", err)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), nil
}

// serverDSN is the DSN instances connect with: the server's, or the
// proxy's when the play uses one. The caller holds s.mu.
func (s *Play) serverDSN() (string, error) {
	if s.proxy == nil {
		return s.run.server.DSN(), nil
	}
	return s.proxy.proxy.DSN(s.run.server.DSN())
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
