package outsider

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/format"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/catalogid"
)

// modulePath is the path of the temporary module the implementations are
// certified from.
const modulePath = "example.com/consumers"

// implementations are the packages of the temporary module: the Go
// guide's example (docs/go.md) and the testdata directories, each with one
// test that certifies it with suite.Run.
var implementations = []string{"guide", "smallpool", "txfunc"}

// limit bounds the go test run of the temporary module, which builds it and
// certifies its implementations at once, each on a throwaway cluster.
const limit = 9 * time.Minute

// TestGoConsumersFromAnotherModule writes the Go guide's example and the
// testdata implementations into a temporary module that requires harmless,
// runs their tests there with go test, on throwaway clusters so that every
// rule runs (crash-recovery too), and requires each rule of each to pass.
func TestGoConsumersFromAnotherModule(t *testing.T) {
	if testing.Short() {
		t.Skip("certifies three implementations from another module, which takes minutes")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeModule(t, root, dir, goConsumers(t, root))

	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-json", "-p", fmt.Sprint(len(implementations)), "-timeout", limit.String(), "./...")
	cmd.Dir = dir
	// The guide's example names no database: every rule runs on a
	// throwaway cluster, none on a DSN. The DSN variables are removed,
	// not emptied: set but empty, a DSN is refused, not taken for unset.
	cmd.Env = append(goEnv("HARMLESS_DSN", "DATABASE_URL"),
		// go.mod and go.sum are what the README's recipe made of them:
		// the test must build without changing them.
		"GOFLAGS=-mod=readonly",
		"HARMLESS_PROVISION=cluster",
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	results := readTestEvents(t, out)
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("go test in the temporary module did not end within %s", limit)
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("go test: %v\n%s", err, stderr.String())
	}

	for _, name := range implementations {
		t.Run(name, func(t *testing.T) {
			p, ok := results[modulePath+"/"+name]
			if !ok {
				t.Fatalf("go test reported nothing of package %s (exit: %v)\nstderr:\n%s", name, err, stderr.String())
			}
			t.Logf("%s: %s in %.1fs", name, p.action, p.elapsed)
			for _, r := range fixtures.Rules() {
				// The outsiders make no external effect, and run on one
				// server, where no failover is played: Go's test reports
				// those not-applicable rules as skipped.
				want := "pass"
				if r.Fixture == catalogid.ExternalEffect || r.Fixture == "failover" {
					want = "skip"
				}
				if got := p.rules[r.ID]; got != want {
					t.Errorf("rule %s: %q; want %s", r.ID, got, want)
				}
			}
			if p.action != "pass" || t.Failed() {
				t.Errorf("package %s: %s; its output:\n%s", name, p.action, p.output.String())
			}
		})
	}
}

// goConsumers returns the files of the temporary module's packages, by
// path: the Go guide's example in guide/ and the testdata
// implementations.
func goConsumers(t *testing.T, root string) map[string][]byte {
	t.Helper()
	guide, err := os.ReadFile(filepath.Join(root, goGuide))
	if err != nil {
		t.Fatal(err)
	}
	example, err := goExample(string(guide))
	if err != nil {
		t.Fatal(err)
	}
	if formatted, err := format.Source([]byte(example)); err != nil || string(formatted) != example {
		t.Errorf("%s's Go example is not gofmt'ed (%v); gofmt makes it:\n%s", goGuide, err, formatted)
	}
	files := map[string][]byte{"guide/consumer_test.go": []byte(example)}
	for _, name := range implementations[1:] {
		src, err := os.ReadFile(filepath.Join("testdata", name, "consumer_test.go"))
		if err != nil {
			t.Fatal(err)
		}
		files[name+"/consumer_test.go"] = src
	}
	return files
}

// writeModule writes the temporary module into dir, a consumer's module
// that already uses pgx: the packages' files (by path in the module), all
// importing harmless's packages; a go.mod that requires pgx, at the
// version harmless does, and root's go.sum, so that the sums of the
// dependencies both modules share are there and no command below needs
// the network. It then adds harmless the way the README's Install section
// says, with the checkout at root.
func writeModule(t *testing.T, root, dir string, packages map[string][]byte) {
	t.Helper()
	gomod := fmt.Sprintf("module %s\n\ngo 1.26\n\nrequire github.com/jackc/pgx/v5 %s\n", modulePath, requiredVersion(t, root, "github.com/jackc/pgx/v5"))
	files := map[string][]byte{"go.mod": []byte(gomod)}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	files["go.sum"] = sum
	maps.Copy(files, packages)
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readmeRecipe(t, string(readme), root, dir)
}

// placeholder stands for the checkout's path in the README's recipe.
const placeholder = "/path/to/harmless"

// readmeRecipe runs, in the module at dir, the go commands of the README's
// recipe for using harmless from a checkout (a replace directive, then go
// mod tidy), with root for the checkout's path, and checks that go.mod
// then requires harmless, taken from root.
func readmeRecipe(t *testing.T, readme, root, dir string) {
	t.Helper()
	block, err := codeBlock("README.md", readme, installSection, "go mod edit -replace")
	if err != nil {
		t.Fatal(err)
	}
	var ran []string
	for _, line := range strings.Split(block, "\n") {
		args := strings.Fields(strings.ReplaceAll(line, placeholder, root))
		if len(args) == 0 || args[0] != "go" {
			continue
		}
		cmd := exec.Command("go", args[1:]...)
		cmd.Dir = dir
		// The README's commands, as a user runs them: no -mod flag.
		cmd.Env = append(goEnv(), "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("the README's %q in a consumer's module: %v\n%s", line, err, out)
		}
		ran = append(ran, strings.Join(args[:3], " "))
	}
	if want := []string{"go mod edit", "go mod tidy"}; strings.Join(ran, ", ") != strings.Join(want, ", ") {
		t.Fatalf("the README's recipe ran %q; want %q:\n%s", ran, want, block)
	}
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"github.com/harmless-dev/harmless v0.0.0-00010101000000-000000000000\n",
		"replace github.com/harmless-dev/harmless => " + root + "\n",
	} {
		if !strings.Contains(string(gomod), want) {
			t.Errorf("after the README's recipe, go.mod lacks %q:\n%s", want, gomod)
		}
	}
}

