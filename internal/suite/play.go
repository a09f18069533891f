package suite

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/shortdur"
)

// harnessWork is the time a play's budget allows for the harness's own
// work besides its calls to the implementation: creating the play's schema,
// arming faults, reading the ledger. A second more per call covers the
// queries that go with each.
const (
	harnessWork    = time.Minute
	harnessPerCall = time.Second
)

// budgetSlack is how long after its budget a play's gather function
// may still run: the calls the budget cut short return, and the harness
// gathers the evidence. The play's own timeout ends it only after
// that, as a backstop (see playNode.run).
const budgetSlack = 2 * time.Minute

// work is what a play does one after another, the basis of its budget:
// guarded calls to the implementation (a delivery, a purge, building an
// instance), events redelivered until terminal after one of those calls
// (see [harness.Play.RedeliverUntilTerminal]), and real time it waits for.
// Work done side by side counts once.
type work struct {
	calls        int
	redeliveries int
	waits        time.Duration
}

// untilTerminal is the work of n deliveries until terminal, one after
// another: a call each, then its redeliveries.
func untilTerminal(n int) work { return work{calls: n, redeliveries: n} }

// plus adds o to w.
func (w work) plus(o work) work {
	return work{calls: w.calls + o.calls, redeliveries: w.redeliveries + o.redeliveries, waits: w.waits + o.waits}
}

// playNode is one play of a fixture: its gather function, which plays
// the deliveries and gathers the evidence in a [harness.Play], the budget
// it must finish within, what it has done so far (which every rule of the
// play reports should the budget run out) and the records of its rules,
// which judge the evidence once it is gathered.
//
// The budget follows from the delivery timeout, the broker's patience and
// the work the play does one after another: each call ends within
// [harness.CallSlot] of the delivery timeout, and each redelivery until
// terminal within the patience and two slots (the call in flight when the
// patience starts, and the one in flight when it runs out), so a correct
// implementation, however slow, never exhausts it. It exists so that a
// run whose harness is stuck ends with evidence instead of a bare timeout.
type playNode struct {
	s      *state
	name   string // e.g. "concurrent-delivery / plain", for messages
	work   work   // what it does one after another, at most
	budget time.Duration

	// disrupts marks a play that crashes, restarts or fails over the
	// server (see disruptsServer).
	disrupts bool
	// long marks a play that takes longer than most on any
	// implementation (see takesLong).
	long bool

	node    *node                     // where the play is in the tree
	gatherF func(ctx context.Context) // plays and gathers (see gather)
	rules   []*specRecord             // its rules, in the order described

	mu   sync.Mutex
	play *harness.Play
	step string // what the play is doing, e.g. "round 3 of 10"
	// failure, once set, says why the play could not finish: an
	// assertion of the harness's own failed, the harness panicked, or the
	// play timed out. Its rules then fail with it, unjudged.
	failure string
	// stopped says the run was stopped (cancelled, interrupted) while the
	// play ran: its rules are not judged.
	stopped bool
	// started and ended bound the play's run.
	started, ended time.Time
	// closers release the play, once its rules are judged.
	closers []func(context.Context) error
	// sharesCrash says the play crashes the server through
	// [state.crashAndRestart], and may run beside the others that do.
	sharesCrash bool
}

// crashesTogether marks pn, a play that disrupts the server, as one that crashes
// the server through [state.crashAndRestart] only: the engine runs it
// beside the others that do, and they share the crash (see sharedCrash).
// It returns pn.
func (pn *playNode) crashesTogether() *playNode {
	pn.sharesCrash = true
	return pn
}

// play returns a play named name that does at most w one after
// another, as the play of the node being described.
func (s *state) play(name string, w work) *playNode {
	call := harness.CallSlot(s.cfg.deliveryTimeout) + harnessPerCall
	budget := time.Duration(w.calls)*call + time.Duration(w.redeliveries)*(s.cfg.redeliveryPatience+2*call) + w.waits + harnessWork
	if s.cfg.budget > 0 {
		budget = s.cfg.budget
	}
	pn := &playNode{s: s, name: name, work: w, budget: budget}
	s.attach(pn)
	return pn
}

// disruptsServer marks pn as a play that crashes, restarts or fails over
// the run's server, which every other play uses, and returns it: the
// engine runs it with no other play beside it (see [state.certify]), and
// its broker keeps to the play's own patience, since a correct
// implementation's redeliveries fail while it reconnects (see
// harness.PlayOptions.DisruptsServer).
func (pn *playNode) disruptsServer() *playNode {
	pn.disrupts = true
	return pn
}

// takesLong marks pn as a play that takes longer than most on any
// implementation, by what it plays (rounds held until the others are
// seen, a destination that answers slowly), and returns it: the engine
// starts it before the plays that do not, so that those fill the time
// beside it rather than leave it running alone at the end (see
// [state.certify]).
func (pn *playNode) takesLong() *playNode {
	pn.long = true
	return pn
}

// gather sets the play's gather function: it plays the deliveries and
// gathers the evidence its rules judge, within ctx, which ends with the
// play's timeout or when the run is stopped. It fails the play with
// [state.expect], from any goroutine that defers [state.recoverGather].
func (pn *playNode) gather(fn func(ctx context.Context)) { pn.gatherF = fn }

// timeout bounds the play's gather function: the budget and the slack
// in which the evidence is gathered.
func (pn *playNode) timeout() time.Duration { return pn.budget + budgetSlack }

