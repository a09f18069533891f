package suite

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"
	gomegatypes "github.com/onsi/gomega/types"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/speclabel"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// This file is the Ginkgo layer: Register turns a registration's tree
// into Ginkgo containers and specs, which call the engine (engine.go) and
// hold no logic of their own. A play's gather function runs in its
// container's BeforeAll, each of its rules is one It that judges the rule
// and asserts its judgement with Gomega, and its play is released in an
// AfterAll.

// Register registers the suite's specs for adapter in the current Ginkgo
// suite, as one container named "harmless: " and the adapter's name. It
// adds no suite-level node (BeforeSuite, AfterSuite, ReportAfterSuite), so
// it embeds in any Ginkgo suite, one with its own BeforeSuite and
// AfterSuite included, and can be called for several adapters, each
// getting a container of its own. Call it at package level
// (var _ = suite.Register(...)) or inside a container of your own that is
// not Ordered, before RunSpecs; it returns true so it can be used that
// way. The suite must have Gomega's fail handler registered
// (RegisterFailHandler(Fail)), as every Ginkgo suite has.
//
// The container is Ordered and Serial: its specs run one after another in
// one process (ginkgo -p runs them on the first, alone). It provisions the
// adapter's database before its first spec that runs and releases it
// after its last; then the certificate is built and passed to
// [WithCertificate]. Specs a label filter leaves out are skipped in the
// certificate; a container none of whose specs runs builds none. Each
// rule's spec has the labels "fixture:" and "rule:" and the fixture's and
// rule's ids, and "level:" and the rule's level.
func Register(adapter adapters.Adapter, opts ...Option) bool {
	newState(context.Background(), adapter, opts).registerGinkgo()
	return true
}

// registerGinkgo adds the registration's container to the Ginkgo suite
// being constructed.
func (s *state) registerGinkgo() {
	ginkgo.Describe("harmless: "+s.adapter.Name, ginkgo.Ordered, ginkgo.ContinueOnFailure, ginkgo.Serial, func() {
		ginkgo.BeforeAll(func(ctx ginkgo.SpecContext) {
			if !s.cfg.seedSet {
				s.cfg.seed, s.cfg.seedSet = uint64(ginkgo.GinkgoRandomSeed()), true
			}
			s.started = time.Now()
			if s.setupErr = s.setUp(ctx); s.setupErr != nil {
				ginkgo.Fail(s.secrets.String(s.setupErr.Error()))
			}
		})
		ginkgo.AfterAll(func(ctx ginkgo.SpecContext) {
			if err := s.finish(ctx); err != nil {
				ginkgo.Fail(s.secrets.String(err.Error()))
			}
		}, ginkgo.NodeTimeout(s.cleanupTimeout()))
		// Ginkgo owns the signals here: the only thing the engine learns
		// from it is that it interrupted the run.
		ginkgo.ReportAfterEach(func(sr ginkgo.SpecReport) {
			if sr.State == types.SpecStateInterrupted && s.interrupted == "" {
				s.interrupted = "Interrupted"
			}
		})
		for _, fx := range s.root.children {
			s.ginkgoNode(fx)
		}
	})
}

// ginkgoNode adds n's container: its play's BeforeAll, one It per rule
// and the AfterAll that releases the play, then its children's
// containers. A fixture's container reports the fixture's progress after
// its last spec.
func (s *state) ginkgoNode(n *node) {
	var decorators []any
	if n.fixture != "" {
		decorators = append(decorators, ginkgo.Label(speclabel.Fixture(n.fixture)))
	}
	ginkgo.Describe(n.name, append(decorators, func() {
		if pn := n.play; pn != nil {
			ginkgo.BeforeAll(func(ctx ginkgo.SpecContext) { pn.run(ctx) })
			for _, rec := range pn.rules {
				r := rec.rule
				ginkgo.It(r.ID+": "+r.Doc, ginkgo.Label(speclabel.Rule(r.ID), speclabel.Level(r.Level)), func() {
					s.judge(rec)
					switch rec.state {
					case specNotApplicable:
						ginkgo.Skip("not-applicable: " + rec.message)
					case specNotSupported:
						ginkgo.Skip("not-supported: " + rec.message)
					case specPassed:
						if rec.message != "" {
							ginkgo.AddReportEntry("harmless-note", rec.message)
						}
					}
					gomega.Expect(rec).To(holdRule())
				})
			}
			// closePlay bounds each of its cleanups itself.
			ginkgo.AfterAll(func() {
				if err := s.closePlay(pn); err != nil {
					ginkgo.Fail(s.secrets.String(err.Error()))
				}
			})
		}
		for _, c := range n.children {
			s.ginkgoNode(c)
		}
		if n.fixture != "" {
			ginkgo.AfterAll(func() { s.fixtureDone(n.fixture) })
		}
	})...)
}

// holdRule matches the record of a judged rule that held. Its failure
// message is an excerpt of the rule's violation; the whole evidence is in
// the certificate.
func holdRule() gomegatypes.GomegaMatcher { return ruleMatcher{} }

type ruleMatcher struct{}

func (ruleMatcher) Match(actual any) (bool, error) {
	rec, ok := actual.(*specRecord)
	if !ok {
		return false, fmt.Errorf("holdRule expects a rule's record, not %T", actual)
	}
	return rec.state != specFailed && rec.state != specUnrun, nil
}

func (ruleMatcher) FailureMessage(actual any) string {
	rec := actual.(*specRecord)
	if rec.state == specUnrun {
		return fmt.Sprintf("%s %s was not judged: the run stopped", rec.rule.Level, rec.rule.ID)
	}
	return ginkgoFailure(rec.rule, rec.message)
}

func (ruleMatcher) NegatedFailureMessage(actual any) string {
	return fmt.Sprintf("expected rule %s to be violated", actual.(*specRecord).rule.ID)
}

// ginkgoEvidence says, in Ginkgo's report, where the evidence left out of
// a failure's excerpt is.
const ginkgoEvidence = "all in the harmless certificate"

// ginkgoExcerptLines bounds the excerpt a spec fails with: Ginkgo prints
// it where the spec fails.
const ginkgoExcerptLines = 12

// ginkgoFailure is the message a rule's spec fails with in Ginkgo's
// report, msg being the rule's whole violation: an excerpt of it.
func ginkgoFailure(r fixtures.Rule, msg string) string {
	if !strings.HasPrefix(msg, string(r.Level)+" "+r.ID) {
		msg = fmt.Sprintf("%s %s could not be judged: %s", r.Level, r.ID, msg)
	}
	return certificate.RuleResult{Message: msg}.Excerpt(ginkgoExcerptLines, ginkgoEvidence)
}
