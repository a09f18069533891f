package suite

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	. "github.com/onsi/gomega"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/redact"
)

// Version is the suite's version, recorded in every certificate.
const Version = "0.1.0"

// setupTimeout bounds the suite's setup: finding or starting the
// database. The fixtures' scenarios have budgets of their own, which follow
// from the delivery timeout (see scenario).
const setupTimeout = 5 * time.Minute

// Run runs the whole suite against adapter from a Go test and reports each
// rule's verdict through t, as a subtest named after the rule: a rule that
// failed fails its subtest with its message; a rule that was skipped (left
// out by a label filter, or not run because the run stopped) fails it too,
// so that a filter matching nothing cannot pass; a rule that could not run
// here (not-supported) is skipped, with the reason, as Go reports a skipped
// test.
func Run(t *testing.T, adapter adapters.Adapter, opts ...Option) {
	t.Helper()
	RegisterFailHandler(Fail)
	var cert *Certificate
	opts = append(opts, WithCertificate(func(c Certificate) {
		cert = &c
		t.Logf("harmless certificate for %s (%s):\n%s", c.Adapter, c.Status, c.Table())
	}))
	Register(adapter, opts...)
	RunSpecs(t, "harmless: "+adapter.Name)
	if cert == nil {
		t.Fatal("harmless: the suite produced no certificate")
	}
	reportRules(t, *cert)
}

// goTestEvidence says, in a Go test's output, where the evidence left out
// of a failed rule's excerpt is.
const goTestEvidence = "all in the certificate (suite.WithCertificate, Certificate.WriteJSON)"

// reportRules reports each rule of cert as a subtest of t: a failed rule
// with an excerpt of its message.
func reportRules(t *testing.T, cert Certificate) {
	t.Helper()
	if cert.Error != "" {
		t.Errorf("harmless: the run could not start: %s", cert.Error)
		return
	}
	for _, r := range cert.Rules {
		t.Run(r.ID, func(t *testing.T) {
			switch r.Verdict {
			case VerdictFail:
				t.Errorf("%s %s failed:\n%s", r.Level, r.ID, r.Excerpt(ExcerptLines, goTestEvidence))
			case VerdictSkipped:
				t.Errorf("%s %s did not run (%s): a certification runs every rule", r.Level, r.ID, r.Message)
			case VerdictNotSupported:
				t.Skipf("%s %s could not run: %s", r.Level, r.ID, r.Message)
			}
		})
	}
}

// Register registers the suite's specs for adapter in the current Ginkgo
// suite, with a BeforeSuite that provisions the database and a
// ReportAfterSuite that builds the certificate. Call it at package level
// (var _ = suite.Register(...)), before RunSpecs. It returns true so it can be
// used that way.
func Register(adapter adapters.Adapter, opts ...Option) bool {
	s := &state{adapter: adapter, cfg: newConfig(opts), secrets: redact.New()}
	s.maskLogs()
	for _, dsn := range []string{s.cfg.provision.DSN, os.Getenv("HARMLESS_DSN"), os.Getenv("DATABASE_URL")} {
		s.addDSN(dsn)
	}
	BeforeSuite(s.start, NodeTimeout(setupTimeout))
	AfterSuite(s.stop, NodeTimeout(s.cleanupTimeout()))
	ReportAfterSuite("harmless certificate", s.report)
	ReportBeforeEach(s.specStarts)
	ReportAfterEach(s.progress)
	Describe("harmless", func() {
		s.doubleDelivery()
		s.concurrentDelivery()
		s.failureAfterMarker()
		s.conflictingPayload()
		s.retentionExpiry()
		s.namespaceIsolation()
		s.badInput()
		s.identityFidelity()
		s.ambiguousCommit()
		s.crashRecovery()
	})
	return true
}

