package docgen_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/docgen"
	"github.com/harmless-dev/harmless/internal/suite"
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

// TestGeneratedCodeIsCurrent fails when the catalogue of package
// fixtures or the ids of internal/catalogid no longer match the fixtures'
// definitions: it generates them again, in memory.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	files, err := docgen.Code()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("nothing is generated")
	}
	for _, f := range files {
		text, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(f.Path)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(text, f.Text) {
			t.Errorf("%s is stale: run go generate ./...", f.Path)
		}
	}
}

// TestGeneratorNeedsNotItsOutput: no package the generator compiles names
// a constant it generates, so that a fixture, a rule or an id that is new
// or renamed in a definition cannot keep the generator from compiling
// before it has written them. The suite names its own ids instead.
func TestGeneratorNeedsNotItsOutput(t *testing.T) {
	files, err := docgen.Code()
	if err != nil {
		t.Fatal(err)
	}
	generated := map[string]bool{} // catalogid's generated names
	for _, f := range files {
		file, err := parser.ParseFile(token.NewFileSet(), f.Path, f.Text, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		if file.Name.Name != "catalogid" {
			continue
		}
		for _, d := range file.Decls {
			if g, ok := d.(*ast.GenDecl); ok {
				for _, spec := range g.Specs {
					for _, n := range spec.(*ast.ValueSpec).Names {
						generated[n.Name] = true
					}
				}
			}
		}
	}
	if len(generated) == 0 {
		t.Fatal("no generated constant of internal/catalogid found")
	}
	// The module's packages the generator links, with their directories
	// and non-test files.
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", "{{.ImportPath}} {{.Dir}}{{range .GoFiles}} {{.}}{{end}}", module+"/internal/docgen/gen").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) < 3 || !strings.HasPrefix(fields[0], module+"/") {
			continue
		}
		for _, name := range fields[2:] {
			path := filepath.Join(fields[1], name)
			file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "catalogid" && generated[sel.Sel.Name] {
					t.Errorf("%s names catalogid.%s, which the generator writes: name the id as its fixture's definition does", path, sel.Sel.Name)
				}
				return true
			})
		}
	}
}

const module = "github.com/harmless-dev/harmless"

// TestFixturePagesExist: every page a fixture's definition names is a
// page of docs/.
func TestFixturePagesExist(t *testing.T) {
	linked := 0
	for _, d := range suite.Definitions() {
		if d.Page == (suite.DocPage{}) {
			continue
		}
		linked++
		if d.Page.Title == "" {
			t.Errorf("fixture %s links %s without a title", d.Fixture.ID, d.Page.File)
		}
		if _, err := os.Stat(filepath.Join("..", "..", "docs", d.Page.File)); err != nil {
			t.Errorf("fixture %s links a page that does not exist: %v", d.Fixture.ID, err)
		}
	}
	if linked == 0 {
		t.Error("no fixture links a page")
	}
}
