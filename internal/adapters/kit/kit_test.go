package kit_test

import (
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
)

// MaxIdentityBytes is a copy of the bound adapters.CheckIdentity enforces,
// which adapters does not export: ValidateBounds must refuse exactly what
// CheckIdentity refuses for length.
func TestMaxIdentityBytesIsCheckIdentitys(t *testing.T) {
	longest := strings.Repeat("x", kit.MaxIdentityBytes)
	for _, ev := range []adapters.Event{
		{Namespace: longest, ID: longest},
		{Namespace: "orders", ID: longest + "x"},
		{Namespace: longest + "x", ID: "1"},
	} {
		checked, bounded := adapters.CheckIdentity(ev) == nil, kit.ValidateBounds(ev) == nil
		if checked != bounded {
			t.Errorf("%d-byte namespace, %d-byte id: CheckIdentity accepts it %t, ValidateBounds %t", len(ev.Namespace), len(ev.ID), checked, bounded)
		}
	}
}
