package provision

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// dsnCheckTimeout bounds the check of an explicit DSN, so that a DSN naming
// an unreachable host fails in reasonable time even without connect_timeout.
const dsnCheckTimeout = 30 * time.Second

// openDSN checks the explicit DSN: it must parse and connect.
func openDSN(ctx context.Context, st settings) (*Server, error) {
	cfg, err := pgx.ParseConfig(st.dsn)
	if err != nil {
		// pgconn's error redacts the password.
		return nil, fmt.Errorf("provision: the DSN from %s is not a valid connection string: %w", st.dsnSource, err)
	}
	ctx, cancel := context.WithTimeout(ctx, dsnCheckTimeout)
	defer cancel()
	version, err := serverVersion(ctx, st.dsn)
	if err != nil {
		return nil, fmt.Errorf("provision: cannot use the server named by %s: %w", st.dsnSource, err)
	}
	st.logf("using the server named by %s: PostgreSQL %s", st.dsnSource, version)
	srv := &Server{Kind: KindDSN, Version: version, dsn: st.dsn, logf: st.logf}
	if cfg.Password != "" {
		srv.secrets = []string{cfg.Password}
	}
	return srv, nil
}

// serverVersion connects once and returns server_version.
func serverVersion(ctx context.Context, dsn string) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "", fmt.Errorf("SHOW server_version: %w", err)
	}
	return v, nil
}

// waitReady polls the server until it accepts connections (as pg_isready
// would, plus a query) or until timeout or ctx ends, and returns its
// server_version. lastWords, if not nil, adds context (such as the server's
// log) to the error.
func waitReady(ctx context.Context, dsn string, timeout time.Duration, lastWords func() string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 3*time.Second)
		v, err := serverVersion(attempt, dsn)
		cancelAttempt()
		if err == nil {
			return v, nil
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("not accepting connections after %s: %v", timeout, err)
			if lastWords != nil {
				if w := lastWords(); w != "" {
					msg += "; " + w
				}
			}
			return "", fmt.Errorf("%s: %w", msg, context.Cause(ctx))
		case <-tick.C:
		}
	}
}
