package provision

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// What a formation asks its monitor and nodes, over TCP with the password.

// haQueryTimeout bounds one connection and its statements, so that a node
// that hangs (a stalled primary) turns into a retry rather than a wait.
const haQueryTimeout = 5 * time.Second

// haConnectTimeout bounds the connection to one host of a DSN.
const haConnectTimeout = 2 * time.Second

// withConn connects to dsn, runs fn and closes the connection, all within
// haQueryTimeout.
func withConn(ctx context.Context, dsn string, fn func(ctx context.Context, conn *pgx.Conn) error) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("parse the DSN: %w", err)
	}
	// Per host, so that a first host that hangs leaves time for the next.
	cfg.ConnectTimeout = haConnectTimeout
	ctx, cancel := context.WithTimeout(ctx, haQueryTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return fn(ctx, conn)
}

// states reads the monitor's view of the data nodes, in the order they
// joined.
func (f *formation) states(ctx context.Context) ([]NodeState, error) {
	var states []NodeState
	err := withConn(ctx, f.monitorDSN(), func(ctx context.Context, conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `SELECT nodename, nodeport, reportedstate::text, goalstate::text
			FROM pgautofailover.node ORDER BY nodeid`)
		if err != nil {
			return err
		}
		states, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (NodeState, error) {
			var s NodeState
			return s, r.Scan(&s.Name, &s.Port, &s.Reported, &s.Goal)
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the nodes' states from the monitor: %w", err)
	}
	return states, nil
}

// healthy returns the primary and the secondary when the monitor sees
// exactly one of each, each in the state it was told to reach.
func healthy(states []NodeState) (primary, secondary NodeState, ok bool) {
	var np, ns int
	for _, s := range states {
		switch {
		case s.Reported != s.Goal:
			return NodeState{}, NodeState{}, false
		case s.Reported == "primary":
			primary, np = s, np+1
		case s.Reported == "secondary":
			secondary, ns = s, ns+1
		}
	}
	return primary, secondary, np == 1 && ns == 1 && len(states) == 2
}

// checkHealthy returns an error, saying why, unless the monitor sees a
// primary and a secondary; why says what needs them.
func (f *formation) checkHealthy(ctx context.Context, why string) error {
	states, err := f.states(ctx)
	if err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	if _, _, ok := healthy(states); !ok {
		return fmt.Errorf("provision: %s is not healthy (%s), and %s: call WaitHealthy first",
			f.describe(), describeStates(states), why)
	}
	return nil
}

// describeStates says "node1 primary, node2 catchingup (goal secondary)".
func describeStates(states []NodeState) string {
	if len(states) == 0 {
		return "no nodes"
	}
	parts := make([]string, len(states))
	for i, s := range states {
		parts[i] = s.String()
	}
	return strings.Join(parts, ", ")
}

// waitFor polls check every haPollInterval until it reports done or ctx
// ends; the error then says what was awaited, the last status check gave,
// its last error and lastWords (a log's last lines), if any.
func waitFor(ctx context.Context, what string, lastWords func() string, check func(ctx context.Context) (done bool, status string, err error)) error {
	tick := time.NewTicker(haPollInterval)
	defer tick.Stop()
	var status string
	var lastErr error
	for {
		done, st, err := check(ctx)
		if done && err == nil {
			return nil
		}
		if st != "" {
			status = st
		}
		if err != nil {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			msg := "waiting for " + what
			if status != "" {
				msg += "; last seen: " + status
			}
			if lastErr != nil {
				msg += "; last error: " + lastErr.Error()
			}
			if lastWords != nil {
				if w := lastWords(); w != "" {
					msg += "; " + w
				}
			}
			return fmt.Errorf("%s: %w", msg, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// waitHealthy waits until the monitor sees a primary and a secondary, and
// returns the primary.
func (f *formation) waitHealthy(ctx context.Context, lastWords func() string) (*instance, error) {
	var primary NodeState
	err := waitFor(ctx, "a primary and a secondary", lastWords, func(ctx context.Context) (bool, string, error) {
		states, err := f.states(ctx)
		if err != nil {
			return false, "", err
		}
		p, _, ok := healthy(states)
		primary = p
		return ok, describeStates(states), nil
	})
	if err != nil {
		return nil, err
	}
	in := f.node(primary.Port)
	if in == nil {
		return nil, fmt.Errorf("the monitor's primary %s is on port %d, which is none of the formation's nodes", primary.Name, primary.Port)
	}
	return in, nil
}

// setPasswords sets the password of roles on an instance, as its
// superuser, by its SCRAM verifier (scramVerifier): the password itself
// never reaches the server.
func (f *formation) setPasswords(ctx context.Context, in *instance, roles ...string) error {
	return withConn(ctx, f.nodeDSN(in.port), func(ctx context.Context, conn *pgx.Conn) error {
		for _, role := range roles {
			verifier, err := scramVerifier(f.password)
			if err != nil {
				return err
			}
			// The verifier is base64 and digits: nothing to escape.
			if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'",
				pgx.Identifier{role}.Sanitize(), verifier)); err != nil {
				return fmt.Errorf("set the password of %s on %s: %w", role, in.name, err)
			}
		}
		return nil
	})
}

// serverFacts are what Failover reads from a primary: where it is, its
// timeline and its system identifier.
type serverFacts struct {
	port     int
	timeline int64
	systemID uint64
}

// factsQuery reads serverFacts; the timeline is the first 8 hex digits of
// the name of the WAL file being written, which changes at promotion, while
// pg_control_checkpoint() waits for the next checkpoint.
const factsQuery = `SELECT inet_server_port(), substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8),
	(SELECT system_identifier FROM pg_control_system())`

func readFacts(ctx context.Context, conn *pgx.Conn) (serverFacts, error) {
	var fx serverFacts
	var tli string
	var sysid int64
	if err := conn.QueryRow(ctx, factsQuery).Scan(&fx.port, &tli, &sysid); err != nil {
		return fx, fmt.Errorf("read the timeline and system identifier: %w", err)
	}
	var err error
	if fx.timeline, err = strconv.ParseInt(tli, 16, 64); err != nil {
		return fx, fmt.Errorf("timeline %q: %w", tli, err)
	}
	fx.systemID = uint64(sysid)
	return fx, nil
}
