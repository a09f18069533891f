package suite

import (
	"slices"
	"testing"

	"github.com/harmless-dev/harmless/fixtures"
)

// TestCatalogueVariantsAreTheSuites: every variant the catalogue decides
// on is one the suite plays, by the same name, so that a renamed variant
// cannot escape its requirements.
func TestCatalogueVariantsAreTheSuites(t *testing.T) {
	played := map[string][]string{}
	for _, f := range failures {
		played[fixtures.FailureAfterMarker] = append(played[fixtures.FailureAfterMarker], f.name)
	}
	for _, f := range fixtures.Catalog() {
		for _, v := range f.Variants {
			if !slices.Contains(played[f.ID], v.Name) {
				t.Errorf("the catalogue lists variant %q of %s, which the suite does not play (it plays %q)", v.Name, f.ID, played[f.ID])
			}
		}
	}
}

// TestFixturesAskWhenTheyKnow: the suite asks the catalogue about
// retention-expiry when it builds the tree, when only the declaration is
// known, and about crash-recovery before it builds an instance; their
// requirements must read nothing more. failure-after-marker asks with an
// instance, once the run is set up.
func TestFixturesAskWhenTheyKnow(t *testing.T) {
	knownAt := map[string][]fixtures.Requirement{
		fixtures.RetentionExpiry: {fixtures.NeedsRedeliveryWindow},
		fixtures.CrashRecovery:   {fixtures.NeedsRedeliveryWindow, fixtures.NeedsOwnedServer},
		fixtures.ExternalEffect:  {fixtures.NeedsExternalEffects},
	}
	for _, f := range fixtures.Catalog() {
		reqs := slices.Clone(f.Requires)
		for _, v := range f.Variants {
			reqs = append(reqs, v.Requires...)
		}
		known, asksEarly := knownAt[f.ID]
		if !asksEarly {
			if f.ID != fixtures.FailureAfterMarker && len(reqs) > 0 {
				t.Errorf("fixture %s requires %q, but the suite never asks the catalogue about it", f.ID, reqs)
			}
			continue
		}
		for _, r := range reqs {
			if !slices.Contains(known, r) {
				t.Errorf("fixture %s requires %q, which the suite does not know yet when it asks", f.ID, r)
			}
		}
	}
}
