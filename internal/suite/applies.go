package suite

import (
	"fmt"
	"slices"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/applicability"
	"github.com/harmless-dev/harmless/internal/effect"
)

// applies decides, with the one function that decides
// ([applicability.Of]), whether the fixture id is played against
// this run, and which of its variants are not: the same answer
// `harmless list --adapter` gives before the run.
//
// What the suite knows grows as the run goes: the adapter's declaration
// when the spec tree is built, the server once the run is set up, where
// the implementation runs once an instance is built. impl is that
// instance, or nil before one is; the server is read only once the run is
// set up. Each fixture asks when what its requirements read is known,
// which TestFixturesAskWhenTheyKnow checks against the catalogue.
func (s *state) applies(id string, impl adapters.Implementation) applicability.Decision {
	f, err := fixtures.LookupFixture(id)
	if err != nil {
		// The suite's fixture ids are its definitions', from which the
		// catalogue is generated.
		panic(fmt.Sprintf("harmless: %v", err)) // a stale catalogue: go generate ./...
	}
	t := applicability.Target{
		RedeliveryWindow: s.adapter.Declares.RedeliveryWindow,
		AcceptsClock:     s.adapter.Declares.AcceptsClock,
		OutOfProcess:     impl != nil && effect.IsRemote(impl),
		ExternalEffects:  string(s.adapter.Declares.ExternalEffects),
	}
	if s.run != nil {
		t.OwnedServer = s.run.Server().Owned()
		t.Formation = s.run.Formation() != nil
	}
	return applicability.Of(f, t)
}

// listsVariant reports whether the catalogue lists the variant of fixture
// id, i.e. whether it needs more than the fixture does. Only for those
// does the suite build an instance before it decides, to learn where the
// implementation runs; other variants keep their own order of building
// (a proxy variant builds its instance behind the proxy).
func listsVariant(id, variant string) bool {
	f, err := fixtures.LookupFixture(id)
	return err == nil && slices.ContainsFunc(f.Variants, func(v fixtures.Variant) bool { return v.ID == variant })
}
