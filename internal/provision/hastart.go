package provision

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// start makes the formation, one instance after the other, and returns its
// primary once the monitor sees a primary and a secondary:
//
//  1. the monitor: initdb (harmless's, private), `pg_autoctl create
//     monitor`, pg_hba.conf rewritten, `pg_autoctl run`; then
//     autoctl_node's password, which the keepers log in with;
//  2. node1: the same with `pg_autoctl create postgres`, until the monitor
//     sees it single; then the passwords of postgres, the replicator and
//     the health checks' role, and a CHECKPOINT, without which the
//     secondary's base backup waits for a spread checkpoint;
//  3. node2: `pg_autoctl create postgres`, which copies node1 with
//     pg_basebackup (its configuration too), pg_hba.conf rewritten,
//     `pg_autoctl run`, until primary and secondary;
//  4. the probe table that Failover writes to.
func (f *formation) start(ctx context.Context) (primary *instance, version string, err error) {
	if err := f.makeDirs(); err != nil {
		return nil, "", err
	}
	if err := f.writePgpass(); err != nil {
		return nil, "", err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, "", err
	}
	f.monitor = &instance{name: monitorName, port: ports[0], data: filepath.Join(f.dir, monitorName)}
	for i := range f.nodes {
		name := fmt.Sprintf("node%d", i+1)
		f.nodes[i] = &instance{name: name, port: ports[i+1], data: filepath.Join(f.dir, name)}
	}
	began := time.Now()
	pgctl := filepath.Join(f.tools.bin, "pg_ctl")
	common := []string{"--pgctl", pgctl, "--hostname", "127.0.0.1", "--listen", "127.0.0.1",
		"--auth", "scram-sha-256", "--no-ssl"}

	// node1's initdb needs nothing of the monitor: it runs meanwhile, and
	// start does not return before it has ended.
	n1 := f.nodes[0]
	n1Ready := make(chan error, 1)
	go func() { n1Ready <- f.initdb(ctx, n1) }()
	n1Err := func() error {
		if n1Ready == nil {
			return nil
		}
		err := <-n1Ready
		n1Ready = nil
		return err
	}
	defer n1Err()

	// 1. The monitor.
	mon := f.monitor
	if err := f.initdb(ctx, mon); err != nil {
		return nil, "", err
	}
	args := append([]string{"create", "monitor", "--pgdata", mon.data, "--pgport", strconv.Itoa(mon.port)}, common...)
	if err := f.autoctl(ctx, mon.name+"-create", args...); err != nil {
		return nil, "", err
	}
	if err := f.runInstance(ctx, mon); err != nil {
		return nil, "", err
	}
	if err := f.setPasswords(ctx, mon, autoctlNode); err != nil {
		return nil, "", err
	}
	f.logf("HA formation: monitor running on 127.0.0.1:%d after %.1fs", mon.port, time.Since(began).Seconds())

	// 2. The first node.
	monitorURI := fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", autoctlNode, mon.port, monitorDB)
	createNode := func(n *instance) error {
		args := append([]string{"create", "postgres", "--pgdata", n.data, "--pgport", strconv.Itoa(n.port),
			"--name", n.name, "--monitor", monitorURI, "--dbname", "postgres", "--username", superuser,
			"--pghost", f.socketDir()}, common...)
		return f.autoctl(ctx, n.name+"-create", args...)
	}
	if err := n1Err(); err != nil {
		return nil, "", err
	}
	if err := createNode(n1); err != nil {
		return nil, "", err
	}
	if err := f.runInstance(ctx, n1); err != nil {
		return nil, "", err
	}
	err = waitFor(ctx, n1.name+" to be single", f.lastWords(n1), func(ctx context.Context) (bool, string, error) {
		states, err := f.states(ctx)
		if err != nil {
			return false, "", err
		}
		return len(states) == 1 && states[0].Reported == "single" && states[0].Goal == "single", describeStates(states), nil
	})
	if err != nil {
		return nil, "", err
	}
	if err := f.setPasswords(ctx, n1, superuser, replicator, monitorRole); err != nil {
		return nil, "", err
	}
	if err := withConn(ctx, f.nodeDSN(n1.port), func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "CHECKPOINT")
		return err
	}); err != nil {
		return nil, "", fmt.Errorf("CHECKPOINT on %s: %w", n1.name, err)
	}

	f.logf("HA formation: %s single on 127.0.0.1:%d after %.1fs", n1.name, n1.port, time.Since(began).Seconds())

	// 3. The second node, a copy of the first.
	n2 := f.nodes[1]
	if err := createNode(n2); err != nil {
		return nil, "", err
	}
	if err := f.runInstance(ctx, n2); err != nil {
		return nil, "", err
	}
	primary, err = f.waitHealthy(ctx, func() string { return f.lastWords(n1)() + "; " + f.lastWords(n2)() })
	if err != nil {
		return nil, "", err
	}

	// 4. The probe table, and what the Server reports.
	err = withConn(ctx, f.nodeDSN(primary.port), func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS harmless_formation;
			CREATE TABLE IF NOT EXISTS `+probeTable+` (
				id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
				at timestamptz NOT NULL DEFAULT clock_timestamp(),
				note text NOT NULL)`); err != nil {
			return err
		}
		return conn.QueryRow(ctx, "SHOW server_version").Scan(&version)
	})
	if err != nil {
		return nil, "", fmt.Errorf("create %s on the primary %s: %w", probeTable, primary.name, err)
	}
	return primary, version, nil
}

// runInstance rewrites the instance's pg_hba.conf after its create (which
// added lines of its own), starts its `pg_autoctl run` and waits until its
// PostgreSQL takes the superuser's login.
func (f *formation) runInstance(ctx context.Context, in *instance) error {
	if err := f.rewriteHBA(in); err != nil {
		return err
	}
	if err := f.startRun(in); err != nil {
		return err
	}
	if _, err := waitReady(ctx, f.nodeDSN(in.port), haStartTimeout, f.lastWords(in)); err != nil {
		return fmt.Errorf("%s: %w", in.name, err)
	}
	return nil
}

// lastWords returns the last lines of an instance's `pg_autoctl run` log,
// for errors.
func (f *formation) lastWords(in *instance) func() string {
	return func() string {
		log := f.logFile(in.name)
		return fmt.Sprintf("last lines of %s: %s", log, lastLines(readFrom(log, max(0, fileSize(log)-16<<10)), 10))
	}
}
