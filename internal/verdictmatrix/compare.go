package verdictmatrix

import (
	"fmt"
	"slices"
	"strings"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// Compare compares a certificate, rule by rule, with the registry's entry
// for its adapter and returns every difference, each naming the adapter
// and the rule. No difference means the suite judged the adapter exactly
// as the registry demands: it failed the rules the entry says it must
// fail, and no other.
//
// The entry's verdicts are those of the deployment the certificate's
// database models (builtin.DeploymentOf its DatabaseKind). Every rule of
// the catalogue is compared, so the certificate must come from a run of
// every rule on a database the harness owns: a rule that is missing,
// skipped or not-supported where the entry wants it to pass is a
// difference. With only, only the rules of those fixtures are compared,
// and the status is not: the certificate of a run filtered to them.
func Compare(cert certificate.Certificate, entry builtin.Entry, only ...string) []string {
	if cert.Error != "" {
		return []string{fmt.Sprintf("adapter %s: the run did not start: %s", cert.Adapter, cert.Error)}
	}
	got := map[string]certificate.RuleResult{}
	for _, r := range cert.Rules {
		got[r.ID] = r
	}
	dep := builtin.DeploymentOf(cert.DatabaseKind)
	var diffs []string
	for _, rule := range fixtures.Rules() {
		if len(only) > 0 && !slices.Contains(only, rule.Fixture) {
			continue
		}
		want, why := entry.AllowedOn(rule, dep)
		r, ok := got[rule.ID]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("adapter %s, rule %s: no verdict in the certificate", cert.Adapter, rule.ID))
			continue
		}
		if !slices.Contains(want, r.Verdict) {
			line, _, _ := strings.Cut(r.Message, "\n")
			if why == "" {
				why = "it must pass"
			}
			diffs = append(diffs, fmt.Sprintf("adapter %s, rule %s: verdict %s, want %s (%s): %s",
				cert.Adapter, rule.ID, r.Verdict, verdicts(want), why, line))
			continue
		}
		if reason := entry.Unsupported[rule.ID]; reason != "" && !strings.Contains(r.Message, reason) {
			diffs = append(diffs, fmt.Sprintf("adapter %s, rule %s: not-supported, but not because %q: %s", cert.Adapter, rule.ID, reason, r.Message))
		}
	}
	if len(only) > 0 {
		return diffs
	}
	if want := Statuses(entry, dep); !slices.Contains(want, cert.Status) || cert.Certified != (cert.Status == certificate.StatusCertified) {
		var names []string
		for _, st := range want {
			names = append(names, string(st))
		}
		diffs = append(diffs, fmt.Sprintf("adapter %s: status %s (certified %t), but the registry says it must be %s", cert.Adapter, cert.Status, cert.Certified, strings.Join(names, " or ")))
	}
	return diffs
}

// Statuses returns the statuses the registry allows a run of every rule
// of the catalogue to end with for entry: the status of the verdicts it
// allows, with every rule it may fail passing, and with every one of them
// failing. A broken adapter is not always not-certified: one whose rules
// to fail are all SHOULD rules is certified, and so is one whose rules to
// fail are all of a fixture that a run on d does not play.
func Statuses(entry builtin.Entry, d builtin.Deployment) []certificate.Status {
	var best, worst []certificate.RuleResult
	for _, rule := range fixtures.Rules() {
		want, _ := entry.AllowedOn(rule, d)
		r := certificate.RuleResult{ID: rule.ID, Fixture: rule.Fixture, Level: rule.Level}
		r.Verdict = want[len(want)-1]
		best = append(best, r)
		r.Verdict = want[0]
		worst = append(worst, r)
	}
	statuses := []certificate.Status{certificate.StatusOf(best)}
	if st := certificate.StatusOf(worst); st != statuses[0] {
		statuses = append(statuses, st)
	}
	return statuses
}

func verdicts(vs []certificate.Verdict) string {
	var s []string
	for _, v := range vs {
		s = append(s, string(v))
	}
	return strings.Join(s, " or ")
}