// goEnv is the environment of the go commands run in the temporary module:
// this one, outside any workspace, without the variables unset names.
func goEnv(unset ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !slices.Contains(unset, name) {
			env = append(env, kv)
		}
	}
	return append(env, "GOWORK=off")
}

// requiredVersion returns the version of module path that root's go.mod
// requires.
func requiredVersion(t *testing.T, root, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		// "require path version", or "path version" in a require block.
		if f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require ")); len(f) >= 2 && f[0] == path {
			return f[1]
		}
	}
	t.Fatalf("%s/go.mod does not require %s", root, path)
	return ""
}

// installSection is the README section that says how to install harmless.
const installSection = "### Install"

// codeBlock returns the fenced code block of the section heading of text,
// the page named page (up to the next heading of any level), that contains
// marker.
func codeBlock(page, text, heading, marker string) (string, error) {
	_, section, ok := strings.Cut(text, "\n"+heading+"\n")
	if !ok {
		return "", fmt.Errorf("%s has no section %q", page, heading)
	}
	if end := strings.Index(section, "\n#"); end >= 0 {
		section = section[:end]
	}
	parts := strings.Split(section, "```")
	for i := 1; i < len(parts); i += 2 {
		if strings.Contains(parts[i], marker) {
			return parts[i], nil
		}
	}
	return "", fmt.Errorf("%s's section %q has no code block with %q", page, heading, marker)
}

// TestInstallFromACheckout runs the README's command that installs harmless
// from a checkout, at the checkout's root with GOBIN set to a directory of
// its own, and runs the command it installed.
func TestInstallFromACheckout(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block, err := codeBlock("README.md", string(readme), installSection, "go install ./cmd/harmless")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	line := strings.TrimSpace(block[strings.Index(block, "go install"):])
	line, _, _ = strings.Cut(line, "\n")
	args := strings.Fields(line)
	cmd := exec.Command("go", args[1:]...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOBIN="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's %q at the checkout's root: %v\n%s", line, err, out)
	}
	out, err := exec.Command(filepath.Join(bin, "harmless"), "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "harmless") {
		t.Fatalf("the installed harmless version: %v\n%s", err, out)
	}
	t.Logf("%q installed harmless, whose version says: %s", line, strings.TrimSpace(string(out)))
}

// goGuide is the page, from the repository's root, that holds the Go
// example and the Ginkgo suite: the guide to certifying a Go
// implementation, which the README links.
const goGuide = "docs/go.md"

// exampleSection is the guide's section whose Go code block is the example.
const exampleSection = "## A complete consumer"

// goExample returns the one Go code block of the guide's section with the
// complete consumer, before its first subsection.
func goExample(guide string) (string, error) {
	_, section, ok := strings.Cut(guide, "\n"+exampleSection+"\n")
	if !ok {
		return "", fmt.Errorf("%s has no section %q", goGuide, exampleSection)
	}
	// The section's own text: its subsections (the Ginkgo suite's, say)
	// have code blocks of their own.
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	if end := strings.Index(section, "\n### "); end >= 0 {
		section = section[:end]
	}
	blocks := strings.Split(section, "\n```go\n")
	if len(blocks) != 2 {
		return "", fmt.Errorf("%s's section %q has %d Go code blocks; want 1", goGuide, exampleSection, len(blocks)-1)
	}
	code, _, ok := strings.Cut(blocks[1], "\n```\n")
	if !ok {
		return "", fmt.Errorf("%s's Go example in %q does not end", goGuide, exampleSection)
	}
	return code + "\n", nil
}

// packageResult is what go test -json reported of one package.
type packageResult struct {
	action  string            // pass, fail or skip
	elapsed float64           // seconds
	rules   map[string]string // the action of each rule's subtest, by rule id
	output  strings.Builder
}

// readTestEvents reads go test -json's events from r, by package.
func readTestEvents(t *testing.T, r io.Reader) map[string]*packageResult {
	t.Helper()
	results := map[string]*packageResult{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct {
			Action  string
			Package string
			Test    string
			Elapsed float64
			Output  string
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Errorf("go test -json wrote %q: %v", sc.Text(), err)
			continue
		}
		p := results[ev.Package]
		if p == nil {
			p = &packageResult{rules: map[string]string{}}
			results[ev.Package] = p
		}
		switch {
		case ev.Action == "output":
			p.output.WriteString(ev.Output)
		case ev.Test == "" && (ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip"):
			p.action, p.elapsed = ev.Action, ev.Elapsed
		case ev.Action == "pass" || ev.Action == "fail" || ev.Action == "skip":
			// TestX/<fixture>/<rule>: a rule's subtest, below its
			// fixture's.
			if parts := strings.Split(ev.Test, "/"); len(parts) == 3 {
				p.rules[parts[1]+"."+parts[2]] = ev.Action
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Errorf("read go test -json: %v", err)
	}
	return results
}
