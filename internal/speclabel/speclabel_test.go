package speclabel_test

import (
	"testing"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/speclabel"
)

// TestLabelsAreGinkgoLabels: every label of every rule of the catalogue
// is one a Ginkgo label filter can name, and selects that rule's spec
// alone among the specs of the other rules.
func TestLabelsAreGinkgoLabels(t *testing.T) {
	for _, r := range fixtures.Rules() {
		match, err := types.ParseLabelFilter(speclabel.Rule(r.ID))
		if err != nil {
			t.Errorf("rule %s: label %q is not a valid Ginkgo label: %v", r.ID, speclabel.Rule(r.ID), err)
			continue
		}
		for _, other := range fixtures.Rules() {
			if match(speclabel.Of(other)) != (other.ID == r.ID) {
				t.Errorf("the label filter %q selects rule %s: %t", speclabel.Rule(r.ID), other.ID, other.ID != r.ID)
			}
		}
		if _, err := types.ParseLabelFilter(speclabel.Fixture(r.Fixture)); err != nil {
			t.Errorf("fixture %s: label %q is not a valid Ginkgo label: %v", r.Fixture, speclabel.Fixture(r.Fixture), err)
		}
	}
}
