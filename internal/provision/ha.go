package provision

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// An HA formation is a pg_auto_failover monitor and two data nodes, a
// primary and its synchronous secondary, started on the loopback from
// local packages for one run (KindHA). It is private as a cluster is, and
// torn down and cleaned up as one is; see formation and the package
// documentation.

const (
	// haDirPrefix starts the name of every formation directory, followed
	// by the owner's pid: harmless-ha-<pid>-<random>.
	haDirPrefix = "harmless-ha-"
	// haStartTimeout bounds the start of a formation, from the monitor's
	// initdb to a primary and a secondary.
	haStartTimeout = 3 * time.Minute
	// haStopTimeout bounds the clean stop of the pg_autoctl processes on
	// Close before they are killed.
	haStopTimeout = 10 * time.Second
	// haKillTimeout bounds the wait for killed processes to be gone.
	haKillTimeout = 10 * time.Second
	// haPollInterval is how often the monitor and the nodes are asked
	// while waiting.
	haPollInterval = 100 * time.Millisecond
)

// Parts of a formation directory.
const (
	haSocketDir = "socket"
	haHomeDir   = "home"   // HOME, XDG_* of pg_autoctl
	haPgpass    = "pgpass" // PGPASSFILE of pg_autoctl
	haPidsFile  = "pids"   // the pg_autoctl run processes: "pid start" lines
	monitorName = "monitor"
	// monitorDB is the monitor's database, where pgautofailover.node is.
	monitorDB = "pg_auto_failover"
	// autoctlNode is the role the keepers log in to the monitor as.
	autoctlNode = "autoctl_node"
	// replicator is the role of streaming replication between the nodes.
	replicator = "pgautofailover_replicator"
	// monitorRole is the role the monitor's health checks log in as.
	monitorRole = "pgautofailover_monitor"
	// probeTable is the formation's own table, in database postgres, that
	// Failover writes to: it proves the new primary takes writes.
	probeTable = "harmless_formation.probe"
)

// errHACrash is Crash's and Restart's answer on a formation.
var errHACrash = errors.New("a crash of the primary of an HA formation is a failover: see Formation.Failover")

// formation is a pg_auto_failover formation in its own directory:
//
//	harmless-ha-<pid>-<random>/   0700, the server's user's
//	  owner        who made it (see owner), bin= and autoctl=
//	  pids         the pg_autoctl run processes, "pid start" a line
//	  pgpass       0600: autoctl_node, the replicator, postgres
//	  socket/      every instance's unix socket .s.PGSQL.<port>, 0700
//	  home/        HOME and XDG_* of pg_autoctl (its config and state)
//	  monitor/ node1/ node2/      the instances' PGDATA, 0700
//	  <name>.log, <name>-create.log   pg_autoctl's output
//
// Everything runs as the server's user (postgres when harmless is root),
// listens on 127.0.0.1 only and asks every TCP login for the password by
// SCRAM-SHA-256; the unix sockets, in the private directory, take the
// server's user by peer authentication, as the monitor's own pg_autoctl
// logs in there.
type formation struct {
	dir      string
	tools    haTools
	as       runner
	password string
	logf     func(format string, args ...any)

	monitor *instance
	nodes   [2]*instance

	mu    sync.Mutex // guards stall
	stall *ReplicationStall
}

// instance is the monitor or a data node: its PGDATA, port and `pg_autoctl
// run` process.
type instance struct {
	name string // "monitor", "node1", "node2"
	port int
	data string
	run  *autoctlRun // nil until started
}

func (f *formation) socketDir() string { return filepath.Join(f.dir, haSocketDir) }
func (f *formation) home() string      { return filepath.Join(f.dir, haHomeDir) }
func (f *formation) pgpass() string    { return filepath.Join(f.dir, haPgpass) }
func (f *formation) logFile(name string) string {
	return filepath.Join(f.dir, name+".log")
}
func (f *formation) describe() string { return "HA formation in " + f.dir }

func (f *formation) instances() []*instance {
	return []*instance{f.monitor, f.nodes[0], f.nodes[1]}
}

// node returns the data node on port, nil if there is none.
func (f *formation) node(port int) *instance {
	for _, n := range f.nodes {
		if n.port == port {
			return n
		}
	}
	return nil
}

// nodeDSN is a superuser connection string to one node.
func (f *formation) nodeDSN(port int) string {
	return f.dsnTo(superuser, []int{port}, "postgres", "")
}

// monitorDSN is autoctl_node's connection string to the monitor.
func (f *formation) monitorDSN() string {
	return f.dsnTo(autoctlNode, []int{f.monitor.port}, monitorDB, "")
}

