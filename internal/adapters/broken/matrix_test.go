package broken_test

import (
	"testing"

	"github.com/harmless-dev/harmless/internal/verdictmatrix/matrixtest"
)

// TestVerdictMatrix certifies every broken built-in adapter with the real
// command on a throwaway cluster of its own, and compares each verdict
// with the registry, rule by rule: each must fail exactly the rules its
// entry names, pass every other, and end with the status those verdicts
// make. internal/adapters/alternatives's test of the same name certifies
// the correct ones.
func TestVerdictMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("certifies every broken built-in adapter, which takes minutes")
	}
	t.Parallel()
	matrixtest.Prove(t, matrixtest.Entries(t, true))
}
