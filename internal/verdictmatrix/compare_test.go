package verdictmatrix

import (
	"slices"
	"testing"

	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// TestStatusesFollowTheVerdicts: the status the registry allows is the one
// the verdicts it allows make, not whether the adapter is broken.
func TestStatusesFollowTheVerdicts(t *testing.T) {
	entry := func(name string) builtin.Entry {
		e, err := builtin.EntryOf(name)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	mayFailOnly := entry("reference")
	mayFailOnly.MayFail = map[string]string{"double-delivery.one-effect": "a made-up entry"}
	for _, tc := range []struct {
		name  string
		entry builtin.Entry
		want  []certificate.Status
	}{
		{"the reference", entry("reference"), []certificate.Status{certificate.StatusCertified}},
		{"a broken adapter that must fail a MUST rule", entry("broken-case-folded"), []certificate.Status{certificate.StatusNotCertified}},
		{"one that must fail a MUST rule and may fail another", entry("broken-time-bucketed-key"), []certificate.Status{certificate.StatusNotCertified}},
		{"one that must fail only rules no single server plays", entry("broken-single-host"), []certificate.Status{certificate.StatusCertified}},
		{"one that may fail a MUST rule and must fail none", mayFailOnly, []certificate.Status{certificate.StatusCertified, certificate.StatusNotCertified}},
	} {
		if got := Statuses(tc.entry); !slices.Equal(got, tc.want) {
			t.Errorf("%s (%s): Statuses = %v; want %v", tc.name, tc.entry.Adapter.Name, got, tc.want)
		}
	}
}
