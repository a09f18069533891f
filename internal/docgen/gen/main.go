// Command gen regenerates README.md's rule table, docs/proof.md's verdict
// matrix and docs/rules.md from the rule catalogue and the verdict matrix.
// It runs from `go generate ./...`.
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
	flag.Parse()
	if err := generate(*root); err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
}

func generate(root string) error {
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
