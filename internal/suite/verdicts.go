package suite

import (
	"fmt"
	"strings"
	"time"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/applicability"
	"github.com/harmless-dev/harmless/internal/failuremsg"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// specState is what became of one spec of a rule: one rule judged in one
// play.
type specState int

const (
	// specNotRun: the selection left the rule out, or the run never
	// reached it.
	specNotRun specState = iota
	// specUnrun: the run was stopped (cancelled, interrupted) while the
	// play ran. It judged nothing. The specs of a run that could
	// not start stay specNotRun.
	specUnrun
	// specPassed: the check found no violation.
	specPassed
	// specFailed: the check found violations, or the play could not
	// finish (a failed assertion of the harness, a timeout).
	specFailed
	// specNotSupported: the rule cannot be judged here.
	specNotSupported
	// specNotApplicable: the implementation has nothing the rule tests
	// (it declares no external effects).
	specNotApplicable
)

// word names s in a progress line.
func (s specState) word() string {
	switch s {
	case specPassed:
		return "PASSED"
	case specFailed:
		return "FAILED"
	}
	return "SKIPPED"
}

// specRecord is the typed record of one spec of a rule, made when the
// tree is built and filled in when the engine judges it: the verdicts are
// folded from these alone.
type specRecord struct {
	rule fixtures.Rule
	// where names the spec's play below the registration, e.g.
	// "concurrent-delivery / plain", for messages.
	where string
	// play is the play whose evidence judge reads.
	play  *playNode
	judge func() judgement
	// state and message are what the engine recorded: the whole evidence
	// of a failure, the reason a rule is not supported, or the note of a
	// pass.
	state   specState
	message string
	// judged is the check's judgement of a failure, from which the
	// certificate's message is composed (see verdict); checked says the
	// failure is the check's, not the play's.
	judged  judgement
	checked bool
	// started and ended bound the play the spec was judged on.
	started, ended time.Time
}

// ran reports whether the spec ran: it was judged, or its play could
// not finish.
func (rec *specRecord) ran() bool { return rec.state > specUnrun }

// notSupported is the judgement of a rule that cannot be judged in this
// play, saying why, when reason is set; the zero judgement otherwise.
func notSupported(reason string) judgement { return judgement{unsupported: reason} }

// notApplicable is the judgement of a rule that has nothing to test in
// the implementation, saying why, when reason is set (see
// [applicability.Decision.NotApplicable]); it does not lower the status.
func notApplicable(reason string) judgement {
	return judgement{unsupported: reason, inapplicable: reason != ""}
}

// final reports whether j settles the rule, so that its check need look no
// further: it fails it, or finds it cannot be judged here.
func (j judgement) final() bool { return j.unsupported != "" || len(j.problems) > 0 }

// skipFor is the judgement of a rule of a fixture that a says does not
// run (not-applicable or not-supported), or of a variant that is not
// played (not-supported); the zero judgement when the rule is judged.
func skipFor(a applicability.Decision, variant string) judgement {
	if a.NotApplicable {
		return notApplicable(a.Reason)
	}
	return notSupported(a.Excludes(variant))
}

// addRule adds rule id, judged by judge, to the play pn, with its
// record. Fixtures add their rules through the play (see
// playNode.rule).
func (s *state) addRule(pn *playNode, id string, judge func() judgement) {
	r, err := fixtures.Lookup(id)
	if err != nil {
		// The rule is missing from its fixture's definition, or the
		// catalogue was not generated since it was added.
		panic(fmt.Sprintf("harmless: %v in the catalogue: is it in its fixture's definition, and the catalogue regenerated (go generate ./...)?", err)) // a bug in the suite itself
	}
	rec := &specRecord{rule: r, where: pn.node.where(), play: pn, judge: judge}
	for _, other := range pn.rules {
		if other.rule.ID == id {
			panic(fmt.Sprintf("harmless: rule %s is registered twice in %q", r.ID, rec.where)) // a bug in the suite itself
		}
	}
	pn.rules = append(pn.rules, rec)
	s.order = append(s.order, rec)
}

// ruleResults folds the records of the specs of each of rules into the
// rule's verdict. A rule with no spec is skipped.
func ruleResults(rules []fixtures.Rule, specs []*specRecord) []certificate.RuleResult {
	byRule := map[string][]*specRecord{}
	for _, rec := range specs {
		byRule[rec.rule.ID] = append(byRule[rec.rule.ID], rec)
	}
	results := make([]certificate.RuleResult, 0, len(rules))
	for _, r := range rules {
		res := certificate.RuleResult{ID: r.ID, Fixture: r.Fixture, Level: r.Level, Doc: r.Doc}
		res.Verdict, res.Message = verdict(byRule[r.ID])
		results = append(results, res)
	}
	return results
}

// noSpecRan is the message of a rule that has no spec.
const noSpecRan = "no spec of this rule ran"

// verdict folds the records of a rule's specs into one verdict.
func verdict(specs []*specRecord) (certificate.Verdict, string) {
	if len(specs) == 0 {
		return certificate.VerdictSkipped, noSpecRan
	}
	var failed, notSupported, notes []string
	var judged []judgement // of the failures a check found
	var passedIn, failedIn []string
	passed, skipped, inapplicable := 0, 0, 0
	reason := ""
	for _, rec := range specs {
		switch rec.state {
		case specNotRun, specUnrun:
			skipped++
		case specPassed:
			passed++
			passedIn = append(passedIn, rec.where)
			if rec.message != "" {
				notes = append(notes, fmt.Sprintf("[%s] %s", rec.where, rec.message))
			}
		case specFailed:
			// A rule's check keeps the judgement whole; a play that
			// could not finish (a timeout, a failed assertion of the
			// harness's own) has its message.
			msg := rec.message
			if rec.checked {
				msg = failureBody(rec.rule, rec.judged)
				judged = append(judged, rec.judged)
				failedIn = append(failedIn, rec.where)
			}
			failed = append(failed, fmt.Sprintf("[%s] %s", rec.where, msg))
		case specNotSupported:
			notSupported = append(notSupported, fmt.Sprintf("[%s] %s", rec.where, rec.message))
		case specNotApplicable:
			// The same reason for every spec: the implementation's
			// declaration, which the fixture decides once.
			inapplicable++
			reason = rec.message
		}
	}
	// Every message is kept whole, but no line of it may be unbounded: an
	// error that quotes a 1 MiB id is cut in its middle.
	switch {
	case len(failed) > 0:
		if len(judged) > 0 {
			if h := hintLine(specs[0].rule, judged, patternHint(specs[0].rule, passedIn, failedIn)); h != "" {
				failed = append(failed, h)
			}
		}
		return certificate.VerdictFail, failuremsg.BoundLines(strings.Join(failed, "\n"))
	case skipped > 0:
		return certificate.VerdictSkipped, fmt.Sprintf("%d of %d specs did not run", skipped, len(specs))
	case inapplicable == len(specs):
		return certificate.VerdictNotApplicable, reason
	case passed == 0 && len(notSupported) > 0:
		return certificate.VerdictNotSupported, failuremsg.BoundLines(strings.Join(notSupported, "\n"))
	case len(notSupported) > 0:
		notes = append(notes, "partly not supported: "+strings.Join(notSupported, "\n"))
	}
	return certificate.VerdictPass, failuremsg.BoundLines(strings.Join(notes, "\n"))
}
