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

// harnessWork is the time a scenario's budget allows for the harness's own
// work besides its calls to the implementation: creating the play's schema,
// arming faults, reading the ledger. A second more per call covers the
// queries that go with each.
const (
	harnessWork    = time.Minute
	harnessPerCall = time.Second
)

// budgetSlack is how long after its budget a scenario's gather function
// may still run: the calls the budget cut short return, and the harness
// gathers the evidence. The scenario's own timeout ends it only after
// that, as a backstop (see scenario.run).
const budgetSlack = 2 * time.Minute

// work is what a scenario does one after another, the basis of its budget:
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

// scenario is one play of a fixture: its gather function, which plays
// the deliveries and gathers the evidence in a [harness.Play], the budget
// it must finish within, what it has done so far (which every rule of the
// play reports should the budget run out) and the records of its rules,
// which judge the evidence once it is gathered.
//
// The budget follows from the delivery timeout, the broker's patience and
// the work the scenario does one after another: each call ends within
// [harness.CallSlot] of the delivery timeout, and each redelivery until
// terminal within the patience and two slots (the call in flight when the
// patience starts, and the one in flight when it runs out), so a correct
// implementation, however slow, never exhausts it. It exists so that a
// run whose harness is stuck ends with evidence instead of a bare timeout.
type scenario struct {
	s      *state
	name   string // e.g. "concurrent-delivery / plain", for messages
	work   work   // what it does one after another, at most
	budget time.Duration

	node    *node                     // where the scenario is in the tree
	gatherF func(ctx context.Context) // plays and gathers (see gather)
	rules   []*specRecord             // its rules, in the order described

	mu   sync.Mutex
	play *harness.Play
	step string // what the play is doing, e.g. "round 3 of 10"
	// failure, once set, says why the play could not finish: an
	// assertion of the harness's own failed, the harness panicked, or the
	// scenario timed out. Its rules then fail with it, unjudged.
	failure string
	// stopped says the run was stopped (cancelled, interrupted) while the
	// scenario played: its rules are not judged.
	stopped bool
	// started and ended bound the scenario's run.
	started, ended time.Time
	// closers release the play, once its rules are judged.
	closers []func(context.Context) error
}

// scenario returns a scenario named name that does at most w one after
// another, as the play of the node being described.
func (s *state) scenario(name string, w work) *scenario {
	call := harness.CallSlot(s.cfg.deliveryTimeout) + harnessPerCall
	budget := time.Duration(w.calls)*call + time.Duration(w.redeliveries)*(s.cfg.redeliveryPatience+2*call) + w.waits + harnessWork
	if s.cfg.budget > 0 {
		budget = s.cfg.budget
	}
	sc := &scenario{s: s, name: name, work: w, budget: budget}
	s.attach(sc)
	return sc
}

// gather sets the scenario's gather function: it plays the deliveries and
// gathers the evidence its rules judge, within ctx, which ends with the
// scenario's timeout or when the run is stopped. It fails the play with
// [state.expect], from any goroutine that defers [state.recoverGather].
func (sc *scenario) gather(fn func(ctx context.Context)) { sc.gatherF = fn }

// timeout bounds the scenario's gather function: the budget and the slack
// in which the evidence is gathered.
func (sc *scenario) timeout() time.Duration { return sc.budget + budgetSlack }

// begin creates the scenario's play and starts its budget. Call it first
// in the gather function.
func (sc *scenario) begin(ctx context.Context) *harness.Play {
	play := sc.s.newPlay(ctx, sc)
	play.StartBudget(sc.budget)
	sc.mu.Lock()
	sc.play = play
	sc.mu.Unlock()
	return play
}

