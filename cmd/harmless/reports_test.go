package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/faults/pgproxy"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/faultplan"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/hooks"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/suite"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// progressLine matches a fixture's progress line on stderr; group 1 is the
// fixture, group 2 the rule count, group 3 the verdict counts.
var progressLine = regexp.MustCompile(`^\[ *\d+\.\ds\] ([a-z-]+) +(\d+) rules? +(\d+ [a-z-]+(?:, \d+ [a-z-]+)*) +\(\d+\.\ds\)$`)

// progressLines returns the progress lines of stderr, by fixture, in order.
func progressLines(stderr string) (fixtures []string, counts map[string]string) {
	counts = map[string]string{}
	for _, line := range strings.Split(stderr, "\n") {
		if m := progressLine.FindStringSubmatch(line); m != nil {
			fixtures = append(fixtures, m[1])
			counts[m[1]] = m[2] + " rules: " + m[3]
		}
	}
	return fixtures, counts
}

// junitReport is a JUnit XML report as a CI tool reads it.
type junitReport struct {
	XMLName xml.Name `xml:"testsuites"`
	junitCounts
	Suites []struct {
		Name string `xml:"name,attr"`
		junitCounts
		Properties []struct {
			Name  string `xml:"name,attr"`
			Value string `xml:"value,attr"`
		} `xml:"properties>property"`
		Cases []struct {
			Name      string `xml:"name,attr"`
			Classname string `xml:"classname,attr"`
			Failure   *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// junitCounts are the count attributes of testsuites and testsuite.
type junitCounts struct {
	Tests    int `xml:"tests,attr"`
	Failures int `xml:"failures,attr"`
	Errors   int `xml:"errors,attr"`
	Skipped  int `xml:"skipped,attr"`
}

// checkJUnit parses the JUnit report at path and checks it against the
// certificate of the same run: one testcase per rule, named with its id,
// failures carrying the rule's message, and counts that add up.
func checkJUnit(t *testing.T, path string, cert certificate.Certificate) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no JUnit report: %v", err)
	}
	var r junitReport
	if err := xml.Unmarshal(data, &r); err != nil {
		t.Fatalf("parse the JUnit report: %v\n%s", err, data)
	}
	if len(r.Suites) != 1 {
		t.Fatalf("%d testsuites; want 1", len(r.Suites))
	}
	ts := r.Suites[0]
	fail, skip := cert.Count(certificate.VerdictFail), cert.Count(certificate.VerdictSkipped)+cert.Count(certificate.VerdictNotSupported)+cert.Count(certificate.VerdictNotApplicable)
	if ts.Tests != len(cert.Rules) || len(ts.Cases) != len(cert.Rules) || ts.Failures != fail || ts.Skipped != skip || ts.Errors != 0 {
		t.Errorf("testsuite: tests=%d (%d testcases), failures=%d, skipped=%d, errors=%d; want %d, %d, %d, 0",
			ts.Tests, len(ts.Cases), ts.Failures, ts.Skipped, ts.Errors, len(cert.Rules), fail, skip)
	}
	if r.junitCounts != ts.junitCounts {
		t.Errorf("testsuites totals %+v are not the testsuite's, %+v", r.junitCounts, ts.junitCounts)
	}
	props := map[string]string{}
	for _, p := range ts.Properties {
		props[p.Name] = p.Value
	}
	if props["adapter"] != cert.Adapter || props["seed"] != strconv.FormatUint(cert.Seed, 10) || props["harness.commit"] != cert.Harness.Commit || props["certified"] != strconv.FormatBool(cert.Certified) || props["status"] != string(cert.Status) {
		t.Errorf("testsuite properties %v do not identify the run of %+v", props, cert)
	}
	for i, tc := range ts.Cases {
		if i >= len(cert.Rules) {
			break
		}
		rule := cert.Rules[i]
		if tc.Name != rule.ID || tc.Classname != rule.Fixture {
			t.Errorf("testcase %d: %q (%s); want rule %s of %s", i, tc.Name, tc.Classname, rule.ID, rule.Fixture)
		}
		failed := tc.Failure != nil
		if failed != (rule.Verdict == certificate.VerdictFail) {
			t.Errorf("testcase %s: failure element %t; the rule's verdict is %s", rule.ID, failed, rule.Verdict)
		}
		if failed && (tc.Failure.Text != rule.Message || !strings.Contains(tc.Failure.Message, rule.ID)) {
			t.Errorf("testcase %s: failure %q:\n%s\nwant the rule's message:\n%s", rule.ID, tc.Failure.Message, tc.Failure.Text, rule.Message)
		}
		if skipped := tc.Skipped != nil; skipped != (rule.Verdict == certificate.VerdictSkipped || rule.Verdict == certificate.VerdictNotSupported || rule.Verdict == certificate.VerdictNotApplicable) {
			t.Errorf("testcase %s: skipped element %t; the rule's verdict is %s", rule.ID, skipped, rule.Verdict)
		}
	}
}

// readCertificate reads the JSON certificate at path.
func readCertificate(t *testing.T, path string) certificate.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no certificate: %v", err)
	}
	var cert certificate.Certificate
	if err := json.Unmarshal(data, &cert); err != nil {
		t.Fatalf("certificate: %v\n%s", err, data)
	}
	return cert
}

