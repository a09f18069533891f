package mixtest_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/suite"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// childEnv, set in a child process of TestRunAndOwnSuiteInOneBinary, lets
// the child's tests run; they are skipped otherwise.
const childEnv = "HARMLESS_TEST_MIX"

// ownSpecRan is what the binary's own spec prints, so that the parent sees
// it ran.
const ownSpecRan = "the binary's own spec ran"

// The test binary's own Ginkgo suite, registered at package level as
// every Ginkgo suite is.
var _ = Describe("the binary's own suite", func() {
	It("runs its spec", func() {
		GinkgoWriter.Println(ownSpecRan)
		Expect(true).To(BeTrue())
	})
})

// child skips the test unless it runs in a child process.
func child(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("runs only in a child process of TestRunAndOwnSuiteInOneBinary")
	}
}

// certify runs suite.Run's suite on the reference, double-delivery only
// (a filter the binary's own suite does not share).
func certify(t *testing.T) {
	suite.RunWith(t, []suite.Option{
		suite.WithDSN(pgtest.DSN(t)),
		suite.WithFixtures(catalogid.DoubleDelivery),
	}, reference.Adapter())
}

// The child's tests, in the order go test runs them (the order of the
// source); the parent selects two of them with -test.run.

func TestRunFirst(t *testing.T) { child(t); certify(t) }

func TestOwnSuite(t *testing.T) {
	child(t)
	RegisterFailHandler(Fail)
	suiteConfig, reporterConfig := GinkgoConfiguration()
	reporterConfig.Verbose = true // prints the GinkgoWriter's ownSpecRan
	RunSpecs(t, "the binary's own suite", suiteConfig, reporterConfig)
}

func TestRunAfter(t *testing.T) { child(t); certify(t) }

// TestRunAndOwnSuiteInOneBinary runs suite.Run and the binary's own
// Ginkgo suite in one child process of this test binary, in both orders.
// suite.Run uses no Ginkgo, so either order works: the binary's suite runs
// its spec, and suite.Run certifies double-delivery.
func TestRunAndOwnSuiteInOneBinary(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("the parent test")
	}
	dsn := pgtest.DSN(t)
	for _, c := range []struct {
		name, run, runTest string
		// want and unwanted are lines of the child's output.
		want, unwanted []string
	}{{
		name: "own suite first", run: "^(TestOwnSuite|TestRunAfter)$", runTest: "TestRunAfter",
		want:     []string{"--- PASS: TestOwnSuite ", ownSpecRan, "Ran 1 of 1 Specs"},
		unwanted: []string{"suite.Register"},
	}, {
		name: "suite.Run first", run: "^(TestRunFirst|TestOwnSuite)$", runTest: "TestRunFirst",
		want:     []string{"--- PASS: TestOwnSuite ", ownSpecRan, "Ran 1 of 1 Specs"},
		unwanted: []string{"suite.Register"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+c.run, "-test.v", "-test.count=1", "-ginkgo.no-color")
			cmd.Env = append(os.Environ(), childEnv+"=1", "HARMLESS_DSN="+dsn)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			output := out.String()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("the child: %v\n%s", err, output)
			}
			// suite.Run's filter leaves rules out, which fail their
			// subtests: the child fails whatever the order, and only the
			// lines below tell the outcome.
			for _, r := range fixtures.Rules() {
				if r.Fixture != catalogid.DoubleDelivery {
					continue
				}
				if want := "--- PASS: " + c.runTest + "/" + r.Fixture + "/" + strings.TrimPrefix(r.ID, r.Fixture+".") + " "; !strings.Contains(output, want) {
					t.Errorf("suite.Run did not certify double-delivery: the output lacks %q", want)
				}
			}
			for _, w := range c.want {
				if !strings.Contains(output, w) {
					t.Errorf("the output lacks %q", w)
				}
			}
			for _, u := range c.unwanted {
				if strings.Contains(output, u) {
					t.Errorf("the output has %q", u)
				}
			}
			if t.Failed() {
				t.Logf("the child's output:\n%s", output)
			}
		})
	}
}
