package doclinks_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/internal/doclinks"
)

// root is the repository's root, two levels above this package.
const root = "../.."

// pages returns every Markdown page of the repository, relative to root:
// README.md, docs/*.md, examples/*/README.md and the others, leaving out
// hidden directories, testdata and node_modules (an example's installed
// packages, which are not the repository's).
func pages(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestEveryLinkResolves checks every relative link and anchor of the
// repository's Markdown pages as GitHub resolves them.
func TestEveryLinkResolves(t *testing.T) {
	files := pages(t)
	for _, want := range []string{"README.md", "docs/protocol.md", "docs/external-effects.md", "examples/python-psycopg/README.md"} {
		if !contains(files, want) {
			t.Errorf("%s is not among the pages checked: %v", want, files)
		}
	}
	problems, err := doclinks.Check(root, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	links := 0
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		links += len(doclinks.Links(f, string(data)))
	}
	// The README alone has dozens: finding few means the parser broke.
	if links < 100 {
		t.Errorf("found only %d relative links in %d pages", links, len(files))
	}
	t.Logf("%d relative links in %d pages", links, len(files))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"The exec protocol, version 1":                         "the-exec-protocol-version-1",
		"Before a run: `harmless list --adapter NAME`":         "before-a-run-harmless-list---adapter-name",
		"external-effect.stable-key":                           "external-effectstable-key",
		"Fixture: external-effect":                             "fixture-external-effect",
		"`--json FILE`: the certificate":                       "--json-file-the-certificate",
		"What `impl.py` declares":                              "what-implpy-declares",
		"`max_in_flight` and `harness.commit`":                 "max_in_flight-and-harnesscommit",
		"Writing a child in [Node.js](https://nodejs.org)":     "writing-a-child-in-nodejs",
		"Killed between commit and send":                       "killed-between-commit-and-send",
		"  Trailing space and UPPER case  ":                    "trailing-space-and-upper-case",
		"Python (psycopg2, SQLAlchemy): `text()` and `:name`":  "python-psycopg2-sqlalchemy-text-and-name",
		"Émigré café":                                          "émigré-café",
		"100 % & more":                                         "100---more",
		"`$GITHUB_STEP_SUMMARY` and `--markdown FILE`":         "github_step_summary-and---markdown-file",
		"Fixture: failure-after-marker (`GOFLAGS=-mod=mod`)":   "fixture-failure-after-marker-goflags-modmod",
		"What crossing the process boundary costs":             "what-crossing-the-process-boundary-costs",
		"From Go: package `suite/certificate`":                 "from-go-package-suitecertificate",
		"How many requests at once":                            "how-many-requests-at-once",
		"Using the command":                                    "using-the-command",
		"Soaking: a long, faulty run with a history checker":   "soaking-a-long-faulty-run-with-a-history-checker",
		"Certifying a program in any language":                 "certifying-a-program-in-any-language",
		"`-q`, `--quiet`":                                      "-q---quiet",
		"How the database is chosen":                           "how-the-database-is-chosen",
		"When a process dies":                                  "when-a-process-dies",
		"What works across the process boundary":               "what-works-across-the-process-boundary",
		"The verdict not-applicable":                           "the-verdict-not-applicable",
		"Install from a checkout (until the module is public)": "install-from-a-checkout-until-the-module-is-public",
	} {
		if got := doclinks.Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

func TestAnchors(t *testing.T) {
	page := "# Title\n\n## Setup\ntext\n## Setup\n\n```sh\n# not a heading\n```\n" +
		"  ~~~~\n## Not one either\n  ~~~~\n### Setup ###\n<a id=\"custom\"></a>\n#nospace\n"
	got := sortedKeys(doclinks.Anchors(page))
	want := []string{"custom", "setup", "setup-1", "setup-2", "title"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Anchors = %v, want %v", got, want)
	}
}

func TestLinks(t *testing.T) {
	page := "See [a](a.md), [b](b.md#x \"title\") and ![img](img/p.png).\n" +
		"[ext](https://example.com/x.md) [mail](mailto:x@y) [proto](//host/p) [same](#here)\n" +
		"`[code](not-a-link.md)` and ``[also](not.md)``\n" +
		"```md\n[fenced](not-a-link.md)\n```\n" +
		"[ref]: docs/ref.md#anchor\n" +
		"[`code text`](c.md) [<angle>](<d e.md>)\n"
	var got []string
	for _, l := range doclinks.Links("p.md", page) {
		got = append(got, l.String())
	}
	want := []string{"p.md:1: a.md", "p.md:1: b.md#x", "p.md:1: img/p.png", "p.md:2: #here", "p.md:7: docs/ref.md#anchor", "p.md:8: c.md"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Links =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestCheckFindsWhatDoesNotResolve: each kind of broken link is reported,
// and each kind of working one is not.
func TestCheckFindsWhatDoesNotResolve(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/rules.md", "# Rules\n\n## Fixture: external-effect\n\n### external-effect.no-loss\n")
	write("src/code.go", "package x\n\nfunc f() {}\n")
	write("README.md", strings.Join([]string{
		"[ok](docs/rules.md#fixture-external-effect)",
		"[ok rule](docs/rules.md#external-effectno-loss)",
		"[ok dir](src)",
		"[ok line](src/code.go#L3)",
		"[ok range](src/code.go#L1-L3)",
		"[ok self](#readme-heading)",
		"[broken anchor](docs/rules.md#external-effect)",
		"[missing file](docs/nothing.md)",
		"[past the end](src/code.go#L4)",
		"[not a line](src/code.go#f)",
		"[dir anchor](src#x)",
		"[outside](../elsewhere.md)",
		"[missing self](#nowhere)",
		"",
		"## README heading",
	}, "\n"))
	write("docs/page.md", "[up](../README.md#readme-heading) [sibling](rules.md) [broken](../docs/rules.md#nope)\n")
	problems, err := doclinks.Check(dir, []string{"README.md", "docs/page.md"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		"README.md:7: docs/rules.md#external-effect: no heading of docs/rules.md has the anchor #external-effect (did you mean #external-effectno-loss, #fixture-external-effect?)",
		"README.md:8: docs/nothing.md: docs/nothing.md does not exist",
		"README.md:9: src/code.go#L4: src/code.go has 3 lines, not line 4",
		"README.md:10: src/code.go#f: #f is not a line anchor (#L12 or #L12-L20), the only anchors of src/code.go",
		"README.md:11: src#x: src is a directory, which has no anchor #x",
		"README.md:12: ../elsewhere.md: the link leaves the repository",
		"README.md:13: #nowhere: no heading of README.md has the anchor #nowhere",
		"docs/page.md:1: ../docs/rules.md#nope: no heading of docs/rules.md has the anchor #nope",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Check found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func sortedKeys(m map[string]bool) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