// multiDSN is the Server's DSN: both nodes, primary first, and
// target_session_attrs=read-write, so that a client that follows the
// multi-host DSN finds the primary after a failover, and one that keeps
// only the first host loses it.
func (f *formation) multiDSN(primary int) string {
	ports := []int{primary}
	for _, n := range f.nodes {
		if n.port != primary {
			ports = append(ports, n.port)
		}
	}
	return f.dsnTo(superuser, ports, "postgres", "read-write")
}

func (f *formation) dsnTo(user string, ports []int, db, attrs string) string {
	hosts := make([]string, len(ports))
	for i, p := range ports {
		hosts[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	q := url.Values{"sslmode": {"disable"}}
	if attrs != "" {
		q.Set("target_session_attrs", attrs)
	}
	// The password is hex and the hosts need no escaping; url.URL would
	// not take a list of hosts.
	return fmt.Sprintf("postgres://%s@%s/%s?%s",
		url.UserPassword(user, f.password).String(), strings.Join(hosts, ","), db, q.Encode())
}

// openHA starts a formation: see start.
func openHA(ctx context.Context, st settings) (srv *Server, err error) {
	tools, err := findHATools(ctx, st)
	if err != nil {
		return nil, err
	}
	as, err := clusterRunner()
	if err != nil {
		return nil, err
	}
	password, err := newPassword()
	if err != nil {
		return nil, err
	}
	began := time.Now()
	// MkdirTemp makes it 0700.
	dir, err := os.MkdirTemp(st.serverDir, fmt.Sprintf("%s%d-", haDirPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("create the formation directory: %w", err)
	}
	f := &formation{dir: dir, tools: tools, as: as, password: password, logf: st.logf}
	defer func() {
		if err != nil {
			if cerr := f.close(context.WithoutCancel(ctx)); cerr != nil {
				st.logf("cleaning up after a failed start: %v", cerr)
			}
		}
	}()
	info := fmt.Appendf(self().marshal(), "bin=%s\nautoctl=%s\n", tools.bin, tools.autoctl)
	if err := os.WriteFile(filepath.Join(dir, ownerFile), info, 0o644); err != nil {
		return nil, fmt.Errorf("write owner file: %w", err)
	}
	st.logf("starting HA formation in %s (pg_auto_failover: %s, binaries: %s)", dir, tools.autoctl, tools.bin)
	ctx, cancel := context.WithTimeout(ctx, haStartTimeout)
	defer cancel()
	primary, version, err := f.start(ctx)
	if err != nil {
		return nil, err
	}
	secondary := f.nodes[0]
	if secondary.port == primary.port {
		secondary = f.nodes[1]
	}
	st.logf("HA formation ready in %.1fs: primary %s :%d, secondary %s :%d (PostgreSQL %s)",
		time.Since(began).Seconds(), primary.name, primary.port, secondary.name, secondary.port, version)
	return &Server{Kind: KindHA, Version: version, dsn: f.multiDSN(primary.port), b: f, logf: st.logf, secrets: []string{password}}, nil
}

// crash and restart: a formation is not crashed as a whole; its primary
// fails over (Formation.Failover).
func (f *formation) crash(context.Context) error { return errHACrash }
func (f *formation) restart(context.Context) (string, error) {
	return "", errHACrash
}

// close stops the formation and removes its directory: it resumes a
// stalled replication, asks every pg_autoctl to stop (SIGTERM to its
// process group: it stops its PostgreSQL), kills what is left after
// haStopTimeout or as soon as ctx is done, then every process of the
// directory and every postmaster of its PGDATAs, and removes the
// directory. Processes that cannot be killed leave the directory in place
// and are an error.
func (f *formation) close(ctx context.Context) error {
	f.resumeStall()
	for _, in := range f.instances() {
		if in != nil && in.run.running() {
			killGroup(in.run.pid, sigTerm)
		}
	}
	stop, cancel := context.WithTimeout(ctx, haStopTimeout)
	for _, in := range f.instances() {
		if in != nil {
			in.run.wait(stop)
		}
	}
	cancel()
	for _, in := range f.instances() {
		if in != nil && in.run.running() {
			killGroup(in.run.pid, sigKill)
		}
	}
	if left := killAllIn(ctx, f.dir, f.as.serverUID(), f.datas(), haKillTimeout); len(left) > 0 {
		return fmt.Errorf("processes %v of %s survive SIGKILL: directory left in place", left, f.dir)
	}
	if err := os.RemoveAll(f.dir); err != nil {
		return fmt.Errorf("remove %s: %w", f.dir, err)
	}
	return nil
}

// datas are the PGDATAs of the instances made so far.
func (f *formation) datas() []string {
	var ds []string
	for _, in := range f.instances() {
		if in != nil {
			ds = append(ds, in.data)
		}
	}
	return ds
}