// state is one registration's run: set up in BeforeSuite, used by the specs.
type state struct {
	adapter  adapters.Adapter
	cfg      config
	run      *harness.Run
	database string
	kind     string
	setupErr error
	seed     uint64
	fixture  fixtureRun // the fixture running now, for WithFixtureProgress
	// secrets are masked in everything the suite reports: its log lines,
	// failure messages and the certificate.
	secrets *redact.Redactor
}

// maskLogs makes the suite's log lines, and those of the harness and the
// provisioning it passes its logf to, mask the run's secrets.
func (s *state) maskLogs() {
	mask := func(logf func(string, ...any)) func(string, ...any) {
		if logf == nil {
			return nil
		}
		return func(format string, args ...any) { logf("%s", s.secrets.String(fmt.Sprintf(format, args...))) }
	}
	s.cfg.logf = mask(s.cfg.logf)
	s.cfg.provision.Logf = mask(s.cfg.provision.Logf)
}

// addDSN learns the passwords of dsn as secrets, and passes them on to
// WithSecrets.
func (s *state) addDSN(dsn string) {
	for _, secret := range s.secrets.AddDSN(dsn) {
		for _, fn := range s.cfg.onSecret {
			fn(secret)
		}
	}
}

func (s *state) start(ctx SpecContext) {
	s.setupErr = s.setUp(ctx)
	if s.setupErr != nil {
		Fail(s.secrets.String(s.setupErr.Error()))
	}
}

func (s *state) setUp(ctx context.Context) error {
	s.seed = s.cfg.seed
	if !s.cfg.seedSet {
		s.seed = uint64(GinkgoRandomSeed())
	}
	if err := s.adapter.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrSetup, err)
	}
	if err := s.cfg.validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrSetup, err)
	}
	run, err := harness.Start(ctx, harness.Options{
		Provision:       s.cfg.provision,
		DeliveryTimeout: s.cfg.deliveryTimeout,
		Logf:            s.cfg.logf,
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSetup, err)
	}
	s.run = run
	// A provisioned server's DSN may hold a password it generated.
	s.addDSN(run.Server().DSN())
	s.kind = string(run.Server().Kind)
	if s.database, err = run.ServerVersion(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrSetup, err)
	}
	s.cfg.logf("harmless %s: certifying %q on PostgreSQL %s (%s), run %s, seed %d", Version, s.adapter.Name, s.database, s.kind, run.ID(), s.seed)
	return nil
}

func (s *state) stop(ctx SpecContext) {
	s.fixtureDone()
	if s.run == nil {
		return
	}
	cctx, cancel := s.cleanupContext(ctx)
	defer cancel()
	Expect(s.run.Close(cctx)).To(Succeed(), "release the run's database")
}

// progress reports each finished spec that ran (not one a filter left out)
// through the configured logf, and collects it for its fixture's progress
// report.
func (s *state) progress(sr SpecReport) {
	if sr.LeafNodeType != types.NodeTypeIt {
		return
	}
	if ran(sr) {
		s.cfg.logf("%-7s %s (%.1fs)", strings.ToUpper(sr.State.String()), strings.Join(append(sr.ContainerHierarchyTexts[1:], sr.LeafNodeText), " / "), sr.RunTime.Seconds())
	}
	if fixtureOf(sr) == s.fixture.id {
		s.fixture.specs = append(s.fixture.specs, sr)
		s.fixture.ran = s.fixture.ran || ran(sr)
	}
}

// FixtureProgress is one fixture's result, reported by
// [WithFixtureProgress] when the fixture finishes.
type FixtureProgress struct {
	// Fixture is the fixture's id.
	Fixture string
	// Rules holds the verdict of each of the fixture's rules that has a
	// spec in the run (filtered out or not), in catalogue order, as the
	// certificate will state it.
	Rules []RuleResult
	// Started is when the fixture's first spec that ran started.
	Started time.Time
	// Duration is how long the fixture's specs ran, from the start of the
	// first to the end of the last.
	Duration time.Duration
}

