package suite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/extensions/globals"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// Run certifies each of adapters from a Go test, with the default options,
// and reports each rule's verdict through t (see [RunWith]).
func Run(t *testing.T, adapters ...adapters.Adapter) {
	t.Helper()
	RunWith(t, nil, adapters...)
}

// RunWith certifies each of adapters from a Go test, with opts applied to
// every one of them, in one Ginkgo suite where each adapter has its own
// container, database and certificate. It reports each rule's verdict
// through t, as a subtest named after the rule (below a subtest named after
// the adapter when there are several): a rule that failed fails its
// subtest with its message; a rule that was skipped (left out by a label
// filter, or not run because the run stopped) fails it too, so that a
// filter matching nothing cannot pass; a rule that could not run here
// (not-supported) is skipped, with the reason, as Go reports a skipped
// test. Ginkgo's configuration is that of the test binary's -ginkgo.*
// flags, changed by [WithGinkgoConfig]. go test's -run (and -skip) select
// rules too: the suite plays only the rules whose subtests they let run
// (-run TestX/double-delivery, one fixture), and fails t when they select
// none; NO_COLOR, set, turns Ginkgo's colours off.
//
// Run and RunWith may be called any number of times in one test binary,
// from several tests, one call at a time (calls from parallel tests wait
// for each other): each hosts a Ginkgo suite of its own, after resetting
// Ginkgo's global suite. That is why they cannot share a test binary with
// Ginkgo specs registered at package level (a suite of your own run with
// RunSpecs): embed the specs there with [Register] instead. Ginkgo keeps
// one suite per process and offers no way to set it aside, so the reset
// removes those specs; a suite of the binary's own that runs after Run
// then fails, saying so, rather than passing with no spec. Nor may they
// be called from inside a running Ginkgo spec.
func RunWith(t *testing.T, opts []Option, adapters ...adapters.Adapter) {
	t.Helper()
	if len(adapters) == 0 {
		t.Fatal("harmless: no adapter to certify")
	}
	var states []*state
	for _, a := range adapters {
		s := newState(t.Context(), a, opts)
		s.subtests = true
		states = append(states, s)
	}
	name := "harmless"
	for _, a := range adapters {
		name += ": " + a.Name
	}
	// Play only the rules whose subtests -run lets go test report.
	var selected []string
	all := true
	for _, a := range adapters {
		sub := ""
		if len(adapters) > 1 {
			sub = a.Name
		}
		ids, every := selectedRules(t.Name(), sub)
		all = all && every
		for _, id := range ids {
			if !slices.Contains(selected, id) {
				selected = append(selected, id)
			}
		}
	}
	if len(selected) == 0 {
		t.Errorf("harmless: -test.run %q (or -test.skip %q) selects no rule's subtest below %s: name a fixture or a rule, as in -run '%s/double-delivery' or -run '%s/double-delivery/one-effect'",
			flagValue("test.run"), flagValue("test.skip"), t.Name(), t.Name(), t.Name())
		return
	}
	only := ""
	if !all {
		only = ruleFilter(selected)
	}
	if err := host(t, name, states, opts, only); err != nil {
		t.Error(err)
	}
	for _, s := range states {
		cert := *s.cert
		t.Logf("harmless certificate for %s (%s):\n%s", cert.Adapter, cert.Status, cert.Table())
		if len(states) == 1 {
			reportRules(t, cert)
			continue
		}
		t.Run(cert.Adapter, func(t *testing.T) { reportRules(t, cert) })
	}
}

