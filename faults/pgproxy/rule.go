package pgproxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Point is the place in the protocol where a rule fires.
type Point string

const (
	// BeforeCommit fires when the client sends COMMIT, before the proxy
	// forwards it: a simple Query whose whole text is a COMMIT or END
	// statement, or the Execute of a portal bound to a statement parsed
	// from such a text. The server has not seen the COMMIT.
	BeforeCommit Point = "before commit"
	// AfterCommitComplete fires when the server answers a COMMIT of an open
	// transaction with CommandComplete "COMMIT", before the proxy relays it:
	// the server has committed, the client does not know yet.
	AfterCommitComplete Point = "after commit complete"
	// AfterStatement fires when the server completes the [Rule.N]-th
	// statement of an explicit transaction (its CommandComplete, counted
	// while the transaction is open, not counting BEGIN and COMMIT), before
	// the proxy relays that CommandComplete.
	AfterStatement Point = "after statement"
)

// Action is what a rule does when it fires.
type Action string

const (
	// Cut closes both sides of the connection without relaying the message
	// at the rule's point. Messages relayed before it are delivered. The
	// client sees a broken connection; the server's backend sees its client
	// go away, rolls back whatever it has not committed, and ends.
	Cut Action = "cut"
	// Delay holds the message at the rule's point for [Rule.Delay], then
	// relays it. Nothing fails.
	Delay Action = "delay"
)

// ConnID identifies one client connection of a [Proxy], from 1 up.
type ConnID uint64

// Scope says which connections a rule applies to. Every field that is set
// must match; the zero Scope matches every connection.
type Scope struct {
	// ApplicationName matches connections whose startup application_name
	// is exactly this. A later SET application_name is not seen.
	ApplicationName string
	// ApplicationNamePrefix matches connections whose startup
	// application_name starts with this.
	ApplicationNamePrefix string
	// Conn matches one connection, as listed by [Proxy.Conns].
	Conn ConnID
	// PID matches the connection whose server backend has this process id,
	// as the client sees it (pgconn's PID(), pg_backend_pid()): the proxy
	// relays BackendKeyData untouched.
	PID int
}

func (s Scope) matches(c ConnInfo) bool {
	return (s.ApplicationName == "" || c.ApplicationName == s.ApplicationName) &&
		(s.ApplicationNamePrefix == "" || strings.HasPrefix(c.ApplicationName, s.ApplicationNamePrefix)) &&
		(s.Conn == 0 || c.ID == s.Conn) &&
		(s.PID == 0 || c.PID == s.PID)
}

// String describes the scope, e.g. `application_name "harmless-x"*`.
func (s Scope) String() string {
	var parts []string
	if s.ApplicationName != "" {
		parts = append(parts, fmt.Sprintf("application_name %q", s.ApplicationName))
	}
	if s.ApplicationNamePrefix != "" {
		parts = append(parts, fmt.Sprintf("application_name %q*", s.ApplicationNamePrefix))
	}
	if s.Conn != 0 {
		parts = append(parts, fmt.Sprintf("connection %d", s.Conn))
	}
	if s.PID != 0 {
		parts = append(parts, fmt.Sprintf("backend pid %d", s.PID))
	}
	if len(parts) == 0 {
		return "every connection"
	}
	return strings.Join(parts, " and ")
}

// Rule says where a fault fires, on which connections, what it does, and
// how often.
type Rule struct {
	// Scope is the connections the rule applies to.
	Scope Scope
	// At is the protocol point.
	At Point
	// Action is what the rule does there.
	Action Action
	// N is the statement an [AfterStatement] rule fires after, from 1. It
	// must be zero at the other points.
	N int
	// Delay is how long a [Delay] rule holds the message, more than zero.
	// It must be zero for a [Cut] rule.
	Delay time.Duration
	// Times is how many times the rule fires at most; 0 means no limit.
	Times int
}

