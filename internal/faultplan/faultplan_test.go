package faultplan_test

import (
	"testing"

	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/internal/faultplan"
	"github.com/harmless-dev/harmless/internal/faulttest"
)

// TestCountArmed counts every fault armed in a schema, a disarmed one too,
// and only that schema's.
func TestCountArmed(t *testing.T) {
	fx, elsewhere := faulttest.Setup(t), faulttest.Setup(t)
	count := func(schema string) int {
		t.Helper()
		n, err := faultplan.CountArmed(t.Context(), fx.Pool, schema)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(fx.Schema); n != 0 {
		t.Errorf("before Arm: %d faults, want 0", n)
	}
	disarmed := fx.Arm(t, faults.Plan{Namespace: "ns", ID: "1", Point: faults.AtEffect, Action: faults.Raise})
	fx.Arm(t, faults.Plan{Namespace: "ns", ID: "2", Point: faults.AtCommit, Action: faults.Terminate})
	elsewhere.Arm(t, faults.Plan{Namespace: "ns", ID: "3", Point: faults.AtCommit, Action: faults.Raise})
	if err := disarmed.Disarm(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := count(fx.Schema); n != 2 {
		t.Errorf("two faults armed, one disarmed: %d faults, want 2", n)
	}
	if n := count(elsewhere.Schema); n != 1 {
		t.Errorf("the other schema: %d faults, want 1", n)
	}
}