// Certify certifies adapter without a Go test, as the harmless command
// does, and returns its certificate. The error says the run could not
// start (it wraps [ErrSetup], and the certificate's Error says the same),
// was cancelled (it wraps the context's cause), or could not release its
// database; the certificate is valid either way. Ginkgo's configuration is its default (the flags of a test
// binary, when called from one), changed by [WithGinkgoConfig]. When ctx
// is done, the run stops before its next spec (the one that runs goes on
// to its end) and the certificate says it was interrupted; a run not yet
// set up then never starts.
//
// Certify may be called any number of times in one process, one call at a
// time (concurrent calls, and calls of [Run], wait for each other): each
// hosts a Ginkgo suite of its own, after resetting Ginkgo's global suite.
// It must not be called while a Ginkgo suite of the process runs (from
// inside a spec), and it removes specs registered at package level, so a
// process that runs a Ginkgo suite of its own should use [Register].
//
// Ginkgo handles SIGINT and SIGTERM while the run lasts: it stops the spec
// that runs, runs every cleanup, skips the rest, and the certificate says
// the run was interrupted. Ginkgo keeps listening for them once the run
// has ended, so a program that goes on after Certify should handle them
// itself (see os/signal) rather than rely on their default action.
func Certify(ctx context.Context, adapter adapters.Adapter, opts ...Option) (certificate.Certificate, error) {
	s := newState(ctx, adapter, opts)
	err := host(certifyT{}, "harmless certify "+adapter.Name, []*state{s}, opts, "")
	cert := *s.cert
	switch {
	case s.setupErr != nil:
		return cert, fmt.Errorf("%w: %s", ErrSetup, strings.TrimPrefix(cert.Error, ErrSetup.Error()+": "))
	case s.cancelled:
		return cert, errors.Join(fmt.Errorf("harmless: the run was cancelled: %w", context.Cause(ctx)), err)
	}
	return cert, err
}

// certifyT lets RunSpecs run outside go test: Ginkgo only needs Fail, and
// the certificate carries the verdict.
type certifyT struct{}

func (certifyT) Fail() {}

// hosting serializes the suites Run and Certify host: Ginkgo keeps one
// suite per process, in global variables, which each resets.
var hosting sync.Mutex

// ginkgoDefaults is Ginkgo's configuration before any hosted suite changed
// it: RunSpecs keeps the configuration it was given for the rest of the
// process, so each hosted suite starts again from this one.
var ginkgoDefaults = sync.OnceValues(ginkgo.GinkgoConfiguration)

// host runs states in a Ginkgo suite of their own, described as
// description, with Ginkgo configured by opts and, when only is set,
// restricted to the specs that label filter selects as well, and leaves
// each state's certificate in it, interrupted when the suite was. Its error is a
// failure to release a database.
func host(t ginkgo.GinkgoTestingT, description string, states []*state, opts []Option, only string) error {
	hosting.Lock()
	defer hosting.Unlock()
	suiteConfig, reporterConfig := ginkgoDefaults()
	// Ginkgo's reporter knows only -ginkgo.no-color and GINKGO_NO_COLOR;
	// a hosted suite's output is the test's or the program's, which
	// follows the convention of NO_COLOR (https://no-color.org): set and
	// not empty, it asks for no ANSI colour. WithGinkgoConfig may still
	// turn colour back on.
	if os.Getenv("NO_COLOR") != "" {
		reporterConfig.NoColor = true
	}
	for _, fn := range newConfig(opts).ginkgo {
		fn(&suiteConfig, &reporterConfig)
	}
	switch {
	case only == "":
	case suiteConfig.LabelFilter == "":
		suiteConfig.LabelFilter = only
	default:
		suiteConfig.LabelFilter = "(" + suiteConfig.LabelFilter + ") && (" + only + ")"
	}
	globals.Reset()
	// Leave no spec behind for the next suite of the process, only the
	// guard that stops a suite of the binary's own from passing empty.
	defer leaveGuard()
	gomega.RegisterFailHandler(ginkgo.Fail)
	for _, s := range states {
		s.hosted = true
		s.describe()
	}
	// This suite is the host's own: a suite-level node is its to add.
	var report ginkgo.Report
	ginkgo.ReportAfterSuite("harmless", func(r ginkgo.Report) { report = r })
	ginkgo.RunSpecs(t, description, suiteConfig, reporterConfig)

	var errs []error
	for _, s := range states {
		// A suite that ended without reporting every spec of a container
		// (its setup failed) leaves it to be finished here.
		if err := s.finish(context.Background()); err != nil {
			errs = append(errs, err)
		}
		if reason := interruption(report); reason != "" {
			interrupt(s.cert, reason)
		}
		s.deliver()
	}
	return errors.Join(errs...)
}

