// Command gen rewrites the verdict table of the integrations in
// docs/integrations.md and integrations/README.md from the committed
// certificates. It runs from
// `go generate ./...` in the integrations module.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/harmless-dev/harmless/integrations/internal/verdicttable"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	if err := generate(*root); err != nil {
		fmt.Fprintln(os.Stderr, "verdicttable:", err)
		os.Exit(1)
	}
}

func generate(root string) error {
	libs, err := verdicttable.Load(filepath.Join(root, "integrations"))
	if err != nil {
		return err
	}
	for _, doc := range verdicttable.Docs() {
		path := filepath.Join(root, doc.Path)
		old, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		spliced, err := verdicttable.Splice(string(old), verdicttable.Table(libs, doc.Base))
		if err != nil {
			return fmt.Errorf("%s: %w", doc.Path, err)
		}
		if err := os.WriteFile(path, []byte(spliced), 0o644); err != nil {
			return err
		}
	}
	return nil
}
