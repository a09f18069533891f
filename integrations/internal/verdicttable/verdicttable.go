// Package verdicttable makes the table of the integrations' verdicts, in
// docs/integrations.md and integrations/README.md, from evidence only: each package's
// committed certificate (testdata/certificate.json), the library's version
// pinned in integrations/go.mod, and the reproductions in its
// repro_test.go. Run `go generate ./...` in integrations after -update; a
// test fails while either page is stale.
//
// A package names its library with a directive in one of its files:
//
//	//harmless:library github.com/dtm-labs/dtm
//
// Each reproduction says which failed rules it shows and why, in its doc
// comment:
//
//	// Reproduces: conflicting-payload.conflict-detected
//	// Cause: the barrier keys on the identity only, never the payload
//
// A failed rule that no reproduction shows, or a reproduction of a rule that
// did not fail, is an error: the table holds no failure without its
// evidence.
package verdicttable

//go:generate go run ./gen -root ../../..

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// Markers delimit the generated table in both pages.
const (
	Begin = "<!-- BEGIN GENERATED INTEGRATIONS: cd integrations && go generate ./... -->"
	End   = "<!-- END GENERATED INTEGRATIONS -->"
)

// Directive names a package's library.
const Directive = "//harmless:library "

// Library is one integration: a library, how it was judged, and the
// reproductions of its failures.
type Library struct {
	// Package is the package's directory under integrations.
	Package string
	// Module is the library's module path, and Version the version pinned
	// in integrations/go.mod.
	Module, Version string
	// Cert is the committed certificate.
	Cert certificate.Certificate
	// Repros are the package's reproductions, in file order.
	Repros []Repro
}

// Repro is one reproduction: a plain Go test showing a failure's cause
// without the harness.
type Repro struct {
	// Test is the test function's name; File (relative to integrations)
	// and Line locate it.
	Test string
	File string
	Line int
	// Rules are the failed rules it shows, Cause why they fail.
	Rules []string
	Cause string
}

// Load reads every integration under dir, the integrations module's root:
// each directory with a testdata/certificate.json.
func Load(dir string) ([]Library, error) {
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return nil, err
	}
	mod, err := modfile.Parse("go.mod", gomod, nil)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var libs []Library
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		certPath := filepath.Join(dir, e.Name(), "testdata", "certificate.json")
		if _, err := os.Stat(certPath); errors.Is(err, os.ErrNotExist) {
			continue
		}
		lib, err := load(dir, e.Name(), certPath, mod)
		if err != nil {
			return nil, fmt.Errorf("integration %s: %w", e.Name(), err)
		}
		libs = append(libs, lib)
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("no integration under %s has a testdata/certificate.json", dir)
	}
	return libs, nil
}

func load(dir, pkg, certPath string, mod *modfile.File) (Library, error) {
	lib := Library{Package: pkg}
	b, err := os.ReadFile(certPath)
	if err != nil {
		return lib, err
	}
	if err := json.Unmarshal(b, &lib.Cert); err != nil {
		return lib, fmt.Errorf("%s: %w", certPath, err)
	}
	if lib.Module, err = libraryOf(filepath.Join(dir, pkg)); err != nil {
		return lib, err
	}
	for _, r := range mod.Require {
		if r.Mod.Path == lib.Module {
			lib.Version = r.Mod.Version
		}
	}
	if lib.Version == "" {
		return lib, fmt.Errorf("library %s is not required in go.mod, so its version is unknown", lib.Module)
	}
	lib.Repros, err = repros(dir, filepath.Join(pkg, "repro_test.go"))
	if err != nil {
		return lib, err
	}
	return lib, lib.Check()
}

// libraryOf reads the //harmless:library directive of the package in dir.
func libraryOf(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return "", err
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if m, ok := strings.CutPrefix(line, Directive); ok {
				return strings.TrimSpace(m), nil
			}
		}
	}
	return "", fmt.Errorf("no file of the package has a %q directive naming its library", strings.TrimSpace(Directive))
}

// repros parses the reproductions of file, relative to dir.
func repros(dir, file string) ([]Repro, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(dir, file), nil, parser.ParseComments)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Repro
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "TestRepro") {
			continue
		}
		r := Repro{Test: fn.Name.Name, File: filepath.ToSlash(file), Line: fset.Position(fn.Pos()).Line}
		for _, line := range strings.Split(fn.Doc.Text(), "\n") {
			if rules, ok := strings.CutPrefix(line, "Reproduces:"); ok {
				for _, id := range strings.Split(rules, ",") {
					r.Rules = append(r.Rules, strings.TrimSpace(id))
				}
			}
			if cause, ok := strings.CutPrefix(line, "Cause:"); ok {
				r.Cause = strings.TrimSuffix(strings.TrimSpace(cause), ".")
			}
		}
		if len(r.Rules) == 0 || r.Cause == "" {
			return nil, fmt.Errorf("%s: %s's doc comment needs a \"Reproduces: rule, ...\" line and a \"Cause: ...\" line", file, r.Test)
		}
		out = append(out, r)
	}
	return out, nil
}

