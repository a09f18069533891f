// Package faultplan is what the harness's plans of faults share beneath
// their packages' API: how the deliveries a plan targets (an event, an
// attempt, how many times) are checked and described, alike for the
// database fault points of package faults and the Go hooks of
// internal/hooks.
package faultplan

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/harmless-dev/harmless/adapters"
)

// ValidateTarget checks the event id and the attempt of a plan: an empty
// id never fires, and an attempt is 0 (every attempt) or one PostgreSQL
// can store as an integer.
func ValidateTarget(id string, attempt int) error {
	if id == "" {
		return errors.New("no event id: a plan for an empty id never fires")
	}
	if attempt < 0 || attempt > math.MaxInt32 {
		return fmt.Errorf("attempt %d out of range (0 for every attempt, else 1 to %d)", attempt, math.MaxInt32)
	}
	return nil
}

// DescribeTarget tells which deliveries a plan targets, e.g.
// "ns/42 attempt 1" or "ns/42, once".
func DescribeTarget(namespace, id string, attempt, times int) string {
	s := adapters.Event{Namespace: namespace, ID: id}.String()
	switch {
	case attempt == 0 && times == 0:
		return s + " every attempt"
	case attempt != 0:
		s += " attempt " + strconv.Itoa(attempt)
	}
	switch times {
	case 0:
		return s
	case 1:
		return s + ", once"
	}
	return s + ", at most " + strconv.Itoa(times) + " times"
}
