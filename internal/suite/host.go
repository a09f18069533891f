package suite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

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
// every one of them, one after another, each with its own database and
// certificate. It reports each rule's verdict through t, as a subtest
// named after the rule below one named after its fixture (and below one
// named after the adapter when there are several): a rule that failed
// fails its subtest with its message; a rule that was skipped (not run
// because the run stopped) fails it too; a rule that could not run here
// (not-supported) is skipped, with the reason, as Go reports a skipped
// test. go test's -run (and -skip) select rules: the suite plays only the
// rules whose subtests they let run (-run TestX/double-delivery, one
// fixture), and fails t when they select none.
//
// Run and RunWith need no test framework but package testing: they may be
// called any number of times in one test binary, from parallel tests too,
// and beside Ginkgo specs of the binary's own. When the test's context
// ends (its deadline, say), the run stops before its next play and the
// certificate says so.
func RunWith(t *testing.T, opts []Option, adapters ...adapters.Adapter) {
	t.Helper()
	if len(adapters) == 0 {
		t.Fatal("harmless: no adapter to certify")
	}
	var certs []certificate.Certificate
	for _, a := range adapters {
		sub := ""
		if len(adapters) > 1 {
			sub = a.Name
		}
		ids, all := selectedRules(t.Name(), sub)
		if len(ids) == 0 {
			t.Errorf("harmless: -test.run %q (or -test.skip %q) selects no rule's subtest below %s: name a fixture or a rule, as in -run '%s/double-delivery' or -run '%s/double-delivery/one-effect'",
				flagValue("test.run"), flagValue("test.skip"), t.Name(), t.Name(), t.Name())
			return
		}
		runOpts := opts
		if !all {
			runOpts = append(slices.Clip(opts), WithRules(ids))
		}
		s := newState(t.Context(), a, runOpts)
		if err := s.certify(); err != nil {
			t.Error(err)
		}
		certs = append(certs, *s.cert)
	}
	for _, cert := range certs {
		t.Logf("harmless certificate for %s (%s):\n%s", cert.Adapter, cert.Status, cert.Table())
		if len(certs) == 1 {
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
// database; the certificate is valid either way. When ctx is done, the
// play that runs is stopped, every cleanup runs, the rest is skipped and
// the certificate says the run was interrupted; a run not yet set up then
// never starts. Certify handles no signal itself: a program stops it on
// SIGINT or SIGTERM by cancelling ctx (see signal.NotifyContext).
//
// Certify may be called any number of times in one process, concurrently
// too, and from inside a test framework's specs.
func Certify(ctx context.Context, adapter adapters.Adapter, opts ...Option) (certificate.Certificate, error) {
	s := newState(ctx, adapter, opts)
	err := s.certify()
	cert := *s.cert
	switch {
	case s.setupErr != nil:
		return cert, fmt.Errorf("%w: %s", ErrSetup, strings.TrimPrefix(cert.Error, ErrSetup.Error()+": "))
	case s.cancelled:
		return cert, errors.Join(fmt.Errorf("harmless: the run was cancelled: %w", context.Cause(ctx)), err)
	}
	return cert, err
}

// goTestEvidence says, in a Go test's output, where the evidence left out
// of a failed rule's excerpt is.
const goTestEvidence = "all in the certificate (suite.WithCertificate, certificate.Certificate.WriteJSON)"

// reportRules reports each rule of cert as a subtest of t: a failed rule
// with an excerpt of its message.
func reportRules(t *testing.T, cert certificate.Certificate) {
	t.Helper()
	if strings.HasPrefix(cert.Error, ErrSetup.Error()) {
		t.Errorf("harmless: the run could not start: %s", cert.Error)
		return
	}
	// Any other error (see unreachable) came with the verdicts, and the
	// caller reported it.
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
