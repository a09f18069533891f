package harness

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/faults/pgproxy"
)

// UseProxy puts a wire-protocol proxy (package faults/pgproxy) between the
// spec's implementation and the server: every instance built after the call
// connects through it, so the harness can cut connections at protocol
// points, whatever the implementation's language. It returns the proxy,
// which the spec closes at its end; the run counts the firings of the rules
// armed on it (see [Run.FaultsFired]). Calling it again returns the same
// proxy.
func (s *Spec) UseProxy(ctx context.Context) (*Proxy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proxy != nil {
		return s.proxy, nil
	}
	cfg, err := pgx.ParseConfig(s.run.server.DSN())
	if err != nil {
		return nil, fmt.Errorf("proxy: parse the server's DSN: %w", err)
	}
	upstream := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	proxy, err := pgproxy.New(upstream)
	if err != nil {
		return nil, fmt.Errorf("proxy to %s: %w", upstream, err)
	}
	s.proxy = &Proxy{Proxy: proxy, spec: s}
	return s.proxy, nil
}

// serverDSN is the DSN instances connect with: the server's, or the
// proxy's when the spec uses one. The caller holds s.mu.
func (s *Spec) serverDSN() (string, error) {
	if s.proxy == nil {
		return s.run.server.DSN(), nil
	}
	return s.proxy.DSN(s.run.server.DSN())
}

// WaitCut waits until the server backends of the connections fault cut are
// gone, so that what follows does not race their rollback.
func (s *Spec) WaitCut(ctx context.Context, fault *pgproxy.Fault) error {
	return fault.WaitGone(ctx, s.run.admin)
}
