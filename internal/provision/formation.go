package provision

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// haHealthyTimeout bounds WaitHealthy when ctx has no earlier deadline: a
// rejoin with pg_rewind takes 1 to 4 s here.
const haHealthyTimeout = 2 * time.Minute

// Formation is the pg_auto_failover formation behind a Server of KindHA: a
// monitor and two data nodes, a primary and its secondary. It makes the
// faults a failover fixture needs (Failover, StallReplication) and says
// what the monitor sees (State, Primary). Its methods run one at a time,
// and not while the Server crashes, restarts or closes; all fail once the
// Server is closed.
type Formation struct {
	s *Server
	f *formation
}

// Formation returns the formation behind a server of KindHA, nil for any
// other.
func (s *Server) Formation() *Formation {
	if f, ok := s.b.(*formation); ok {
		return &Formation{s: s, f: f}
	}
	return nil
}

// Node is a data node of a formation, by the name the monitor knows it by
// ("node1", "node2") and its port on 127.0.0.1.
type Node struct {
	Name string
	Port int
}

// String says "node1 :45123".
func (n Node) String() string { return fmt.Sprintf("%s :%d", n.Name, n.Port) }

// NodeState is what the monitor says of a node (pgautofailover.node): the
// state the node last reported and the state the monitor wants it in. The
// formation is settled when they are equal; "primary", "secondary",
// "wait_primary", "catchingup", "demoted" are among pg_auto_failover's
// states.
type NodeState struct {
	Node
	Reported string
	Goal     string
}

// String says "node1 primary", or "node2 catchingup (goal secondary)"
// while the node is on its way.
func (s NodeState) String() string {
	if s.Reported == s.Goal {
		return s.Name + " " + s.Reported
	}
	return fmt.Sprintf("%s %s (goal %s)", s.Name, s.Reported, s.Goal)
}

// lock takes the Server's ops mutex for op and checks that the Server is
// not closed; the caller must call the returned unlock.
func (fm *Formation) lock(op string) (unlock func(), err error) {
	fm.s.ops.Lock()
	if err := fm.s.ownedOp(op); err != nil {
		fm.s.ops.Unlock()
		return nil, err
	}
	return fm.s.ops.Unlock, nil
}

// State returns the monitor's view of the data nodes, in the order they
// joined the formation.
func (fm *Formation) State(ctx context.Context) ([]NodeState, error) {
	unlock, err := fm.lock("read the state of")
	if err != nil {
		return nil, err
	}
	defer unlock()
	return fm.f.states(ctx)
}

// Primary returns the node the monitor has chosen as the primary: the one
// whose goal state is primary, wait_primary (a primary without its
// secondary) or single; an error while there is none, as in the middle of
// a controlled failover. It may still be on its way there (right after a
// hard kill, "stop_replication (goal wait_primary)") while it already
// takes writes. The Server's DSN is updated to name it first.
func (fm *Formation) Primary(ctx context.Context) (Node, error) {
	unlock, err := fm.lock("find the primary of")
	if err != nil {
		return Node{}, err
	}
	defer unlock()
	states, err := fm.f.states(ctx)
	if err != nil {
		return Node{}, err
	}
	for _, s := range states {
		if slices.Contains([]string{"primary", "wait_primary", "single"}, s.Goal) {
			fm.primaryIs(s.Port)
			return s.Node, nil
		}
	}
	return Node{}, fmt.Errorf("provision: no primary in %s now: %s", fm.f.describe(), describeStates(states))
}

// primaryIs makes the Server's DSN name the node on port first.
func (fm *Formation) primaryIs(port int) {
	fm.s.mu.Lock()
	fm.s.dsn = fm.f.multiDSN(port)
	fm.s.mu.Unlock()
}

// WaitHealthy brings the formation back to a primary and a secondary: it
// starts again the `pg_autoctl run` of any instance whose process is gone
// (a node killed by a hard-kill Failover rejoins as a secondary, after
// pg_rewind), then waits until the monitor sees one node primary and the
// other secondary, each in the state it was told to reach. Right after a
// failover the old primary is "catchingup" for a few seconds, and a second
// fault then finds no candidate: wait here between faults. Without a
// deadline on ctx it gives up after 2 minutes. The Server's DSN names the
// primary first afterwards.
func (fm *Formation) WaitHealthy(ctx context.Context) error {
	unlock, err := fm.lock("wait for")
	if err != nil {
		return err
	}
	defer unlock()
	began := time.Now()
	f := fm.f
	for _, in := range f.instances() {
		if in.run.running() {
			continue
		}
		// A hard kill left nothing running there; make sure of it before
		// PostgreSQL starts on the same data directory.
		if left := killAllIn(ctx, in.data, f.as.serverUID(), []string{in.data}, haKillTimeout); len(left) > 0 {
			return fmt.Errorf("provision: restart %s: processes %v survive SIGKILL", in.name, left)
		}
		f.removeStaleLocks(in)
		if err := f.startRun(in); err != nil {
			return fmt.Errorf("provision: %w", err)
		}
		f.logf("restarted pg_autoctl run of %s", in.name)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, haHealthyTimeout)
		defer cancel()
	}
	primary, err := f.waitHealthy(ctx, func() string { return f.lastWords(f.nodes[0])() + "; " + f.lastWords(f.nodes[1])() })
	if err != nil {
		return fmt.Errorf("provision: %s: %w", f.describe(), err)
	}
	fm.primaryIs(primary.port)
	f.logf("HA formation healthy after %.1fs: primary %s :%d", time.Since(began).Seconds(), primary.name, primary.port)
	return nil
}

// removeStaleLocks removes the lock files a killed instance left, now that
// none of its processes is left: PostgreSQL ignores a lock whose pid is
// gone, but refuses to start when that pid was reused meanwhile.
func (f *formation) removeStaleLocks(in *instance) {
	sock := filepath.Join(f.socketDir(), fmt.Sprintf(".s.PGSQL.%d", in.port))
	for _, p := range []string{filepath.Join(in.data, "postmaster.pid"), sock, sock + ".lock"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			f.logf("remove the stale %s: %v", p, err)
		}
	}
}

// NodeDSN returns a superuser connection string to one node only, without
// target_session_attrs: to read a standby, or a node's own view.
func (fm *Formation) NodeDSN(n Node) string { return fm.f.nodeDSN(n.Port) }

// Nodes returns the formation's data nodes, in the order they joined.
func (fm *Formation) Nodes() []Node {
	return []Node{{fm.f.nodes[0].name, fm.f.nodes[0].port}, {fm.f.nodes[1].name, fm.f.nodes[1].port}}
}
