package soak

import (
	"fmt"
	"time"

	"github.com/harmless-dev/harmless/adapters"
)

// Status is how a delivery ended, as in a Jepsen history.
type Status uint8

const (
	// OK: the delivery was acknowledged with an outcome.
	OK Status = iota + 1
	// Fail: the delivery was refused with an error that says nothing was
	// applied (adapters.ErrPayloadConflict, adapters.ErrInvalidInput). A
	// broker stops redelivering after it.
	Fail
	// Info: the outcome is unknown: an error, a cut connection, a timeout.
	// The delivery may or may not have applied the effect, at any time
	// between its invocation and its completion (or, for a call that
	// hung, at any time after its invocation).
	Info
)

func (s Status) String() string {
	switch s {
	case OK:
		return "ok"
	case Fail:
		return "fail"
	case Info:
		return "info"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Variant says which payload a delivery carried: the event's own, or the
// conflicting copy (same identity, another payload).
type Variant uint8

const (
	Original Variant = iota
	Conflicting
)

func (v Variant) String() string {
	if v == Conflicting {
		return "conflicting copy"
	}
	return "original"
}

// Refusal is what a Fail delivery was refused with.
type Refusal uint8

const (
	NoRefusal Refusal = iota
	// RefusedConflict: an error wrapping adapters.ErrPayloadConflict, which
	// is the same answer as adapters.Rejected.
	RefusedConflict
	// RefusedInvalid: an error wrapping adapters.ErrInvalidInput.
	RefusedInvalid
)

// Op is one delivery in the history: compact, so the checker can hold every
// one of a long run. Times are offsets from the soak's start.
type Op struct {
	// Event is the event's index in the generated stream, from 0.
	Event uint32
	// Instance is the implementation instance that handled it, from 1.
	Instance uint16
	// Attempt is the harness's delivery number for the event (the
	// ledger records it with the effect), from 1.
	Attempt uint16
	Variant Variant
	Status  Status
	// Outcome is the acknowledged outcome when Status is OK.
	Outcome adapters.Outcome
	// Refusal is set when Status is Fail.
	Refusal Refusal
	// Err indexes the error's first line in the history's table of
	// distinct errors (see Checker.Error) when Status is not OK; 0 is
	// none.
	Err uint32
	// Hung is set when the call did not return: its effect may land at any
	// time after Invoke, and Return is when the harness gave up on it.
	Hung bool
	// Invoke and Return are when the delivery started and ended.
	Invoke, Return time.Duration
}
