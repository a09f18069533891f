package verdicttable

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/suite/certificate"
)

// root is the repository's root, seen from this package.
const root = "../../.."

// The integrations' tests write their certificates with -update, and
// `go test ./... -update` passes it to this package's test binary too,
// which would refuse a flag it does not define. The table is written by
// go generate, after the certificates, never by this test.
var _ = flag.Bool("update", false, "ignored here: run go generate ./... to rewrite the verdict table")

// TestTablesUpToDate fails while docs/integrations.md or integrations/README.md does
// not hold the table the committed certificates and reproductions make.
func TestTablesUpToDate(t *testing.T) {
	libs, err := Load(filepath.Join(root, "integrations"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range Docs() {
		b, err := os.ReadFile(filepath.Join(root, doc.Path))
		if err != nil {
			t.Fatal(err)
		}
		want, err := Splice(string(b), Table(libs, doc.Base))
		if err != nil {
			t.Fatalf("%s: %v", doc.Path, err)
		}
		if want != string(b) {
			t.Errorf("%s holds a stale verdict table: run go generate ./... in integrations", doc.Path)
		}
	}
}

// TestTableLinksResolve checks that every link of the table leads to a file
// of the repository, from both pages.
func TestTableLinksResolve(t *testing.T) {
	libs, err := Load(filepath.Join(root, "integrations"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range Docs() {
		table := Table(libs, doc.Base)
		for _, part := range strings.Split(table, "](")[1:] {
			target, _, _ := strings.Cut(part[:strings.Index(part, ")")], "#")
			path := filepath.Join(root, filepath.Dir(doc.Path), target)
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %s: %v", doc.Path, target, err)
			}
		}
	}
}

func rules(verdicts ...string) []certificate.RuleResult {
	var out []certificate.RuleResult
	for i := 0; i < len(verdicts); i += 2 {
		id := verdicts[i]
		out = append(out, certificate.RuleResult{ID: id, Fixture: id[:strings.Index(id, ".")], Verdict: certificate.Verdict(verdicts[i+1])})
	}
	return out
}

// TestCheck checks that a library's evidence must match its certificate.
func TestCheck(t *testing.T) {
	cert := certificate.Certificate{Rules: rules(
		"double-delivery.one-effect", "fail",
		"double-delivery.first-applied", "pass",
		"conflicting-payload.conflict-detected", "fail",
	)}
	repro := func(rules ...string) Repro { return Repro{Test: "TestReproX", Rules: rules, Cause: "because"} }
	cases := []struct {
		name   string
		repros []Repro
		want   []string // fragments of the error; none means valid
	}{
		{"every failure shown", []Repro{repro("double-delivery.one-effect", "conflicting-payload.conflict-detected")}, nil},
		{"a failure without evidence", []Repro{repro("double-delivery.one-effect")},
			[]string{"rule conflicting-payload.conflict-detected failed and no TestRepro"}},
		{"evidence of a pass", []Repro{repro("double-delivery.one-effect", "conflicting-payload.conflict-detected", "double-delivery.first-applied")},
			[]string{"reproduces double-delivery.first-applied, which the certificate does not fail"}},
		{"no such rule", []Repro{repro("double-delivery.one-effect", "conflicting-payload.conflict-detected", "double-delivery.nope")},
			[]string{`"double-delivery.nope", which is no rule`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Library{Package: "lib", Cert: cert, Repros: c.repros}.Check()
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("Check: %v; want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check passed; want an error naming %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check: %v; want it to name %q", err, w)
				}
			}
		})
	}
}

// TestFixtureVerdict checks how a fixture's rules are summed up.
func TestFixtureVerdict(t *testing.T) {
	cases := []struct {
		verdicts []string
		want     string
	}{
		{[]string{"double-delivery.a", "pass", "double-delivery.b", "pass"}, "pass"},
		{[]string{"double-delivery.a", "pass", "double-delivery.b", "fail"}, "**fail** (1 of 2 rules)"},
		{[]string{"double-delivery.a", "not-supported", "double-delivery.b", "not-supported"}, "not-supported"},
		{[]string{"double-delivery.a", "pass", "double-delivery.b", "not-supported"}, "1 pass, 1 not-supported"},
		{[]string{"other.a", "pass"}, "not run"},
	}
	for _, c := range cases {
		got := fixtureVerdict(certificate.Certificate{Rules: rules(c.verdicts...)}, "double-delivery")
		if got != c.want {
			t.Errorf("fixtureVerdict(%v) = %q; want %q", c.verdicts, got, c.want)
		}
	}
}
