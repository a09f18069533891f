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
		on    builtin.Deployment
		want  []certificate.Status
	}{
		{"the reference", entry("reference"), builtin.SingleServer, []certificate.Status{certificate.StatusCertified}},
		{"the reference on a formation", entry("reference"), builtin.Formation, []certificate.Status{certificate.StatusCertified}},
		{"a broken adapter that must fail a MUST rule", entry("broken-case-folded"), builtin.SingleServer, []certificate.Status{certificate.StatusNotCertified}},
		{"one that must fail a MUST rule and may fail another", entry("broken-time-bucketed-key"), builtin.SingleServer, []certificate.Status{certificate.StatusNotCertified}},
		{"one that must fail only rules no single server plays", entry("broken-single-host"), builtin.SingleServer, []certificate.Status{certificate.StatusCertified}},
		{"the same on a formation", entry("broken-single-host"), builtin.Formation, []certificate.Status{certificate.StatusNotCertified}},
		{"one that must fail only a SHOULD rule", entry("broken-cached-claims"), builtin.Formation, []certificate.Status{certificate.StatusCertified}},
		{"one that may fail a MUST rule and must fail none", mayFailOnly, builtin.SingleServer, []certificate.Status{certificate.StatusCertified, certificate.StatusNotCertified}},
	} {
		if got := Statuses(tc.entry, tc.on); !slices.Equal(got, tc.want) {
			t.Errorf("%s (%s): Statuses = %v; want %v", tc.name, tc.entry.Adapter.Name, got, tc.want)
		}
	}
}
