package builtin_test

import (
	"testing"

	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/adaptertest"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestSetupDoesNotWaitForDeliveriesInFlight: a new instance of any built-in
// adapter starts while deliveries in flight hold its tables.
func TestSetupDoesNotWaitForDeliveriesInFlight(t *testing.T) {
	for _, adapter := range builtin.All() {
		t.Run(adapter.Name, func(t *testing.T) {
			t.Parallel()
			adaptertest.SetupDoesNotWaitForDeliveriesInFlight(t, adapter)
		})
	}
}
