package suite

import (
	"reflect"
	"testing"

	"github.com/harmless-dev/harmless/fixtures"
)

// TestDefinitionsAreTheCatalogue: the catalogue is the fixtures'
// definitions, entry for entry.
func TestDefinitionsAreTheCatalogue(t *testing.T) {
	var defined []fixtures.Fixture
	for _, d := range Definitions() {
		defined = append(defined, d.Fixture)
	}
	if catalog := fixtures.Catalog(); !reflect.DeepEqual(defined, catalog) {
		t.Errorf("the definitions are not the catalogue:\n%+v\n%+v", defined, catalog)
	}
}
