package docgen_test

import (
	"os"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/docgen"
)

// TestGeneratedDocsAreCurrent fails when README.md, docs/proof.md or
// docs/rules.md no longer match the rule catalogue and the verdict matrix.
func TestGeneratedDocsAreCurrent(t *testing.T) {
	for _, f := range []struct {
		path, part string
		splice     func(string) (string, error)
	}{
		{"README.md", "rule table", docgen.SpliceReadme},
		{"docs/proof.md", "verdict matrix", docgen.SpliceProof},
	} {
		text, err := os.ReadFile("../../" + f.path)
		if err != nil {
			t.Fatal(err)
		}
		want, err := f.splice(string(text))
		if err != nil {
			t.Fatalf("%s: %v", f.path, err)
		}
		if string(text) != want {
			t.Errorf("%s's %s is stale: run go generate ./...", f.path, f.part)
		}
	}
	page, err := os.ReadFile("../../docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	if string(page) != docgen.RulesPage() {
		t.Error("docs/rules.md is stale: run go generate ./...")
	}
}

func TestEveryRuleIsDocumented(t *testing.T) {
	page := docgen.RulesPage()
	table := docgen.RulesTable()
	for _, r := range fixtures.Rules() {
		if !strings.Contains(page, "### "+r.ID+"\n") || !strings.Contains(page, r.Reason) {
			t.Errorf("docs/rules.md lacks rule %s or its reason", r.ID)
		}
		if !strings.Contains(table, "`"+r.ID+"`") {
			t.Errorf("the README table lacks rule %s", r.ID)
		}
	}
}

func TestFixturePagesExist(t *testing.T) {
	linked := 0
	for _, f := range fixtures.Catalog() {
		page, ok := docgen.FixturePage(f.ID)
		if !ok {
			continue
		}
		linked++
		if _, err := os.Stat("../../docs/" + page.File); err != nil {
			t.Errorf("fixture %s links a page that does not exist: %v", f.ID, err)
		}
	}
	if linked == 0 {
		t.Error("no fixture links a page")
	}
}