func (r Rule) validate() error {
	switch r.At {
	case BeforeCommit, AfterCommitComplete:
		if r.N != 0 {
			return fmt.Errorf("a rule %s takes no statement number, got N=%d", r.At, r.N)
		}
	case AfterStatement:
		if r.N < 1 {
			return fmt.Errorf("a rule %s needs the statement number N, from 1, got %d", r.At, r.N)
		}
	default:
		return fmt.Errorf("unknown point %q (known: %q, %q, %q)", r.At, BeforeCommit, AfterCommitComplete, AfterStatement)
	}
	switch r.Action {
	case Cut:
		if r.Delay != 0 {
			return fmt.Errorf("a %s rule takes no delay, got %s", r.Action, r.Delay)
		}
	case Delay:
		if r.Delay <= 0 {
			return fmt.Errorf("a %s rule needs a delay above zero, got %s", r.Action, r.Delay)
		}
	default:
		return fmt.Errorf("unknown action %q (known: %q, %q)", r.Action, Cut, Delay)
	}
	if r.Times < 0 {
		return fmt.Errorf("times %d: want 0 (no limit) or more", r.Times)
	}
	if r.Scope.ApplicationName != "" && r.Scope.ApplicationNamePrefix != "" {
		return errors.New("a scope takes an application_name or a prefix of one, not both")
	}
	if r.Scope.PID < 0 {
		return fmt.Errorf("scope pid %d: want 0 (any) or a backend pid", r.Scope.PID)
	}
	return nil
}

// Kind is the kind of a fault armed with the rule, as package faults'
// Armed names it: "proxy:" action "@" point with its words joined by
// hyphens, e.g. "proxy:cut@after-commit-complete". The statement number
// of an [AfterStatement] rule is not part of the kind.
func (r Rule) Kind() string {
	return fmt.Sprintf("proxy:%s@%s", r.Action, strings.ReplaceAll(string(r.At), " ", "-"))
}

// String describes the rule, e.g. "cut after statement 1 on every
// connection, at most once".
func (r Rule) String() string {
	var b strings.Builder
	b.WriteString(string(r.Action))
	if r.Action == Delay {
		b.WriteString(" " + r.Delay.String())
	}
	b.WriteString(" " + string(r.At))
	if r.At == AfterStatement {
		fmt.Fprintf(&b, " %d", r.N)
	}
	b.WriteString(" on " + r.Scope.String())
	switch r.Times {
	case 0:
	case 1:
		b.WriteString(", at most once")
	default:
		fmt.Fprintf(&b, ", at most %d times", r.Times)
	}
	return b.String()
}

// Firing is one time a rule fired.
type Firing struct {
	// Conn is the client connection.
	Conn ConnID
	// PID is the process id of the connection's server backend (0 if the
	// server had not sent it yet).
	PID int
	// ApplicationName is the connection's startup application_name.
	ApplicationName string
	// At is when the rule fired, before it acted.
	At time.Time
}

// Fault is a rule armed on a proxy. Its methods are safe for concurrent
// use.
type Fault struct {
	rule  Rule
	proxy *Proxy

	fired    atomic.Int64 // reserved firings, at most rule.Times
	disarmed atomic.Bool

	mu      sync.Mutex
	firings []Firing
}

// reserve claims one firing, unless the fault is disarmed or has fired its
// Times already.
func (f *Fault) reserve() bool {
	for {
		if f.disarmed.Load() {
			return false
		}
		n := f.fired.Load()
		if f.rule.Times > 0 && n >= int64(f.rule.Times) {
			return false
		}
		if f.fired.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (f *Fault) record(fr Firing) {
	f.mu.Lock()
	f.firings = append(f.firings, fr)
	f.mu.Unlock()
}

// Rule returns the fault's rule.
func (f *Fault) Rule() Rule { return f.rule }

// String describes the fault's rule.
func (f *Fault) String() string { return f.rule.String() }

// Fired reports how many times the fault has fired. A firing counts before
// the fault acts: once a client has seen the effect of a cut, the cut is
// counted. It reads a counter in memory and never fails; ctx and the error
// are there to make a Fault one of package faults' Armed.
func (f *Fault) Fired(context.Context) (int64, error) { return f.fired.Load(), nil }

// Kind is the kind of the fault's rule (see [Rule.Kind]).
func (f *Fault) Kind() string { return f.rule.Kind() }

// Firings returns the fault's firings so far, in order.
func (f *Fault) Firings() []Firing {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Firing(nil), f.firings...)
}

// PIDs returns the backend process ids of the connections the fault cut,
// in firing order (none for a [Delay] fault).
func (f *Fault) PIDs() []int {
	if f.rule.Action != Cut {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var pids []int
	for _, fr := range f.firings {
		if fr.PID != 0 {
			pids = append(pids, fr.PID)
		}
	}
	return pids
}

// Disarm stops the fault from firing again. A delay it is holding runs to
// its end.
func (f *Fault) Disarm() {
	if f.disarmed.Swap(true) {
		return
	}
	f.proxy.remove(f)
}
