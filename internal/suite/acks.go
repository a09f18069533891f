package suite

import (
	"fmt"
	"strings"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// What an answer promises, which the rules judge from outside: Applied
// means the event's effect is committed, once, by this delivery;
// Duplicate means it was committed before, by any delivery; Rejected
// means no effect; an error promises nothing, and the broker redelivers.
// How an implementation keeps those promises (an error returned at once,
// a retry inside the delivery, a claim token read back after a lost
// COMMIT) is its own business: a delivery that met a fault and still
// answers Applied, with its effect committed when it answered, is
// correct.

// unbacked returns the attempts acknowledged Applied or Duplicate while
// the ledger held no effect of their event (see [harness.AckCheck]).
func unbacked(attempts []harness.Attempt) []harness.Attempt {
	var out []harness.Attempt
	for _, a := range attempts {
		if a.Unbacked() {
			out = append(out, a)
		}
	}
	return out
}

// unbackedProblem states the acknowledgements among attempts that were
// given while no effect of the event was committed, "" when there are
// none. Such an answer is false when it is given, whatever happens
// later: a broker that has it redelivers nothing.
func unbackedProblem(attempts []harness.Attempt) string {
	list := unbackedList(attempts)
	if list == "" {
		return ""
	}
	return list + " while the ledger held no effect of the event: an acknowledgement promises a committed effect, and a broker that has one does not redeliver the event"
}

// unbackedList names the acknowledgements among attempts given while no
// effect of the event was committed, e.g. "attempt 2 on instance 1
// answered Duplicate", "" when there are none.
func unbackedList(attempts []harness.Attempt) string {
	var each []string
	for _, a := range unbacked(attempts) {
		each = append(each, fmt.Sprintf("attempt %d on instance %d answered %s", a.Delivery.Attempt, a.Instance, a.Outcome))
	}
	return strings.Join(each, "; ")
}

// appliedOnce judges that an event ended applied exactly once after the
// broker redelivered what was not acknowledged: tries are the deliveries
// of the event one after another, until terminal. The last must be
// acknowledged; the ledger must hold exactly one effect; and at most one
// delivery may answer Applied: a broker that hears Applied twice for one
// event was told it was applied twice. Which delivery answers Applied is
// the implementation's business: the one that applied the effect, or,
// when that one got no acknowledgement through (its COMMIT's answer was
// lost, it timed out), a later one that finds the effect committed, as an
// inbox that answers for a stored delivery does.
func appliedOnce(tries []harness.Attempt, effects []ledger.Entry) []string {
	var problems []string
	last, ok := ended(tries)
	switch {
	case !ok:
		return []string{"the event was never delivered"}
	case !last.Acked():
		problems = append(problems, fmt.Sprintf("no delivery of the event was acknowledged: the last of %d ended %s", len(tries), last.Result()))
	case last.Outcome == adapters.Rejected:
		problems = append(problems, fmt.Sprintf("attempt %d answered Rejected: an ordinary event was refused", last.Delivery.Attempt))
	}
	if len(effects) != 1 {
		problems = append(problems, fmt.Sprintf("the ledger holds %d effects of the event; expected exactly one", len(effects)))
	}
	if applied := appliedAnswers(tries); len(applied) > 1 {
		problems = append(problems, fmt.Sprintf("%d deliveries answered Applied (attempts %s): the broker was told twice that the event was applied", len(applied), harness.AttemptNumbers(applied)))
	}
	return problems
}

// appliedAnswers returns the attempts acknowledged Applied.
func appliedAnswers(attempts []harness.Attempt) []harness.Attempt {
	var out []harness.Attempt
	for _, a := range attempts {
		if a.Acked() && a.Outcome == adapters.Applied {
			out = append(out, a)
		}
	}
	return out
}

// The guesses at a cause that the answers themselves point to, for a
// failure message's hint (see judgement.hint): each is chosen only when
// the history holds the answer it explains.
const (
	// unbackedAppliedHint explains an Applied answered while no effect
	// was committed.
	unbackedAppliedHint = "a failed transaction was taken for a success: an error of the effect or of COMMIT was swallowed, or a COMMIT whose answer was lost was assumed to have landed (it may have rolled back), and the delivery answered Applied"
	// unbackedDuplicateHint explains a Duplicate answered while no effect
	// was committed.
	unbackedDuplicateHint = "a claim that stays when its effect does not: a marker committed in a transaction of its own before the effect, a claim kept after the effect's own retries ran out, or a claim another delivery still holds uncommitted, taken for a finished one; a delivery that finds it answers Duplicate"
	// extraEffectHint explains an event applied more than once after a
	// failure.
	extraEffectHint = "a delivery, or a retry inside one, applied the effect again without finding the claim committed with the first: the effect and the marker are not committed together, or the retry does not look for its own earlier claim"
)

// ackHint guesses at the cause of false answers and extra effects from
// the history alone: "" when the history holds neither, and the rule's
// usual suspect is left to speak.
func ackHint(attempts []harness.Attempt, effects int) string {
	var hints []string
	applied, duplicate := false, false
	for _, a := range unbacked(attempts) {
		applied = applied || a.Outcome == adapters.Applied
		duplicate = duplicate || a.Outcome == adapters.Duplicate
	}
	if applied {
		hints = append(hints, unbackedAppliedHint)
	}
	if duplicate {
		hints = append(hints, unbackedDuplicateHint)
	}
	if effects > 1 {
		hints = append(hints, extraEffectHint)
	}
	return strings.Join(hints, "; or ")
}

// stuckHint explains an event that no delivery got acknowledged after a
// failure, when the answers show no other cause: "" when the last of
// tries was acknowledged.
func stuckHint(tries []harness.Attempt) string {
	last, ok := ended(tries)
	if !ok || last.Acked() {
		return ""
	}
	return fmt.Sprintf("the failure left the event, or the instance, stuck: every redelivery failed too, the last with %s (a lock or an open transaction kept on a connection, a claim or lease that never expires, a connection that is never replaced)", last.Result())
}

// answersHint is ackHint, else stuckHint: the guess the answers support.
func answersHint(tries, history []harness.Attempt, effects int) string {
	if h := ackHint(history, effects); h != "" {
		return h
	}
	return stuckHint(tries)
}
