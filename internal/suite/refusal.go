package suite

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// delivered is what delivering one event left behind: its first delivery
// and, when the fixture delivers it again, its redelivery, each redelivered
// until terminal as a broker does, and its effects in the ledger.
//
// It holds the suite's one notion of a clean refusal ([delivered.refusedCleanly]),
// so that what one rule accepts as a refusal no other rule counts as a
// failure.
type delivered struct {
	ev      adapters.Event
	first   []harness.Attempt
	again   []harness.Attempt // nil when the fixture did not deliver it again
	effects []ledger.Entry
}

// attempts returns every attempt, in order.
func (d delivered) attempts() []harness.Attempt {
	return append(slices.Clone(d.first), d.again...)
}

// ended returns the last attempt of a delivery until terminal, or false for
// one that was not made.
func ended(tries []harness.Attempt) (harness.Attempt, bool) {
	if len(tries) == 0 {
		return harness.Attempt{}, false
	}
	return tries[len(tries)-1], true
}

// processedOnce reports whether the event was processed exactly once: the
// ledger holds exactly one effect, its first delivery ended Applied, and
// its redelivery (if the fixture made one) Duplicate. The first delivery
// may also end Duplicate when an earlier attempt of it went unacknowledged
// (it timed out, say, on a loaded machine) yet applied the one effect: the
// broker's redelivery then rightly finds the event claimed.
func (d delivered) processedOnce() bool {
	first, ok := ended(d.first)
	if !ok || !first.Acked() || len(d.effects) != 1 {
		return false
	}
	switch first.Outcome {
	case adapters.Applied:
	case adapters.Duplicate:
		if !appliedUnacknowledged(d.first, d.effects[0].Attempt) {
			return false
		}
	default:
		return false
	}
	if d.again == nil {
		return true
	}
	again, _ := ended(d.again)
	return again.Acked() && again.Outcome == adapters.Duplicate
}

// appliedUnacknowledged reports whether attempt is one of tries that went
// unacknowledged.
func appliedUnacknowledged(tries []harness.Attempt, attempt int) bool {
	for _, a := range tries {
		if a.Delivery.Attempt == attempt && !a.Acked() {
			return true
		}
	}
	return false
}

// refusedCleanly reports whether the event was refused cleanly: every
// attempt was refused with an error wrapping [adapters.ErrInvalidInput], so
// a broker stops at the first and never redelivers, and the ledger holds no
// effect. It is the only refusal any rule accepts, and every rule accepts
// it for an event the implementation may not be able to store.
func (d delivered) refusedCleanly() bool {
	attempts := d.attempts()
	if len(attempts) == 0 || len(d.effects) != 0 {
		return false
	}
	for _, a := range attempts {
		if !errors.Is(a.Err, adapters.ErrInvalidInput) {
			return false
		}
	}
	return true
}

// refusedSometimes reports whether some attempt was refused as invalid
// input, cleanly or not.
func (d delivered) refusedSometimes() bool {
	return slices.ContainsFunc(d.attempts(), func(a harness.Attempt) bool { return errors.Is(a.Err, adapters.ErrInvalidInput) })
}

// summary states, for messages, how each delivery ended and how many
// effects the ledger holds, e.g. "Applied, redelivery Duplicate, 1 effect".
func (d delivered) summary() string {
	parts := []string{runResult(d.first)}
	if d.again != nil {
		parts = append(parts, "redelivery "+runResult(d.again))
	}
	return strings.Join(parts, ", ") + ", " + effectCount(len(d.effects))
}

// runResult states how one delivery until terminal ended.
func runResult(tries []harness.Attempt) string {
	last, ok := ended(tries)
	switch {
	case !ok:
		return "never delivered"
	case len(tries) == 1:
		return last.Result()
	}
	return fmt.Sprintf("%s after %d attempts", last.Result(), len(tries))
}

func effectCount(n int) string {
	if n == 1 {
		return "1 effect"
	}
	return fmt.Sprintf("%d effects", n)
}

// describe is the event's evidence for a failure message.
func (d delivered) describe() string {
	return harness.DescribeEvent(d.ev, d.effects, d.attempts())
}