// begin creates the play's [harness.Play] and starts its budget. Call it
// first in the gather function.
func (pn *playNode) begin(ctx context.Context) *harness.Play {
	play := pn.s.newPlay(ctx, pn)
	play.StartBudget(pn.budget)
	pn.mu.Lock()
	pn.play = play
	pn.mu.Unlock()
	return play
}

// at records what the play is doing now, e.g. at("round %d of %d", 3, 10).
// Once the budget has run out the step stays where the play was then.
func (pn *playNode) at(format string, args ...any) {
	if pn.expired() {
		return
	}
	pn.mu.Lock()
	defer pn.mu.Unlock()
	pn.step = fmt.Sprintf(format, args...)
}

// expired reports whether the play ran out of its budget.
func (pn *playNode) expired() bool {
	pn.mu.Lock()
	play := pn.play
	pn.mu.Unlock()
	return play != nil && play.OutOfBudget()
}

// budgetProblem says, once the budget has run out, what the play had
// done by then: "" otherwise.
func (pn *playNode) budgetProblem() string {
	pn.mu.Lock()
	play, step := pn.play, pn.step
	pn.mu.Unlock()
	if play == nil {
		return ""
	}
	p, expired := play.BudgetExpired()
	if !expired {
		return ""
	}
	msg := fmt.Sprintf("the play %s did not finish within its budget of %s (%s)", pn.name, shortdur.Format(pn.budget), pn.budgetBasis())
	if step != "" {
		msg += "; it was at " + step
	}
	if p != nil {
		msg += "; by then " + p.String()
	}
	return msg
}

// budgetBasis explains the budget, e.g. "55 calls to the implementation,
// each allowed the delivery timeout of 15s and a grace of 5s, and 1m of the
// harness's own work".
func (pn *playNode) budgetBasis() string {
	if pn.s.cfg.budget > 0 {
		return "a budget the caller set for every play"
	}
	timeout := pn.s.cfg.deliveryTimeout
	basis := fmt.Sprintf("%d calls to the implementation one after another, each allowed the delivery timeout of %s and a grace of %s",
		pn.work.calls, shortdur.Format(timeout), shortdur.Format(harness.CallSlot(timeout)-timeout))
	if pn.work.redeliveries > 0 {
		basis += fmt.Sprintf(", %d events redelivered until terminal one after another, each allowed the broker's patience of %s and two calls",
			pn.work.redeliveries, shortdur.Format(pn.s.cfg.redeliveryPatience))
	}
	if pn.work.waits > 0 {
		basis += fmt.Sprintf(", %s of waiting in real time", shortdur.Format(pn.work.waits))
	}
	return basis + ", and the harness's own work"
}

// report says where the play is, for the failure of a play whose
// timeout fired.
func (pn *playNode) report() string {
	pn.mu.Lock()
	play, step := pn.play, pn.step
	pn.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "harmless play %s (budget %s)", pn.name, shortdur.Format(pn.budget))
	if step != "" {
		b.WriteString(": at " + step)
	}
	if play != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		b.WriteString("; " + play.Progress(ctx).String())
	}
	return b.String()
}

// rule adds rule id to the play, checked by check. check returns
// the violations it found; none means the rule held. A play whose
// budget ran out fails every rule instead, saying what it had done by then.
func (pn *playNode) rule(id string, check func() []string) {
	pn.noteRule(id, func() ([]string, string) { return check(), "" })
}

// noteRule is rule for checks that also report what they observed when the
// rule held: the note is shown in the certificate, as information.
func (pn *playNode) noteRule(id string, check func() (problems []string, note string)) {
	pn.judgedRule(id, func() judgement {
		problems, note := check()
		return judgement{problems: problems, note: note}
	})
}

// lead is what the play's evidence shows before any rule judges it, for a
// failure message to state first: the crashes of the implementation's
// processes, or that none of its deliveries was acknowledged. "" when
// neither.
func (pn *playNode) lead() string {
	pn.mu.Lock()
	play := pn.play
	pn.mu.Unlock()
	if play == nil {
		return ""
	}
	var parts []string
	if c := play.Crashes(); len(c) > 0 {
		parts = append(parts, fmt.Sprintf("the implementation's processes crashed %s in this play, and were restarted; the first: %s", harness.Times(len(c)), c[0]))
	}
	if u := play.Unacknowledged(); u != "" {
		parts = append(parts, u)
	}
	return strings.Join(parts, "; ")
}

// judgedRule adds rule id to the play, with a check that returns its
// judgement, and masks the run's secrets in it.
func (pn *playNode) judgedRule(id string, check func() judgement) {
	pn.s.addRule(pn, id, func() judgement {
		// A play cut short cannot judge the rule: what it gathered is
		// a part, which could neither prove the rule nor, with its
		// deliveries cut short, fairly fail it on its own terms.
		if p := pn.budgetProblem(); p != "" {
			return judgement{problems: []string{pn.s.secrets.String(p)}, unplayed: true}
		}
		j := check()
		if j.unsupported != "" {
			return judgement{unsupported: pn.s.secrets.String(j.unsupported), inapplicable: j.inapplicable}
		}
		if len(j.problems) > 0 && j.cause == "" && !j.leadless {
			j.lead = pn.lead()
		}
		for i, p := range j.problems {
			j.problems[i] = pn.s.secrets.String(p)
		}
		j.note, j.cause = pn.s.secrets.String(j.note), pn.s.secrets.String(j.cause)
		j.hint, j.lead = pn.s.secrets.String(j.hint), pn.s.secrets.String(j.lead)
		return j
	})
}
