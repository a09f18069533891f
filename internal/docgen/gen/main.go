// Command gen regenerates what is generated from the fixtures'
// definitions (internal/suite) and the registry of built-in adapters. It
// runs twice from `go generate ./...` (fixtures/doc.go): with -code it
// writes the Go files, the catalogue of package fixtures and the ids of
// internal/catalogid; without, README.md's rule table, docs/proof.md's
// verdict matrix and docs/rules.md. The docs come second, from a new
// build, because they read the catalogue through package fixtures and the
// registry, which must already be the one the first run wrote.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/harmless-dev/harmless/internal/docgen"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	code := flag.Bool("code", false, "write the generated Go files instead of the docs")
	flag.Parse()
	write := docs
	if *code {
		write = goFiles
	}
	if err := write(*root); err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
}

// goFiles writes the Go files generated from the fixtures' definitions.
func goFiles(root string) error {
	files, err := docgen.Code()
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(f.Path)), f.Text, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// docs writes the generated parts of the docs.
func docs(root string) error {
	for _, f := range []struct {
		path   string
		splice func(string) (string, error)
	}{
		{"README.md", docgen.SpliceReadme},
		{filepath.Join("docs", "proof.md"), docgen.SpliceProof},
	} {
		path := filepath.Join(root, f.path)
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		spliced, err := f.splice(string(text))
		if err != nil {
			return fmt.Errorf("%s: %w", f.path, err)
		}
		if err := os.WriteFile(path, []byte(spliced), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(root, "docs", "rules.md"), []byte(docgen.RulesPage()), 0o644)
}
