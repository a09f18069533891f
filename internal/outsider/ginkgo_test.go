package outsider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/format"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/suite/certificate"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// ginkgoSection is the Go guide's section (docs/go.md) with the Ginkgo
// suite that embeds harmless's specs.
const ginkgoSection = "## In an existing Ginkgo suite"

// The guide's Ginkgo suite, as the test writes it into the consumer's
// module, and what it says of the suite's own spec.
const (
	ginkgoPackage   = "consumer"
	ginkgoFile      = ginkgoPackage + "/suite_test.go"
	ownSpec         = "subscribes to its topics"
	ownLabel        = "smoke"
	certificateFile = "harmless-certificate.json"
)

// ginkgoLimit bounds each go test run of the guide's suite: it builds the
// test binary and plays one fixture on a DSN.
const ginkgoLimit = 5 * time.Minute

// TestReadmeGinkgoExample writes the Ginkgo suite of the Go guide the
// README links (docs/go.md; the suite was in the README itself until the
// guide took it), as written, into a consumer's module made by the
// README's Install recipe, and runs there, as written, the guide's go test
// commands whose label filter
// plays at most one of harmless's fixtures: each must exit 0, run the
// suite's own spec and the specs of the rules it selects (Ginkgo's "Ran N
// of M Specs"), and leave the certificate the suite writes, with those
// rules passed and the others skipped. Every label filter of the guide's
// commands, the Ginkgo CLI's included, must parse and select a spec.
func TestReadmeGinkgoExample(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, goGuide))
	if err != nil {
		t.Fatal(err)
	}
	guide := string(data)
	code, err := codeBlock(goGuide, guide, ginkgoSection, "suite.Register(")
	if err != nil {
		t.Fatal(err)
	}
	code, ok := strings.CutPrefix(code, "go\n")
	if !ok {
		t.Fatalf("docs/go.md's Ginkgo suite is not a Go code block:\n%s", code)
	}
	if formatted, err := format.Source([]byte(code)); err != nil || string(formatted) != code {
		t.Errorf("docs/go.md's Ginkgo suite is not gofmt'ed (%v); gofmt makes it:\n%s", err, formatted)
	}
	for _, want := range []string{"RunSpecs(t, ", "BeforeSuite(", `Label("` + ownLabel + `")`, `It("` + ownSpec + `"`, "reference.Adapter()", `WriteJSON("` + certificateFile + `")`} {
		if !strings.Contains(code, want) {
			t.Fatalf("docs/go.md's Ginkgo suite lacks %q, which this test relies on:\n%s", want, code)
		}
	}
	commands, err := codeBlock(goGuide, guide, ginkgoSection, "-ginkgo.label-filter")
	if err != nil {
		t.Fatal(err)
	}
	commands, ok = strings.CutPrefix(commands, "sh\n")
	if !ok {
		t.Fatalf("docs/go.md's commands for the Ginkgo suite are not a sh code block:\n%s", commands)
	}
	// The Ginkgo CLI's command is in the prose, in backquotes.
	runs := guideFilters(t, commands+"\n"+cliCommands(guide))

	dir := t.TempDir()
	writeModule(t, root, dir, map[string][]byte{ginkgoFile: []byte(code)})
	dsn := pgtest.DSN(t)

	// The guide quotes Ginkgo's summary of one of the runs.
	quoted := ranSpecs.FindString(strings.Join(strings.Fields(guide[strings.Index(guide, "\n"+ginkgoSection+"\n"):]), " "))
	counts := map[int]bool{}
	printed := map[string]bool{}
	for _, r := range runs {
		if !r.play {
			continue
		}
		t.Run(r.filter, func(t *testing.T) {
			ran, summary := runGuideSuite(t, dir, dsn, r)
			counts[ran] = true
			printed[summary] = true
		})
	}
	if quoted == "" || !printed[quoted] {
		t.Errorf("docs/go.md's Ginkgo section quotes %q; the runs printed %v", quoted, slices.Collect(maps.Keys(printed)))
	}
	if len(counts) < 2 {
		t.Errorf("docs/go.md's label filters that play one fixture ran %v specs; want two filters with different counts", counts)
	}
}

// filterRun is one command of the guide that selects specs with a label
// filter.
type filterRun struct {
	line   string
	args   []string // after "go test"; nil for the Ginkgo CLI's
	filter string
	own    bool            // it selects the suite's own spec
	rules  []fixtures.Rule // harmless's rules it selects
	play   bool            // it is a go test command that plays one fixture at most
}

// labels returns the labels the suite gives the spec of rule r.
func labels(r fixtures.Rule) []string {
	return []string{"fixture:" + r.Fixture, "rule:" + r.ID, "level:" + string(r.Level)}
}

