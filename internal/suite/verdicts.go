package suite

import (
	"fmt"
	"slices"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// outcome is what a rule's spec found, as its It recorded it while it ran.
type outcome int

const (
	// The zero outcome: the It did not finish judging (it did not run,
	// or something failed before its check did).
	_ outcome = iota
	// outcomePass: the check found no violation.
	outcomePass
	// outcomeFail: the check found violations.
	outcomeFail
	// outcomeNotSupported: the rule cannot be judged here.
	outcomeNotSupported
	// outcomeNotApplicable: the implementation has nothing the rule
	// tests (it declares no external effects).
	outcomeNotApplicable
)

// specRecord is the typed record of one spec of a rule, made when the spec
// is registered and filled in as it runs: the verdicts are folded from
// these, never from Ginkgo's labels or skip messages. Ginkgo's report of
// the spec, kept with it, supplies what only Ginkgo knows: whether the
// spec ran at all, and the message of a failure outside the check (a
// timeout, a failed setup, an interrupt).
type specRecord struct {
	rule fixtures.Rule
	// where names the spec's containers below the adapter's, e.g.
	// "concurrent-delivery / plain", for messages.
	where string
	// key identifies the spec in Ginkgo's report (see specKey).
	key string
	// outcome and message are what the It recorded: the whole evidence of
	// a failure, the reason a rule is not supported, or the note of a pass.
	outcome outcome
	message string
	// judged is the check's judgement of a failure, from which the
	// certificate's message is composed (see verdict).
	judged judgement
	// report is Ginkgo's report of the spec, once it has finished; nil
	// until then, and for a spec the suite never reached.
	report *types.SpecReport
	// unrun marks a spec the container's setup stopped: the run could not
	// start, or was cancelled. It judged nothing, whatever Ginkgo says.
	unrun bool
}

// specKey identifies a spec of an adapter's container: its containers
// below the adapter's and its text, as registered and as Ginkgo reports
// them. A rule's It appears once per container, so the key is unique
// within a registration.
func specKey(below []string, leaf string) string {
	return strings.Join(append(slices.Clone(below), leaf), "\x00")
}

// notSupportedPrefix starts the Skip message of a spec that does not apply,
// in Ginkgo's own report; the verdict comes from the spec's record.
const notSupportedPrefix = "not-supported: "

// notApplicablePrefix starts the Skip message of a spec whose rule has
// nothing to test in the implementation.
const notApplicablePrefix = "not-applicable: "

// notSupported is the judgement of a rule that cannot be judged in this
// play, saying why, when reason is set; the zero judgement otherwise.
func notSupported(reason string) judgement { return judgement{unsupported: reason} }

// notApplicable is the judgement of a rule that has nothing to test in
// the implementation, saying why, when reason is set (see
// [fixtures.Applicability.NotApplicable]); it does not lower the status.
func notApplicable(reason string) judgement {
	return judgement{unsupported: reason, inapplicable: reason != ""}
}

// final reports whether j settles the rule, so that its check need look no
// further: it fails it, or finds it cannot be judged here.
func (j judgement) final() bool { return j.unsupported != "" || len(j.problems) > 0 }

// skipFor is the judgement of a rule of a fixture that a says does not
// run (not-applicable or not-supported), or of a variant that is not
// played (not-supported); the zero judgement when the rule is judged.
func skipFor(a fixtures.Applicability, variant string) judgement {
	if a.NotApplicable {
		return notApplicable(a.Reason)
	}
	return notSupported(a.Excludes(variant))
}

// registerRule registers one It that checks rule id with judge, and its
// record. Fixtures register their rules through a scenario (see
// scenario.rule).
func (s *state) registerRule(id string, judge func() judgement) {
	r, err := fixtures.Lookup(id)
	if err != nil {
		panic(err) // a typo in the suite itself
	}
	leaf := r.ID + ": " + r.Doc
	below := ginkgo.CurrentTreeConstructionNodeReport().ContainerHierarchyTexts[s.constructionDepth:]
	rec := &specRecord{rule: r, where: strings.Join(below, " / "), key: specKey(below, leaf)}
	if s.specs[rec.key] != nil {
		panic(fmt.Sprintf("harmless: rule %s is registered twice in %q", r.ID, rec.where)) // a bug in the suite itself
	}
	s.specs[rec.key] = rec
	s.order = append(s.order, rec)
	// The check only judges what the container's BeforeAll gathered, which
	// has a budget of its own: the It needs no timeout (one would cap the
	// BeforeAll, which runs inside the container's first It).
	ginkgo.It(leaf, ginkgo.Label(r.Label(), "level:"+string(r.Level)), func() {
		j := judge()
		switch {
		case j.inapplicable:
			rec.outcome, rec.message = outcomeNotApplicable, j.unsupported
			ginkgo.Skip(notApplicablePrefix + j.unsupported)
		case j.unsupported != "":
			rec.outcome, rec.message = outcomeNotSupported, j.unsupported
			ginkgo.Skip(notSupportedPrefix + j.unsupported)
		case len(j.problems) > 0:
			msg := failureMessage(r, j)
			rec.outcome, rec.message, rec.judged = outcomeFail, msg, j
			ginkgo.Fail(s.ginkgoFailure(r, msg))
		default:
			rec.outcome, rec.message = outcomePass, j.note
			if j.note != "" {
				ginkgo.AddReportEntry(noteEntry, j.note)
			}
		}
	})
}

// record returns the record of the spec Ginkgo reports as sr, or nil when
// sr is not a spec of this registration.
func (s *state) record(sr types.SpecReport) *specRecord {
	if sr.LeafNodeType != types.NodeTypeIt || len(sr.ContainerHierarchyTexts) < s.reportDepth {
		return nil
	}
	return s.specs[specKey(sr.ContainerHierarchyTexts[s.reportDepth:], sr.LeafNodeText)]
}

// ruleResults folds the records of the specs of each of rules into the
// rule's verdict. A rule none of whose specs was reported is skipped.
func ruleResults(rules []fixtures.Rule, specs []*specRecord) []certificate.RuleResult {
	byRule := map[string][]*specRecord{}
	for _, rec := range specs {
		if rec.report != nil {
			byRule[rec.rule.ID] = append(byRule[rec.rule.ID], rec)
		}
	}
	results := make([]certificate.RuleResult, 0, len(rules))
	for _, r := range rules {
		res := certificate.RuleResult{ID: r.ID, Fixture: r.Fixture, Level: r.Level, Doc: r.Doc}
		res.Verdict, res.Message = verdict(byRule[r.ID])
		results = append(results, res)
	}
	return results
}

// noSpecRan is the message of a rule none of whose specs was reported.
const noSpecRan = "no spec of this rule ran"

// verdict folds the records of a rule's reported specs into one verdict.
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
		sr := rec.report
		switch {
		case rec.unrun:
			skipped++
		case sr.State == types.SpecStateInterrupted:
			// The run was stopped while this spec ran: the interruption
			// says nothing about the implementation.
			skipped++
		case sr.State == types.SpecStatePassed:
			passed++
			passedIn = append(passedIn, rec.where)
			if rec.outcome == outcomePass && rec.message != "" {
				notes = append(notes, fmt.Sprintf("[%s] %s", rec.where, rec.message))
			}
		case sr.State.Is(types.SpecStateFailureStates):
			// A rule's check fails its spec with an excerpt and keeps the
			// whole message in its record; any other failure (a timeout,
			// a failed assertion of the harness's own) is Ginkgo's, whole.
			msg := sr.Failure.Message
			if rec.outcome == outcomeFail {
				msg = failureBody(rec.rule, rec.judged)
				judged = append(judged, rec.judged)
				failedIn = append(failedIn, rec.where)
			}
			// A timeout's message says only that; the scenario's own
			// report, attached to Ginkgo's progress report, says how far
			// it got.
			if extra := sr.Failure.ProgressReport.AdditionalReports; len(extra) > 0 {
				msg += "\n" + strings.Join(extra, "\n")
			}
			failed = append(failed, fmt.Sprintf("[%s] %s", rec.where, msg))
		case sr.State == types.SpecStateSkipped && rec.outcome == outcomeNotSupported:
			notSupported = append(notSupported, fmt.Sprintf("[%s] %s", rec.where, rec.message))
		case sr.State == types.SpecStateSkipped && rec.outcome == outcomeNotApplicable:
			// The same reason for every spec: the implementation's
			// declaration, which the fixture decides once.
			inapplicable++
			reason = rec.message
		default:
			skipped++
		}
	}
	// Every message is kept whole, but no line of it may be unbounded: an
	// error that quotes a 1 MiB id is cut in its middle.
	switch {
	case len(failed) > 0:
		if len(judged) > 0 {
			if h := hintLine(specs[0].rule, judged, variantHint(specs[0].rule.ID, passedIn, failedIn)); h != "" {
				failed = append(failed, h)
			}
		}
		return certificate.VerdictFail, certificate.BoundLines(strings.Join(failed, "\n"))
	case skipped > 0:
		return certificate.VerdictSkipped, fmt.Sprintf("%d of %d specs did not run", skipped, len(specs))
	case inapplicable == len(specs):
		return certificate.VerdictNotApplicable, reason
	case passed == 0 && len(notSupported) > 0:
		return certificate.VerdictNotSupported, certificate.BoundLines(strings.Join(notSupported, "\n"))
	case len(notSupported) > 0:
		notes = append(notes, "partly not supported: "+strings.Join(notSupported, "\n"))
	}
	return certificate.VerdictPass, certificate.BoundLines(strings.Join(notes, "\n"))
}

// variantHint is a guess at the cause of a rule's violations read from
// which of its plays passed and which failed, "" when they show no
// pattern: a conflicting copy handled right when it comes after the
// first delivery but not while the first is in flight points to a race,
// not to a missing comparison.
func variantHint(rule string, passedIn, failedIn []string) string {
	if !strings.HasPrefix(rule, fixtures.ConflictingPayload+".") || len(failedIn) == 0 {
		return ""
	}
	for _, w := range failedIn {
		if !strings.HasSuffix(w, conflictInFlightVariant) {
			return ""
		}
	}
	for _, w := range passedIn {
		if strings.HasSuffix(w, conflictSequentialVariant) {
			return "a race between looking for the claim and making it: the conflicting copy was told apart when it came after the first delivery (the sequential play passed), but not while the first was in flight, as with a check-then-insert without a unique constraint or a lock"
		}
	}
	return ""
}
