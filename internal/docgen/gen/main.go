// Command gen regenerates README.md's rule table and docs/rules.md from the
// rule catalogue. It runs from `go generate ./...`.
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
	readmePath := filepath.Join(root, "README.md")
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		return err
	}
	spliced, err := docgen.SpliceReadme(string(readme))
	if err != nil {
		return err
	}
	if err := os.WriteFile(readmePath, []byte(spliced), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(root, "docs", "rules.md"), []byte(docgen.RulesPage()), 0o644)
}