// Check holds the library's evidence to its certificate: every failed
// rule has a reproduction, and every reproduction shows a failed rule.
func (l Library) Check() error {
	failed := map[string]bool{}
	for _, r := range l.Cert.Rules {
		if r.Verdict == certificate.VerdictFail {
			failed[r.ID] = true
		}
	}
	shown := map[string]bool{}
	var errs []error
	for _, r := range l.Repros {
		for _, id := range r.Rules {
			if _, err := fixtures.Lookup(id); err != nil {
				errs = append(errs, fmt.Errorf("%s reproduces %q, which is no rule", r.Test, id))
			} else if !failed[id] {
				errs = append(errs, fmt.Errorf("%s reproduces %s, which the certificate does not fail", r.Test, id))
			}
			shown[id] = true
		}
	}
	for _, r := range l.Cert.Rules {
		if failed[r.ID] && !shown[r.ID] {
			errs = append(errs, fmt.Errorf("rule %s failed and no TestRepro in %s/repro_test.go reproduces it", r.ID, l.Package))
		}
	}
	return errors.Join(errs...)
}

// Table is the Markdown of the verdicts of libs, with links relative to
// base (the integrations directory as seen from the page that holds it:
// "../integrations/" or "").
func Table(libs []Library, base string) string {
	var b strings.Builder
	b.WriteString("| | " + join(libs, func(l Library) string {
		return fmt.Sprintf("[%s](%s%s)", l.Cert.Adapter, base, l.Package)
	}) + " |\n|---|" + strings.Repeat("---|", len(libs)) + "\n")
	row := func(head string, cell func(Library) string) {
		b.WriteString("| " + head + " | " + join(libs, cell) + " |\n")
	}
	row("library", func(l Library) string { return "`" + l.Module + "`" })
	row("version", func(l Library) string { return l.Version })
	row("status", func(l Library) string { return "**" + strings.ReplaceAll(string(l.Cert.Status), "-", " ") + "**" })
	row("rules", func(l Library) string { return l.Cert.Summary() })
	row("judged on", func(l Library) string {
		return fmt.Sprintf("%s, PostgreSQL %s", l.Cert.DatabaseKind, serverVersion(l.Cert.Database))
	})
	for _, f := range fixtures.Catalog() {
		row("`"+f.ID+"`", func(l Library) string { return fixtureVerdict(l.Cert, f.ID) })
	}
	b.WriteString("\nEach failure, its cause, and the plain Go test that shows it without the harness:\n")
	for _, l := range libs {
		fmt.Fprintf(&b, "\n**%s** (`%s` %s)\n\n", l.Cert.Adapter, l.Module, l.Version)
		n := 0
		for _, r := range l.Cert.Rules {
			if r.Verdict != certificate.VerdictFail {
				continue
			}
			n++
			var why []string
			for _, p := range l.Repros {
				if slices.Contains(p.Rules, r.ID) {
					why = append(why, fmt.Sprintf("%s ([%s](%s%s#L%d))", p.Cause, p.Test, base, p.File, p.Line))
				}
			}
			fmt.Fprintf(&b, "- `%s`: %s\n", r.ID, strings.Join(why, "; "))
		}
		if n == 0 {
			b.WriteString("- no rule failed\n")
		}
	}
	return b.String()
}

// serverVersion is the version number at the head of the server's
// version string ("15.20 (Debian 15.20-0+deb12u1)").
func serverVersion(version string) string {
	if f := strings.Fields(version); len(f) > 0 {
		return f[0]
	}
	return "unknown"
}

func join(libs []Library, cell func(Library) string) string {
	cells := make([]string, len(libs))
	for i, l := range libs {
		cells[i] = cell(l)
	}
	return strings.Join(cells, " | ")
}

// fixtureVerdict sums up the verdicts of fixture's rules in c: a failure
// first, then one verdict when all share it, else the count of each.
func fixtureVerdict(c certificate.Certificate, fixture string) string {
	count := map[certificate.Verdict]int{}
	n := 0
	for _, r := range c.Rules {
		if r.Fixture == fixture {
			count[r.Verdict]++
			n++
		}
	}
	if n == 0 {
		return "not run"
	}
	if f := count[certificate.VerdictFail]; f > 0 {
		return fmt.Sprintf("**fail** (%d of %d rules)", f, n)
	}
	order := []certificate.Verdict{certificate.VerdictPass, certificate.VerdictNotApplicable, certificate.VerdictNotSupported, certificate.VerdictSkipped}
	var parts []string
	for _, v := range order {
		if count[v] == n {
			return string(v)
		}
		if count[v] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", count[v], v))
		}
	}
	return strings.Join(parts, ", ")
}

// Splice puts table between the markers of doc.
func Splice(doc, table string) (string, error) {
	i := strings.Index(doc, Begin)
	j := strings.Index(doc, End)
	if i < 0 || j < i {
		return "", fmt.Errorf("the markers %q and %q are missing or out of order", Begin, End)
	}
	return doc[:i+len(Begin)] + "\n" + table + doc[j:], nil
}

// Doc is a file that holds the table: its path from the repository's root,
// and the integrations directory as seen from it, for links.
type Doc struct{ Path, Base string }

// Docs returns the files that hold the table.
func Docs() []Doc {
	return []Doc{{Path: "docs/integrations.md", Base: "../integrations/"}, {Path: "integrations/README.md", Base: ""}}
}