// at records what the play is doing now, e.g. at("round %d of %d", 3, 10).
// Once the budget has run out the step stays where the play was then.
func (sc *scenario) at(format string, args ...any) {
	if sc.expired() {
		return
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.step = fmt.Sprintf(format, args...)
}

// expired reports whether the scenario's play ran out of its budget.
func (sc *scenario) expired() bool {
	sc.mu.Lock()
	play := sc.play
	sc.mu.Unlock()
	return play != nil && play.OutOfBudget()
}

// budgetProblem says, once the budget has run out, what the scenario had
// done by then: "" otherwise.
func (sc *scenario) budgetProblem() string {
	sc.mu.Lock()
	play, step := sc.play, sc.step
	sc.mu.Unlock()
	if play == nil {
		return ""
	}
	p, expired := play.BudgetExpired()
	if !expired {
		return ""
	}
	msg := fmt.Sprintf("the scenario %s did not finish within its budget of %s (%s)", sc.name, shortdur.Format(sc.budget), sc.budgetBasis())
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
func (sc *scenario) budgetBasis() string {
	if sc.s.cfg.budget > 0 {
		return "a budget the caller set for every scenario"
	}
	timeout := sc.s.cfg.deliveryTimeout
	basis := fmt.Sprintf("%d calls to the implementation one after another, each allowed the delivery timeout of %s and a grace of %s",
		sc.work.calls, shortdur.Format(timeout), shortdur.Format(harness.CallSlot(timeout)-timeout))
	if sc.work.redeliveries > 0 {
		basis += fmt.Sprintf(", %d events redelivered until terminal one after another, each allowed the broker's patience of %s and two calls",
			sc.work.redeliveries, shortdur.Format(sc.s.cfg.redeliveryPatience))
	}
	if sc.work.waits > 0 {
		basis += fmt.Sprintf(", %s of waiting in real time", shortdur.Format(sc.work.waits))
	}
	return basis + ", and the harness's own work"
}

// report says where the scenario is, for the failure of a scenario whose
// timeout fired.
func (sc *scenario) report() string {
	sc.mu.Lock()
	play, step := sc.play, sc.step
	sc.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "harmless scenario %s (budget %s)", sc.name, shortdur.Format(sc.budget))
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

// rule adds rule id to the scenario, checked by check. check returns
// the violations it found; none means the rule held. A scenario whose
// budget ran out fails every rule instead, saying what it had done by then.
func (sc *scenario) rule(id string, check func() []string) {
	sc.noteRule(id, func() ([]string, string) { return check(), "" })
}

// noteRule is rule for checks that also report what they observed when the
// rule held: the note is shown in the certificate, as information.
func (sc *scenario) noteRule(id string, check func() (problems []string, note string)) {
	sc.judgedRule(id, func() judgement {
		problems, note := check()
		return judgement{problems: problems, note: note}
	})
}

// lead is what the play's evidence shows before any rule judges it, for a
// failure message to state first: the crashes of the implementation's
// processes, or that none of its deliveries was acknowledged. "" when
// neither.
func (sc *scenario) lead() string {
	sc.mu.Lock()
	play := sc.play
	sc.mu.Unlock()
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

// judgedRule adds rule id to the scenario, with a check that returns its
// judgement, and masks the run's secrets in it.
func (sc *scenario) judgedRule(id string, check func() judgement) {
	sc.s.addRule(sc, id, func() judgement {
		// A scenario cut short cannot judge the rule: what it gathered is
		// a part, which could neither prove the rule nor, with its
		// deliveries cut short, fairly fail it on its own terms.
		if p := sc.budgetProblem(); p != "" {
			return judgement{problems: []string{sc.s.secrets.String(p)}, unplayed: true}
		}
		j := check()
		if j.unsupported != "" {
			return judgement{unsupported: sc.s.secrets.String(j.unsupported), inapplicable: j.inapplicable}
		}
		if len(j.problems) > 0 && j.cause == "" && !j.leadless {
			j.lead = sc.lead()
		}
		for i, p := range j.problems {
			j.problems[i] = sc.s.secrets.String(p)
		}
		j.note, j.cause = sc.s.secrets.String(j.note), sc.s.secrets.String(j.cause)
		j.hint, j.lead = sc.s.secrets.String(j.hint), sc.s.secrets.String(j.lead)
		return j
	})
}