// TestReports runs the command for real against an adapter that fails one
// fixture of the two selected and checks every output: the progress lines,
// quiet mode, the absence of colour off a terminal, the seed, and the JSON,
// JUnit and Markdown reports, the latter appended to $GITHUB_STEP_SUMMARY.
func TestReports(t *testing.T) {
	bin := binary(t)
	dsn := pgtest.DSN(t)
	const adapter = "broken-no-namespace"
	filter := "fixture:" + catalogid.DoubleDelivery + " || fixture:" + catalogid.NamespaceIsolation
	// Neither stream is a terminal: no colour, even though NO_COLOR is unset.
	noColor := "NO_COLOR="

	t.Run("progress and reports", func(t *testing.T) {
		dir := t.TempDir()
		jsonPath, junitPath, mdPath, summary := filepath.Join(dir, "c.json"), filepath.Join(dir, "c.xml"), filepath.Join(dir, "c.md"), filepath.Join(dir, "summary.md")
		const earlier = "## an earlier step's summary\n"
		if err := os.WriteFile(summary, []byte(earlier), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runCertify(t, bin, []string{noColor, stepSummaryEnv + "=" + summary},
			"--adapter", adapter, "--dsn", dsn, "--label-filter", filter, "--json", jsonPath, "--junit", junitPath, "--markdown", mdPath, "--seed", "4242")
		if code != exitNotCertified {
			t.Fatalf("exit code %d; want %d\nstdout:\n%s\nstderr:\n%s", code, exitNotCertified, stdout, stderr)
		}
		order, counts := progressLines(stderr)
		if want := []string{catalogid.DoubleDelivery, catalogid.NamespaceIsolation}; strings.Join(order, ",") != strings.Join(want, ",") {
			t.Errorf("progress lines for %v; want exactly one for each of %v\n%s", order, want, stderr)
		}
		for fixture, want := range map[string]string{catalogid.DoubleDelivery: "3 rules: 3 pass", catalogid.NamespaceIsolation: "2 rules: 2 fail"} {
			if counts[fixture] != want {
				t.Errorf("progress of %s says %q; want %q", fixture, counts[fixture], want)
			}
		}
		if lines := strings.Split(strings.TrimSpace(stderr), "\n"); len(lines) != len(order) {
			t.Errorf("stderr holds %d lines besides the %d progress lines:\n%s", len(lines)-len(order), len(order), stderr)
		}
		for name, out := range map[string]string{"stdout": stdout, "stderr": stderr} {
			if strings.Contains(out, "\x1b[") {
				t.Errorf("%s holds ANSI escapes off a terminal:\n%q", name, out)
			}
		}
		if !strings.Contains(stdout, "seed 4242") {
			t.Errorf("stdout does not name the seed:\n%s", stdout)
		}

		cert := readCertificate(t, jsonPath)
		if cert.Seed != 4242 || cert.SuiteVersion != suite.Version || cert.Harness.Commit == "" || cert.Faults == nil {
			t.Errorf("certificate: seed %d, suite %q, harness %+v, faults %v; want seed 4242, the suite, the harness and a faults object", cert.Seed, cert.SuiteVersion, cert.Harness, cert.Faults)
		}
		if cert.Declared.ConflictPolicy == "" || cert.Verified != (adapters.Declaration{}) {
			t.Errorf("declared %+v, verified %+v: the fixtures that verify capabilities did not run, so none is verified", cert.Declared, cert.Verified)
		}
		checkJUnit(t, junitPath, cert)

		md, err := os.ReadFile(mdPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"## harmless: NOT CERTIFIED: `" + adapter + "`", "| `namespace-isolation.same-id-two-namespaces` | namespace-isolation | MUST | **FAIL** |", "seed | 4242"} {
			if !bytes.Contains(md, []byte(want)) {
				t.Errorf("the Markdown summary lacks %q:\n%s", want, md)
			}
		}
		appended, err := os.ReadFile(summary)
		if err != nil {
			t.Fatal(err)
		}
		if want := earlier + "\n" + string(md); string(appended) != want {
			t.Errorf("$%s holds:\n%s\nwant the earlier summary, a blank line and the Markdown summary", stepSummaryEnv, appended)
		}
	})

	t.Run("quiet", func(t *testing.T) {
		for _, flag := range []string{"-q", "--quiet"} {
			code, stdout, stderr := runCertify(t, bin, []string{noColor}, flag, "--adapter", adapter, "--dsn", dsn, "--label-filter", filter)
			if code != exitNotCertified {
				t.Fatalf("%s: exit code %d; want %d\n%s%s", flag, code, exitNotCertified, stdout, stderr)
			}
			if stderr != "" {
				t.Errorf("%s: stderr is not empty:\n%s", flag, stderr)
			}
			want := "FAIL namespace-isolation.same-id-two-namespaces\nFAIL namespace-isolation.unambiguous-identity\nNOT CERTIFIED: " + adapter + "\n"
			if !strings.HasPrefix(stdout, want) || strings.Count(stdout, "\n") != 4 {
				t.Errorf("%s: stdout:\n%s\nwant the failed rules, the verdict and the summary, nothing else", flag, stdout)
			}
		}
	})

	t.Run("the seed is the certificate's", func(t *testing.T) {
		code, stdout, stderr := runCertify(t, bin, []string{noColor}, "-v", "--adapter", "reference", "--dsn", dsn,
			"--label-filter", "fixture:"+catalogid.DoubleDelivery, "--seed", "987654321")
		if code != exitPartial {
			t.Fatalf("exit code %d; want %d (a filtered run)\n%s%s", code, exitPartial, stdout, stderr)
		}
		if !strings.Contains(stdout, "seed 987654321") {
			t.Errorf("the summary does not show the seed:\n%s", stdout)
		}
		if !strings.Contains(stderr, "PASSED  double-delivery") {
			t.Errorf("-v shows no line per spec:\n%s", stderr)
		}
		if order, _ := progressLines(stderr); len(order) != 1 {
			t.Errorf("-v: %d progress lines; want 1\n%s", len(order), stderr)
		}
	})
}

// TestJUnitOfEveryVerdict writes the JUnit report of a certificate with
// every verdict, a failure message with characters XML must escape among
// them, and reads it back as a CI tool does.
func TestJUnitOfEveryVerdict(t *testing.T) {
	cert := certificate.Certificate{
		Adapter: "sample", Certified: false, Seed: 42,
		SuiteVersion: suite.Version, Harness: certificate.HarnessInfo{Commit: "0123abcd-dirty"},
		Rules: []certificate.RuleResult{
			{ID: catalogid.DoubleDeliveryOneEffect, Fixture: catalogid.DoubleDelivery, Level: fixtures.Must, Verdict: certificate.VerdictPass},
			{ID: catalogid.ConflictingPayloadConflictDetected, Fixture: catalogid.ConflictingPayload, Level: fixtures.Must, Verdict: certificate.VerdictFail,
				Message: "MUST violated: <Duplicate> & \"not\" Rejected\n- event a/b applied once"},
			{ID: catalogid.CrashRecoveryAppliedSurvives, Fixture: catalogid.CrashRecovery, Level: fixtures.Must, Verdict: certificate.VerdictNotSupported,
				Message: "needs a server the harness owns"},
			{ID: catalogid.BadInputRunContinues, Fixture: catalogid.BadInput, Level: fixtures.Must, Verdict: certificate.VerdictSkipped,
				Message: "no spec of this rule ran"},
		},
	}
	path := filepath.Join(t.TempDir(), "junit.xml")
	if err := cert.WriteJUnit(path); err != nil {
		t.Fatal(err)
	}
	checkJUnit(t, path, cert)
}

func TestParseCertifyReportFlags(t *testing.T) {
	var stderr bytes.Buffer
	f, err := parseCertify([]string{"--adapter", "reference", "--markdown", "m.md", "--seed", "9223372036854775807", "-q"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if f.markdownPath != "m.md" || f.seed != 1<<63-1 || !f.seedSet || f.level() != quiet {
		t.Errorf("flags %+v", f)
	}
	f, err = parseCertify([]string{"--adapter", "reference"}, &stderr)
	if err != nil || f.seedSet || f.level() != normal {
		t.Errorf("defaults %+v, %v; want no seed given, normal output", f, err)
	}
	if f, _ := parseCertify([]string{"--adapter", "reference", "-v"}, &stderr); f.level() != verbose {
		t.Errorf("-v: level %d", f.level())
	}
	seen := map[uint64]bool{}
	for range 8 {
		s := randomSeed()
		if s >= 1<<53 {
			t.Errorf("random seed %d is not below 2^53", s)
		}
		seen[s] = true
	}
	if len(seen) < 2 {
		t.Error("random seeds repeat")
	}
}

func TestPrinter(t *testing.T) {
	progress := suite.FixtureProgress{
		Fixture: catalogid.ConflictingPayload,
		Rules: []certificate.RuleResult{
			{ID: catalogid.ConflictingPayloadNoSecondEffect, Verdict: certificate.VerdictPass},
			{ID: catalogid.ConflictingPayloadConflictDetected, Verdict: certificate.VerdictFail},
			{ID: catalogid.ConflictingPayloadOriginalStillDuplicate, Verdict: certificate.VerdictNotSupported},
		},
		Duration: 1200 * time.Millisecond,
	}
	noEnv := func(string) string { return "" }
	var stdout, stderr bytes.Buffer
	p := newPrinter(&stdout, &stderr, normal, noEnv)
	if p.colorOut || p.colorErr {
		t.Fatal("colour on a buffer")
	}
	p.fixture(progress)
	p.logf("a spec line")
	line := strings.TrimSuffix(stderr.String(), "\n")
	if m := progressLine.FindStringSubmatch(line); m == nil || m[1] != catalogid.ConflictingPayload || m[3] != "1 pass, 1 fail, 1 not-supported" || !strings.HasSuffix(line, "(1.2s)") {
		t.Errorf("progress line %q", line)
	}

	// On a terminal, each count is coloured; the alignment is kept.
	stderr.Reset()
	p.colorErr = true
	p.fixture(progress)
	coloured := strings.TrimSuffix(stderr.String(), "\n")
	for _, want := range []string{green + "1 pass" + reset, red + "1 fail" + reset, yellow + "1 not-supported" + reset} {
		if !strings.Contains(coloured, want) {
			t.Errorf("coloured progress line %q lacks %q", coloured, want)
		}
	}
	if plain := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(coloured, ""); plain[10:] != line[10:] {
		t.Errorf("colour moved the columns:\n%q\n%q", plain, line)
	}

	stderr.Reset()
	p = newPrinter(&stdout, &stderr, quiet, noEnv)
	p.fixture(progress)
	p.logf("a spec line")
	if stderr.Len() != 0 {
		t.Errorf("quiet printed %q", stderr.String())
	}

	// NO_COLOR wins even on a terminal; a file is no terminal.
	if useColor(os.Stdout, func(string) string { return "1" }) {
		t.Error("colour with NO_COLOR set")
	}
	file, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if useColor(file, noEnv) {
		t.Error("colour in a file")
	}
}

// TestReportsAreDocumented checks that docs/reports.md names every field of
// the JSON certificate, every kind of fault the certificate counts and
// every flag about reports.
func TestReportsAreDocumented(t *testing.T) {
	data, err := os.ReadFile("../../docs/reports.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	var names []string
	for _, typ := range []reflect.Type{reflect.TypeFor[certificate.Certificate](), reflect.TypeFor[certificate.Protocol](), reflect.TypeFor[certificate.HarnessInfo]()} {
		for f := range typ.Fields() {
			names = append(names, strings.Split(f.Tag.Get("json"), ",")[0])
		}
	}
	// The declared and verified capabilities are spelled by
	// adapters.Declaration's MarshalJSON.
	declaration, err := json.Marshal(adapters.Declaration{})
	if err != nil {
		t.Fatal(err)
	}
	var capabilities map[string]any
	if err := json.Unmarshal(declaration, &capabilities); err != nil {
		t.Fatal(err)
	}
	for name := range capabilities {
		names = append(names, name)
	}
	for _, point := range []faults.Point{faults.AtEffect, faults.AtCommit} {
		for _, action := range []faults.Action{faults.Raise, faults.Sleep, faults.Terminate} {
			names = append(names, faultplan.Kind(string(action), string(point)))
		}
	}
	for _, action := range []hooks.Action{hooks.Error, hooks.Panic, hooks.Cancel} {
		names = append(names, hooks.Plan{Action: action}.Kind())
	}
	for _, point := range []pgproxy.Point{pgproxy.BeforeCommit, pgproxy.AfterCommitComplete, pgproxy.AfterStatement} {
		for _, action := range []pgproxy.Action{pgproxy.Cut} {
			names = append(names, faultplan.ProxyKind(string(action), string(point)))
		}
	}
	names = append(names, harness.ServerCrashKind, "--json", "--junit", "--markdown", "--seed", "--quiet", "`-q`", "`-v`", "NO_COLOR", stepSummaryEnv)
	for _, name := range names {
		if !strings.Contains(doc, "`"+strings.Trim(name, "`")+"`") {
			t.Errorf("docs/reports.md does not mention `%s`", strings.Trim(name, "`"))
		}
	}
}

// TestCertificateRecordsTheCommitWithoutAStamp builds the command with
// -buildvcs=false, as go run's build has no VCS stamp, and certifies: the
// certificate's commit must still be the checkout's, `git rev-parse
// HEAD` (with -dirty when the tree has changes), asked of git, and say so.
func TestCertificateRecordsTheCommitWithoutAStamp(t *testing.T) {
	besideOthers(t)
	root := repoRoot(t)
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	want := strings.TrimSpace(string(head))
	if status, err := exec.Command("git", "-C", root, "status", "--porcelain").Output(); err != nil {
		t.Fatal(err)
	} else if len(bytes.TrimSpace(status)) > 0 {
		want += "-dirty"
	}
	bin := filepath.Join(t.TempDir(), "harmless")
	if out, err := exec.Command("go", "build", "-buildvcs=false", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	path := filepath.Join(t.TempDir(), "c.json")
	code, stdout, stderr := runCertify(t, bin, nil, "--adapter", "reference", "--dsn", pgtest.DSN(t),
		"--label-filter", "fixture:"+catalogid.DoubleDelivery, "--json", path)
	if code != exitPartial {
		t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitPartial, stdout, stderr)
	}
	cert := readCertificate(t, path)
	if cert.Harness.Commit != want || cert.Harness.CommitSource != "git in "+root {
		t.Errorf("harness %+v; want commit %q from git in %s", cert.Harness, want, root)
	}
	if !strings.Contains(stdout, "(commit "+want+")") {
		t.Errorf("the header does not name commit %s:\n%s", want, stdout)
	}
}