// Count returns how many of the fixture's rules have verdict v.
func (p FixtureProgress) Count(v Verdict) int { return count(p.Rules, v) }

// fixtureRun collects the specs of the fixture that runs now.
type fixtureRun struct {
	id    string
	specs []types.SpecReport
	ran   bool // whether any of specs ran, rather than being filtered out
}

// specStarts notices the end of a fixture: specs run one fixture after
// another, so a spec of another fixture starting means the one before has
// finished.
func (s *state) specStarts(sr SpecReport) {
	if sr.LeafNodeType != types.NodeTypeIt {
		return
	}
	if id := fixtureOf(sr); id != s.fixture.id {
		s.fixtureDone()
		s.fixture.id = id
	}
}

// fixtureDone reports the fixture that ran last, if any of its specs ran,
// and forgets it.
func (s *state) fixtureDone() {
	fx := s.fixture
	s.fixture = fixtureRun{}
	if fx.id == "" || !fx.ran || len(s.cfg.onFixture) == 0 {
		return
	}
	var rules []fixtures.Rule
	for _, r := range fixtures.Rules() {
		if r.Fixture == fx.id {
			rules = append(rules, r)
		}
	}
	p := FixtureProgress{Fixture: fx.id}
	for _, r := range ruleResults(rules, fx.specs) {
		if r.Message != noSpecRan {
			p.Rules = append(p.Rules, r)
		}
	}
	var end time.Time
	for _, sr := range fx.specs {
		if !ran(sr) {
			continue
		}
		if p.Started.IsZero() || sr.StartTime.Before(p.Started) {
			p.Started = sr.StartTime
		}
		if sr.EndTime.After(end) {
			end = sr.EndTime
		}
	}
	p.Duration = end.Sub(p.Started)
	for i, r := range p.Rules {
		p.Rules[i].Message = s.secrets.String(r.Message)
	}
	for _, fn := range s.cfg.onFixture {
		fn(p)
	}
}

// fixtureOf returns the fixture of a spec, from its fixture: label.
func fixtureOf(sr SpecReport) string {
	for _, l := range sr.Labels() {
		if id, ok := strings.CutPrefix(l, "fixture:"); ok {
			return id
		}
	}
	return ""
}

// ran reports whether a spec ran: Ginkgo skips the specs a filter leaves
// out (and all specs once the suite is interrupted or cannot start)
// without a message, and a spec skipped at run time (not-supported, say)
// with one.
func ran(sr SpecReport) bool {
	return !(sr.State == types.SpecStateSkipped && sr.Failure.Message == "") && sr.State != types.SpecStatePending
}

// rand returns a random source for one of the suite's random choices,
// driven by the run's seed and stream, a name for the choice: the same seed
// makes the same choice, whatever else the run does.
func (s *state) rand(stream string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(stream))
	return rand.New(rand.NewPCG(s.seed, h.Sum64()))
}

// ErrSetup marks a run that could not start: a bad adapter or option, or no
// database. Certificate.Error carries it.
var ErrSetup = errors.New("harmless could not start")

func (c config) validate() error {
	switch {
	case c.contenders < 2:
		return fmt.Errorf("contenders must be at least 2, not %d", c.contenders)
	case c.plainRounds < 1 || c.overlapRounds < 1:
		return fmt.Errorf("rounds must be at least 1, not %d plain and %d overlapping", c.plainRounds, c.overlapRounds)
	case c.deliveryTimeout <= 0:
		return fmt.Errorf("delivery timeout must be positive, not %s", c.deliveryTimeout)
	case c.maxTries < 1:
		return fmt.Errorf("max tries must be at least 1, not %d", c.maxTries)
	}
	return nil
}

// cleanupTimeout bounds the cleanup of a spec, and of the run: closing the
// two instances of the implementation (each a guarded call) and the
// harness's own work of dropping what it created.
func (s *state) cleanupTimeout() time.Duration {
	return 2*harness.CallSlot(s.cfg.deliveryTimeout) + 2*time.Minute
}