// cliCommands returns the Ginkgo CLI commands of the guide's Ginkgo
// section that are in backquotes, one a line.
func cliCommands(guide string) string {
	_, section, _ := strings.Cut(guide, "\n"+ginkgoSection+"\n")
	if end := strings.Index(section, "\n#"); end >= 0 {
		section = section[:end]
	}
	var lines []string
	for _, m := range regexp.MustCompile("`(ginkgo --label-filter [^`]*)`").FindAllStringSubmatch(section, -1) {
		lines = append(lines, m[1])
	}
	return strings.Join(lines, "\n")
}

// guideFilters reads the commands of block, one a line, that select specs
// with a label filter: go test -ginkgo.label-filter and ginkgo
// --label-filter. Each filter must parse as Ginkgo parses it and select at
// least one spec of the guide's suite.
func guideFilters(t *testing.T, block string) []filterRun {
	t.Helper()
	var runs []filterRun
	cli := false
	for line := range strings.SplitSeq(block, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		args, err := shellWords(line)
		if err != nil {
			t.Fatalf("docs/go.md's %q: %v", line, err)
		}
		var flag string
		switch {
		case len(args) >= 2 && args[0] == "go" && args[1] == "test":
			flag = "-ginkgo.label-filter"
		case args[0] == "ginkgo":
			flag = "--label-filter"
		default:
			t.Fatalf("docs/go.md's %q is neither go test nor ginkgo", line)
		}
		i := slices.Index(args, flag)
		if i < 0 {
			continue // go test ./...: every spec
		}
		if i+1 >= len(args) {
			t.Fatalf("docs/go.md's %q: %s has no value", line, flag)
		}
		r := filterRun{line: line, filter: args[i+1]}
		if args[0] == "go" {
			r.args = args[2:]
		} else {
			cli = true
		}
		match, err := types.ParseLabelFilter(r.filter)
		if err != nil {
			t.Fatalf("docs/go.md's %q: Ginkgo cannot parse its label filter: %v", line, err)
		}
		r.own = match([]string{ownLabel})
		fixturesPlayed := map[string]bool{}
		for _, rule := range fixtures.Rules() {
			if match(labels(rule)) {
				r.rules = append(r.rules, rule)
				fixturesPlayed[rule.Fixture] = true
			}
		}
		if !r.own && len(r.rules) == 0 {
			t.Errorf("docs/go.md's %q selects no spec", line)
		}
		r.play = r.args != nil && len(fixturesPlayed) <= 1
		t.Logf("%q selects %d of harmless's rules (own spec: %t)", line, len(r.rules), r.own)
		runs = append(runs, r)
	}
	if !cli {
		t.Errorf("docs/go.md's Ginkgo section shows no ginkgo --label-filter command")
	}
	return runs
}

// shellWords splits line as sh does a line of words and single-quoted
// strings; any other quoting or expansion is an error.
func shellWords(line string) ([]string, error) {
	var words []string
	var word strings.Builder
	inWord, quoted := false, false
	for _, c := range line {
		switch {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			word.WriteRune(c)
		case c == '\'':
			quoted, inWord = true, true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		case strings.ContainsRune("\"\\$`*?;&|<>(){}#~", c):
			return nil, fmt.Errorf("%q outside single quotes, which this test does not read", c)
		default:
			word.WriteRune(c)
			inWord = true
		}
	}
	if quoted {
		return nil, errors.New("unterminated single quote")
	}
	if inWord {
		words = append(words, word.String())
	}
	return words, nil
}

// ranSpecs is Ginkgo's summary line, "Ran 4 of 34 Specs".
var ranSpecs = regexp.MustCompile(`Ran (\d+) of (\d+) Specs?`)

// ansi matches the colour codes Ginkgo writes.
var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

// runGuideSuite runs r's go test command in the module at dir, on dsn,
// checks what it ran and returns how many specs ran, and Ginkgo's summary
// line.
func runGuideSuite(t *testing.T, dir, dsn string, r filterRun) (int, string) {
	t.Helper()
	report := filepath.Join(t.TempDir(), "report.json")
	cert := filepath.Join(dir, ginkgoPackage, certificateFile)
	if err := os.Remove(cert); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), ginkgoLimit)
	defer cancel()
	// The guide's command, with the go test flags that make it
	// checkable: no cached result, events in JSON (so that the output of a
	// passing package is kept), and Ginkgo's JSON report.
	args := append(append([]string{"test", "-count=1", "-json"}, r.args...), "-ginkgo.json-report="+report)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(goEnv("DATABASE_URL"), "GOFLAGS=-mod=readonly", "HARMLESS_DSN="+dsn)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	results := readTestEvents(t, out)
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("docs/go.md's %q did not end within %s", r.line, ginkgoLimit)
	}
	p := results[modulePath+"/"+ginkgoPackage]
	if p == nil {
		var all strings.Builder
		for _, p := range results {
			all.WriteString(p.output.String())
		}
		t.Fatalf("docs/go.md's %q reported nothing of package %s: %v\n%s\nstderr:\n%s", r.line, ginkgoPackage, err, all.String(), stderr.String())
	}
	output := ansi.ReplaceAllString(p.output.String(), "")
	if err != nil || p.action != "pass" {
		t.Fatalf("docs/go.md's %q: %v, package %s; its output:\n%s\nstderr:\n%s", r.line, err, p.action, output, stderr.String())
	}

	m := ranSpecs.FindStringSubmatch(output)
	if m == nil {
		t.Fatalf("docs/go.md's %q printed no \"Ran N of M Specs\":\n%s", r.line, output)
	}
	t.Logf("%q: %s in %s", r.line, m[0], time.Since(start).Round(100*time.Millisecond))
	ran, total := checkSpecs(t, report, r)
	if got := fmt.Sprintf("Ran %d of %d Specs", ran, total); m[0] != got {
		t.Errorf("docs/go.md's %q: %s; its JSON report says %s", r.line, m[0], got)
	}
	checkCertificate(t, cert, r)
	return ran, m[0]
}

