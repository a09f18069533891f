package pgproxy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/harmless-dev/harmless/internal/faultplan"
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
)

// Scope says which connections a rule applies to; the zero Scope matches
// every connection.
type Scope struct {
	// Client, when set, matches the connections that came in on that
	// client's listeners (see [Proxy.Listen]), and no other: what a
	// connection says about itself (its application_name, its user) does
	// not matter.
	Client string
}

func (s Scope) matches(client string) bool { return s.Client == "" || s.Client == client }

// String describes the scope, e.g. "the connections of instance 1".
func (s Scope) String() string {
	if s.Client == "" {
		return "every connection"
	}
	return "the connections of " + s.Client
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
	// Times is how many times the rule fires at most; 0 means no limit.
	Times int
	// Within, when set, confines the rule to transactions that have sent
	// a statement whose text contains it: the harness gives its ledger's
	// table name, so that a cut at COMMIT hits the transaction that
	// applies the effect, not one that commits a claim or a lease before
	// it. Such a rule at BeforeCommit or AfterCommitComplete also fires
	// for a statement sent outside a transaction block that contains it,
	// which commits on its own: before the proxy forwards the statement,
	// and before it relays the server's ReadyForQuery after it (the
	// implicit transaction has committed by then). An implementation that
	// claims and applies the effect in one statement in autocommit meets
	// its ambiguous commit there. A transaction block is opened by BEGIN or
	// START TRANSACTION sent as a simple query, as pgx, psycopg and
	// node-postgres send it; statements are assumed not pipelined across
	// transactions.
	Within string
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
	if r.Action != Cut {
		return fmt.Errorf("unknown action %q (known: %q)", r.Action, Cut)
	}
	if r.Times < 0 {
		return fmt.Errorf("times %d: want 0 (no limit) or more", r.Times)
	}
	return nil
}

// kind is the kind of a fault armed with the rule (see [Fault.Kind]).
func (r Rule) kind() string { return faultplan.ProxyKind(string(r.Action), string(r.At)) }

// String describes the rule, e.g. "cut after statement 1 on every
// connection, at most once".
func (r Rule) String() string {
	var b strings.Builder
	b.WriteString(string(r.Action) + " " + string(r.At))
	if r.At == AfterStatement {
		fmt.Fprintf(&b, " %d", r.N)
	}
	b.WriteString(" on " + r.Scope.String())
	if r.Within != "" {
		fmt.Fprintf(&b, ", in a transaction that mentions %q", r.Within)
	}
	switch r.Times {
	case 0:
	case 1:
		b.WriteString(", at most once")
	default:
		fmt.Fprintf(&b, ", at most %d times", r.Times)
	}
	return b.String()
}

// Fault is a rule armed on a proxy. Its methods are safe for concurrent
// use.
type Fault struct {
	rule Rule

	fired atomic.Int64 // reserved firings, at most rule.Times
	// inTx and autocommit count the statements completed on the
	// connections in the rule's scope while it was armed, inside a
	// transaction block and outside one.
	inTx, autocommit atomic.Int64

	mu   sync.Mutex
	pids []int // of the backends cut, in firing order
}

// reserve claims one firing, unless the fault has fired its Times
// already.
func (f *Fault) reserve() bool {
	for {
		n := f.fired.Load()
		if f.rule.Times > 0 && n >= int64(f.rule.Times) {
			return false
		}
		if f.fired.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// record notes the backend of a connection the fault is about to cut (0
// when the server had not sent its pid yet).
func (f *Fault) record(pid int) {
	if pid == 0 {
		return
	}
	f.mu.Lock()
	f.pids = append(f.pids, pid)
	f.mu.Unlock()
}

// String describes the fault's rule.
func (f *Fault) String() string { return f.rule.String() }

// Fired reports how many times the fault has fired. A firing counts before
// the fault acts: once a client has seen its connection cut, the cut is
// counted. It reads a counter in memory and never fails; ctx and the error
// are there to make a Fault one of package faults' Armed.
func (f *Fault) Fired(context.Context) (int64, error) { return f.fired.Load(), nil }

// Kind is the kind of the fault, as package faults' Armed names it:
// "proxy:" action "@" point with its words joined by hyphens, e.g.
// "proxy:cut@after-commit-complete". The statement number of an
// [AfterStatement] rule is not part of the kind.
func (f *Fault) Kind() string { return f.rule.kind() }

// Statements counts the statements the proxy saw complete on the
// connections in the rule's scope since it was armed: inside a
// transaction block (BEGIN ... COMMIT) and outside one. A fault at a
// point of a transaction cannot fire for an implementation that runs
// every statement in autocommit; these say whether that is why it did
// not.
func (f *Fault) Statements() (inTransaction, autocommit int64) {
	return f.inTx.Load(), f.autocommit.Load()
}

// PIDs returns the process ids of the server backends of the connections
// the fault cut, in firing order, for the caller to wait until they are
// gone from pg_stat_activity.
func (f *Fault) PIDs() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.pids)
}
