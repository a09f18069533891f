package suite

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/adapters/broken/checktheninsert"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// The tests of this file hold suite.Run to go test's conventions, each in
// a child process (TestRunChild) that plays one fixture.

// TestRunPrintsEvidenceOnce: a rule that fails under suite.Run shows its
// evidence once, in its subtest's failure.
func TestRunPrintsEvidenceOnce(t *testing.T) {
	env := []string{"HARMLESS_DSN=" + pgtest.DSN(t), runChildEnv + "=" + checktheninsert.Name}
	cert, output, _ := runTestChild(t, "TestRunChild", []string{runFixtures("TestRunChild", catalogid.ConflictingPayload)}, env, 1)
	failed := 0
	for _, r := range cert.Rules {
		if r.Verdict != certificate.VerdictFail {
			continue
		}
		failed++
		// The first problem of each failure, as the certificate has it.
		_, rest, _ := strings.Cut(r.Message, "\n- ")
		evidence, _, _ := strings.Cut(rest, "\n")
		if evidence == "" {
			t.Errorf("rule %s failed without a problem line: %s", r.ID, r.Message)
			continue
		}
		if n := strings.Count(output, evidence); n != 1 {
			t.Errorf("rule %s: its evidence %q is in the output %d times; want once", r.ID, evidence, n)
		}
		if want := "--- FAIL: TestRunChild/" + r.Fixture + "/" + ruleSubtest(r.ID, r.Fixture) + " "; !strings.Contains(output, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	if failed == 0 {
		t.Fatalf("no rule of %s failed against %s; the verdict matrix says some must:\n%s", catalogid.ConflictingPayload, checktheninsert.Name, tail(output, 40))
	}
	if t.Failed() {
		t.Logf("the child's output:\n%s", tail(output, 120))
	}
}

// TestRunSelectsRulesWithRun: go test's -run selects rules: -run
// TestX/<fixture> plays that fixture's specs only and reports its rules,
// and -run TestX/<fixture>/<rule> one rule; the child passes, no rule left out
// failing. A pattern that names no rule fails, saying how to name one.
func TestRunSelectsRulesWithRun(t *testing.T) {
	env := []string{"HARMLESS_DSN=" + pgtest.DSN(t), runChildEnv + "=" + reference.Name}
	t.Run("no rule", func(t *testing.T) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRunChild$/no-such-rule", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "selects no rule's subtest") || strings.Contains(string(out), "certifying") {
			t.Errorf("the child ran a suite or passed (%v); want it failed at once, saying -run selects no rule:\n%s", err, tail(string(out), 30))
		}
	})
	for _, c := range []struct {
		run   string
		rules []string // the rules played and reported, in catalogue order
		code  int
	}{
		{"^TestRunChild$/" + catalogid.DoubleDelivery, []string{catalogid.DoubleDeliveryFirstApplied, catalogid.DoubleDeliveryRedeliveryDuplicate, catalogid.DoubleDeliveryOneEffect}, 0},
		{"^TestRunChild$/" + catalogid.DoubleDelivery + "/one-effect", []string{catalogid.DoubleDeliveryOneEffect}, 0},
	} {
		t.Run(c.run, func(t *testing.T) {
			cert, output, _ := runTestChild(t, "TestRunChild", []string{"-test.run=" + c.run}, env, c.code)
			if played := len(cert.Rules) - cert.Count(certificate.VerdictSkipped); played != len(c.rules) {
				t.Errorf("%d rules played; want %d", played, len(c.rules))
			}
			reported := 0
			for _, r := range fixtures.Rules() {
				line := "--- PASS: TestRunChild/" + r.Fixture + "/" + ruleSubtest(r.ID, r.Fixture) + " "
				if slices.Contains(c.rules, r.ID) != strings.Contains(output, line) {
					t.Errorf("rule %s: %q in the output: %t; want %t", r.ID, line, !slices.Contains(c.rules, r.ID), slices.Contains(c.rules, r.ID))
				}
				if strings.Contains(output, "TestRunChild/"+r.Fixture+"/"+ruleSubtest(r.ID, r.Fixture)+" ") {
					reported++
				}
			}
			for _, r := range cert.Rules {
				if slices.Contains(c.rules, r.ID) && r.Verdict != certificate.VerdictPass {
					t.Errorf("rule %s: %s; want pass", r.ID, r.Verdict)
				}
			}
			if reported != len(c.rules) {
				t.Errorf("%d rules reported as subtests; want %d", reported, len(c.rules))
			}
			if t.Failed() {
				t.Logf("the child's output:\n%s", tail(output, 60))
			}
		})
	}
}
