package suite

import (
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/adapters/broken/checktheninsert"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

// runChildEnv names, in a child process of TestRunReportsEveryRule, the
// case to run: the reference, under whatever label filter the parent
// passes.
const runChildEnv = "HARMLESS_TEST_RUN"

// TestRunChild runs the suite against the adapter runChildEnv names: the
// reference or broken-check-then-insert. It runs only in a child process
// started by TestRunReportsEveryRule and the tests of gotest_test.go.
func TestRunChild(t *testing.T) {
	runChildSuite(t, runChildEnv, "TestRunReportsEveryRule", func(name string) (adapters.Adapter, []Option, bool) {
		switch name {
		case reference.Name:
			return reference.Adapter(), nil, true
		case checktheninsert.Name:
			return checktheninsert.Adapter(), nil, true
		}
		return adapters.Adapter{}, nil, false
	})
}

// TestRunReportsEveryRule: suite.Run reports each rule -run selects as a
// subtest. Rules that ran and passed pass; on a server named by a DSN the
// crash-recovery rules, which cannot run there, are skipped with the
// reason, as Go reports a skipped test.
func TestRunReportsEveryRule(t *testing.T) {
	dsn := pgtest.DSN(t)
	env := []string{"HARMLESS_DSN=" + dsn, runChildEnv + "=" + reference.Name}
	t.Run("rules that ran pass, the rest is reported", func(t *testing.T) {
		_, output, _ := runTestChild(t, "TestRunChild", []string{runFixtures("TestRunChild", catalogid.DoubleDelivery, catalogid.CrashRecovery)}, env, 0)
		for _, r := range fixtures.Rules() {
			var want string
			switch r.Fixture {
			case catalogid.DoubleDelivery:
				want = "--- PASS: TestRunChild/" + r.Fixture + "/" + ruleSubtest(r.ID, r.Fixture) + " "
			case catalogid.CrashRecovery:
				want = "--- SKIP: TestRunChild/" + r.Fixture + "/" + ruleSubtest(r.ID, r.Fixture) + " "
			default:
				// -run left the rule out: go test reports no subtest.
				want = "TestRunChild/" + r.Fixture + "/" + ruleSubtest(r.ID, r.Fixture) + " "
				if strings.Contains(output, want) {
					t.Errorf("the output reports %q, which -run left out", want)
				}
				continue
			}
			if !strings.Contains(output, want) {
				t.Errorf("the output lacks %q", want)
			}
		}
		if !strings.Contains(output, "needs a server the harness owns") {
			t.Errorf("the skipped crash-recovery subtests do not say why:\n%s", tail(output, 40))
		}
	})
}
