package suite

import (
	"maps"
	"slices"
	"testing"

	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/catalogid"
)

// TestCatalogueVariantsAreTheSuites: the tree's fixtures are the
// catalogue's, in its order (each fixture's method names the fixture it
// describes); every variant the catalogue decides on is one the suite's
// tree plays, by the same id and name, below its fixture, so that a
// renamed variant cannot escape its requirements; and every node of the
// tree has an id of its own.
func TestCatalogueVariantsAreTheSuites(t *testing.T) {
	s := newState(t.Context(), reference.Adapter(), nil)
	var inTree, inCatalogue []string
	for _, n := range s.root.children {
		inTree = append(inTree, n.fixture)
	}
	for _, f := range fixtures.Catalog() {
		inCatalogue = append(inCatalogue, f.ID)
	}
	if !slices.Equal(inTree, inCatalogue) {
		t.Errorf("the tree describes the fixtures %q; the catalogue lists %q", inTree, inCatalogue)
	}
	byPath := map[string]*node{}
	var walk func(n *node)
	walk = func(n *node) {
		for _, c := range n.children {
			if byPath[c.path()] != nil {
				t.Errorf("two nodes at %s", c.path())
			}
			byPath[c.path()] = c
			walk(c)
		}
	}
	walk(s.root)
	for _, f := range fixtures.Catalog() {
		if byPath[f.ID] == nil {
			t.Errorf("the tree has no node for fixture %s", f.ID)
		}
		for _, v := range f.Variants {
			n := byPath[f.ID+"/"+v.ID]
			switch {
			case n == nil:
				t.Errorf("the catalogue lists variant %s/%s, which the suite's tree does not play", f.ID, v.ID)
			case n.name != v.Name:
				t.Errorf("variant %s/%s is %q in the catalogue and %q in the tree", f.ID, v.ID, v.Name, n.name)
			}
		}
	}
	if n := byPath[catalogid.ConcurrentDelivery+"/overlap"]; n == nil || n.play == nil {
		t.Errorf("the tree has no play at concurrent-delivery/overlap: %v", slices.Sorted(maps.Keys(byPath)))
	}
}

// TestFixturesAskWhenTheyKnow: the suite asks the catalogue about
// retention-expiry when it builds the tree, when only the declaration is
// known, and about crash-recovery and failover before they build an
// instance, once the run is set up (the server is known: owned or not, one
// server or a formation); their requirements must read nothing more.
// failure-after-marker asks with an instance, once the run is set up.
func TestFixturesAskWhenTheyKnow(t *testing.T) {
	knownAt := map[string][]fixtures.Requirement{
		catalogid.RetentionExpiry: {catalogid.NeedsRedeliveryWindow},
		catalogid.CrashRecovery:   {catalogid.NeedsRedeliveryWindow, catalogid.NeedsOwnedServer, catalogid.NeedsSingleServer},
		catalogid.Failover:        {catalogid.NeedsRedeliveryWindow, catalogid.NeedsOwnedServer, catalogid.NeedsFormation},
		catalogid.ExternalEffect:  {catalogid.NeedsExternalEffects},
	}
	for _, f := range fixtures.Catalog() {
		reqs := slices.Clone(f.Requires)
		for _, v := range f.Variants {
			reqs = append(reqs, v.Requires...)
		}
		known, asksEarly := knownAt[f.ID]
		if !asksEarly {
			if f.ID != catalogid.FailureAfterMarker && len(reqs) > 0 {
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