// checkSpecs reads Ginkgo's JSON report of r's run and checks every spec:
// the selected ones passed, the others were left out, the suite's own spec
// is there once and harmless's carry their rule's labels, each rule having
// one spec at least. It returns how many specs ran and how many there are.
func checkSpecs(t *testing.T, path string, r filterRun) (ran, total int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var reports []types.Report
	if err := json.Unmarshal(data, &reports); err != nil || len(reports) != 1 {
		t.Fatalf("Ginkgo's JSON report: %d suites, %v", len(reports), err)
	}
	selected := map[string]bool{}
	for _, rule := range r.rules {
		selected[rule.ID] = true
	}
	byRule := map[string]fixtures.Rule{}
	for _, rule := range fixtures.Rules() {
		byRule[rule.ID] = rule
	}
	seen := map[string]int{}
	for _, sr := range reports[0].SpecReports {
		if sr.LeafNodeType != types.NodeTypeIt {
			continue
		}
		total++
		want := types.SpecStateSkipped
		if sr.LeafNodeText == ownSpec {
			seen[ownSpec]++
			if r.own {
				want = types.SpecStatePassed
			}
		} else {
			id, _, _ := strings.Cut(sr.LeafNodeText, ": ")
			rule, ok := byRule[id]
			if !ok {
				t.Errorf("spec %q: neither the suite's own nor one of harmless's rules", sr.FullText())
				continue
			}
			seen[id]++
			// Ginkgo labels the Serial specs (an external-effect fixture's) Serial.
			got, wantLabels := slices.Sorted(slices.Values(slices.DeleteFunc(sr.Labels(), func(l string) bool { return l == "Serial" }))), labels(rule)
			slices.Sort(wantLabels)
			if !slices.Equal(got, wantLabels) {
				t.Errorf("spec %q: labels %v; want %v", id, got, wantLabels)
			}
			if selected[id] {
				want = types.SpecStatePassed
			}
		}
		if want == types.SpecStatePassed {
			ran++
		}
		if sr.State != want {
			t.Errorf("spec %q: %s; want %s (%s)", sr.FullText(), sr.State, want, sr.Failure.Message)
		}
	}
	if seen[ownSpec] != 1 {
		t.Errorf("Ginkgo reported the suite's own spec %d times; want once", seen[ownSpec])
	}
	for id := range byRule {
		if seen[id] == 0 {
			t.Errorf("Ginkgo reported no spec of rule %s", id)
		}
	}
	return ran, total
}

// checkCertificate reads the certificate the guide's suite wrote and
// checks it: the reference's, with r's rules passed and the others
// skipped, so partial.
func checkCertificate(t *testing.T, path string, r filterRun) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the guide's suite wrote no certificate: %v", err)
	}
	var c certificate.Certificate
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatalf("the certificate %s: %v", path, err)
	}
	t.Logf("certificate: %s, %s", c.Status, c.Summary())
	if c.Adapter != reference.Name || c.Status != certificate.StatusPartial || c.Error != "" {
		t.Errorf("certificate: adapter %q, status %s, error %q; want %s, %s, none", c.Adapter, c.Status, c.Error, reference.Name, certificate.StatusPartial)
	}
	selected := map[string]bool{}
	for _, rule := range r.rules {
		selected[rule.ID] = true
	}
	for _, v := range c.Rules {
		want := certificate.VerdictSkipped
		if selected[v.ID] {
			want = certificate.VerdictPass
		}
		if v.Verdict != want {
			t.Errorf("certificate, rule %s: %s (%s); want %s", v.ID, v.Verdict, v.Message, want)
		}
	}
	if len(c.Rules) != len(fixtures.Rules()) {
		t.Errorf("certificate: %d rules; want %d", len(c.Rules), len(fixtures.Rules()))
	}
}