// newSpec gives the current Ordered container a fresh environment, closed
// after its last spec.
func (s *state) newSpec(ctx context.Context) *harness.Spec {
	GinkgoHelper()
	spec, err := s.run.NewSpec(ctx, s.adapter)
	Expect(err).NotTo(HaveOccurred(), "create the spec's environment")
	DeferCleanup(func(ctx SpecContext) {
		cctx, cancel := s.cleanupContext(ctx)
		defer cancel()
		Expect(spec.Close(cctx)).To(Succeed(), "clean up the spec's environment")
	}, NodeTimeout(s.cleanupTimeout()))
	return spec
}

// cleanupContext is the context of a cleanup: it ends after the cleanup's
// own timeout, but not with ctx. An interrupted run (SIGINT, SIGTERM)
// cancels the context Ginkgo gives its cleanup nodes at once, and the
// cleanup must still remove what the run created.
func (s *state) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.cleanupTimeout())
}

// noteEntry names the report entry that carries a rule's note into its
// certificate message.
const noteEntry = "harmless-note"

// evidenceEntry names the report entry that carries a failed rule's whole
// message into its certificate. Ginkgo's own report (the output of go test,
// and of certify -v) shows an excerpt: the spec fails with that.
const evidenceEntry = "harmless-evidence"

// ginkgoEvidence says, in Ginkgo's report, where the evidence left out of
// a failure's excerpt is.
const ginkgoEvidence = "all in the harmless certificate"

// ginkgoExcerptLines bounds the excerpt a spec fails with: Ginkgo prints
// it where the spec fails and again in its summary, and suite.Run then
// reports the rule with an excerpt of its own.
const ginkgoExcerptLines = 12

// judgement is what a rule's check found.
type judgement struct {
	// problems are the violations found; none means the rule held.
	problems []string
	// note, when the rule held, is what the check observed, shown in the
	// certificate as information.
	note string
	// unplayed marks problems of the harness's play rather than of the
	// implementation (a budget that ran out): no guess at a real-world bug
	// follows them.
	unplayed bool
}

// registerRule registers one It that checks rule id with judge. Fixtures
// register their rules through a scenario (see scenario.rule).
func registerRule(id string, judge func() judgement) {
	r, err := fixtures.Lookup(id)
	if err != nil {
		panic(err) // a typo in the suite itself
	}
	// The check only judges what the container's BeforeAll gathered, which
	// has a budget of its own: the It needs no timeout (one would cap the
	// BeforeAll, which runs inside the container's first It).
	It(r.ID+": "+r.Doc, Label(r.Label(), "level:"+string(r.Level)), func() {
		j := judge()
		if j.note != "" {
			AddReportEntry(noteEntry, j.note)
		}
		if len(j.problems) > 0 {
			msg := failureMessage(r, j.problems, !j.unplayed)
			AddReportEntry(evidenceEntry, msg, ReportEntryVisibilityNever)
			Fail(excerpt(msg, ginkgoExcerptLines, ginkgoEvidence))
		}
	})
}

// failureMessage states a rule's violation: the rule, then every problem
// found, then, when guess is set, the real-world bug such a failure usually
// means. Each problem is a line starting with "- ", its further lines
// indented by two spaces, so that an excerpt can tell them apart (see
// [RuleResult.Excerpt]); the certificate keeps them all, each line
// bounded (see boundLines).
func failureMessage(r fixtures.Rule, problems []string, guess bool) string {
	msg := fmt.Sprintf("%s %s violated: %s", r.Level, r.ID, r.Doc)
	for _, p := range problems {
		msg += "\n" + problemStart + boundLines(strings.ReplaceAll(p, "\n", "\n"+problemCont), maxMessageLine)
	}
	if guess && r.Suspect != "" {
		msg += "\nThis usually means: " + r.Suspect + "."
	}
	return msg
}
