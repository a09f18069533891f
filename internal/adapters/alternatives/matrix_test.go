package alternatives_test

import (
	"testing"

	"github.com/harmless-dev/harmless/internal/verdictmatrix/matrixtest"
)

// TestVerdictMatrix certifies every correct built-in adapter, the
// reference and the alternatives, with the real command on a throwaway
// cluster of its own, and compares each verdict with the registry, rule by
// rule: each must be certified. internal/adapters/broken's test of the same
// name certifies the broken ones.
func TestVerdictMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("certifies every correct built-in adapter, which takes minutes")
	}
	t.Parallel()
	matrixtest.Prove(t, matrixtest.Entries(t, false))
}