// discardedSpecs is the failure of a Ginkgo suite that runs after Run or
// Certify in one process and has no spec left.
const discardedSpecs = "harmless: suite.Run or suite.Certify ran earlier in this process and reset Ginkgo's global suite, " +
	"which removed the specs this test binary registered at package level, so this suite has none left to run. " +
	"Ginkgo keeps one suite per process and cannot set it aside: in a test binary with Ginkgo specs of its own, " +
	"embed harmless in that suite with suite.Register (var _ = suite.Register(adapter)) instead of calling suite.Run, " +
	"or call suite.Run from a test package of its own"

// leaveGuard resets Ginkgo's global suite once a hosted suite has run, and
// registers in the fresh one a ReportBeforeSuite that fails it when it has
// no spec. Ginkgo's own suite of the test binary, run after Run, would
// otherwise find its package-level specs gone with the reset, print "Will
// run 0 of 0 specs" and pass; a ReportBeforeSuite runs whatever the
// filters, so it fails that suite loudly instead, saying what to do. A
// suite with specs registered after the reset is left alone, and the next
// Run or Certify resets the guard away.
func leaveGuard() {
	globals.Reset()
	ginkgo.ReportBeforeSuite(func(r ginkgo.Report) {
		if r.PreRunStats.TotalSpecs == 0 {
			ginkgo.Fail(discardedSpecs)
		}
	})
}

// goTestEvidence says, in a Go test's output, where the evidence left out
// of a failed rule's excerpt is.
const goTestEvidence = "all in the certificate (suite.WithCertificate, certificate.Certificate.WriteJSON)"

// reportRules reports each rule of cert as a subtest of t: a failed rule
// with an excerpt of its message.
func reportRules(t *testing.T, cert certificate.Certificate) {
	t.Helper()
	if cert.Error != "" {
		t.Errorf("harmless: the run could not start: %s", cert.Error)
		return
	}
	// A subtest per fixture, and in it one per rule, named by the part
	// of its id after the fixture's: -run TestX/double-delivery/one-effect
	// names one rule.
	for i := 0; i < len(cert.Rules); {
		fixture := cert.Rules[i].Fixture
		j := i
		for j < len(cert.Rules) && cert.Rules[j].Fixture == fixture {
			j++
		}
		rules := cert.Rules[i:j]
		t.Run(fixture, func(t *testing.T) {
			for _, r := range rules {
				t.Run(ruleSubtest(r.ID, r.Fixture), func(t *testing.T) { reportRule(t, r) })
			}
		})
		i = j
	}
}

// ruleSubtest is the name of rule id's subtest, below its fixture's: the
// id without the fixture's prefix ("one-effect" for
// "double-delivery.one-effect").
func ruleSubtest(id, fixture string) string { return strings.TrimPrefix(id, fixture+".") }

// reportRule reports one rule's verdict through its subtest t.
func reportRule(t *testing.T, r certificate.RuleResult) {
	t.Helper()
	switch r.Verdict {
	case certificate.VerdictFail:
		t.Errorf("%s %s failed:\n%s", r.Level, r.ID, r.Excerpt(certificate.ExcerptLines, goTestEvidence))
	case certificate.VerdictSkipped:
		t.Errorf("%s %s did not run (%s): a certification runs every rule", r.Level, r.ID, r.Message)
	case certificate.VerdictNotSupported:
		t.Skipf("%s %s could not run: %s", r.Level, r.ID, r.Message)
	case certificate.VerdictNotApplicable:
		t.Skipf("%s %s is not-applicable: %s", r.Level, r.ID, r.Message)
	}
}

// WithGinkgoConfig changes the Ginkgo configuration of the suite [Run] or
// [Certify] hosts: fn gets the configuration it would use and may change
// it (a label filter, the random seed, a timeout, the reporter's
// verbosity). [Register] ignores it: the suite that calls RunSpecs is
// configured by its own caller.
func WithGinkgoConfig(fn func(*types.SuiteConfig, *types.ReporterConfig)) Option {
	return func(c *config) { c.ginkgo = append(c.ginkgo, fn) }
}
