package suite

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	. "github.com/onsi/gomega"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/redact"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// Version is the suite's version, recorded in every certificate.
const Version = "0.1.0"

// setupTimeout bounds the suite's setup: finding or starting the
// database. The fixtures' scenarios have budgets of their own, which follow
// from the delivery timeout (see scenario).
const setupTimeout = 5 * time.Minute

// Register registers the suite's specs for adapter in the current Ginkgo
// suite, as one container named "harmless: " and the adapter's name. It
// adds no suite-level node (BeforeSuite, AfterSuite, ReportAfterSuite), so
// it embeds in any Ginkgo suite, one with its own BeforeSuite and
// AfterSuite included, and can be called for several adapters, each
// getting a container of its own. Call it at package level
// (var _ = suite.Register(...)) or inside a container of your own, before
// RunSpecs; it returns true so it can be used that way. The suite must
// have Gomega's fail handler registered (RegisterFailHandler(Fail)), as
// every Ginkgo suite has.
//
// The container provisions the adapter's database before its first spec
// that runs and releases it after its last spec, whether that ran or was
// left out by a filter; the specs of one container must run in one process
// (not spread by ginkgo -p). When the container ends, the certificate is
// built and passed to [WithCertificate]. A suite that never reaches the
// container's specs (its own BeforeSuite failed) builds no certificate.
// Ginkgo options ([WithGinkgoConfig]) are not Register's to set: the suite
// that calls RunSpecs sets them.
func Register(adapter adapters.Adapter, opts ...Option) bool {
	newState(context.Background(), adapter, opts).describe()
	return true
}

// state is one registration's run: its container's setup, specs and
// records, and the certificate they make.
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
	// ctx, when it is done, stops the run before its next spec (see
	// [Certify]); Register's never is.
	ctx context.Context

	// constructionDepth and reportDepth are how many containers enclose
	// the adapter's container's specs down to it, included, as Ginkgo's
	// tree construction and its spec reports count them.
	constructionDepth, reportDepth int
	// specs holds the record of every spec of the container, by key, and
	// order the same in registration order.
	specs map[string]*specRecord
	order []*specRecord

	setUpDone bool      // whether the setup ran (it runs once, for the first spec that runs)
	cancelled bool      // whether a spec was left out because ctx was done
	started   time.Time // when the container's first spec was reported starting
	reported  int       // how many of the container's specs Ginkgo has reported
	// hosted says Run or Certify runs the container's suite and hands the
	// certificate on itself, once RunSpecs returned; cert holds it then.
	hosted bool
	cert   *certificate.Certificate
	// subtests says RunWith hosts the run and reports each rule as a
	// subtest with its evidence: Ginkgo's report of a failed spec then
	// only names the rule, so that the evidence is printed once.
	subtests bool
	// crashes are the crashes of the implementation, by play and
	// instance, and redelivery what the plays needed of the broker, as
	// the plays closed.
	crashes    []certificate.Crash
	redelivery certificate.Redelivery
}

// newState prepares a registration of adapter.
func newState(ctx context.Context, adapter adapters.Adapter, opts []Option) *state {
	s := &state{adapter: adapter, cfg: newConfig(opts), secrets: redact.New(), ctx: ctx, specs: map[string]*specRecord{}}
	s.maskLogs()
	for _, dsn := range []string{s.cfg.provision.DSN, os.Getenv("HARMLESS_DSN"), os.Getenv("DATABASE_URL")} {
		s.addDSN(dsn)
	}
	return s
}

// describe adds the registration's container to the Ginkgo suite being
// constructed. The container is not Ordered: each fixture's play is an
// Ordered container of its own, with ContinueOnFailure, which Ginkgo
// allows only on an outermost Ordered container; and a fixture whose
// BeforeAll fails must not skip the other fixtures. The setup therefore
// runs in a BeforeEach, which does its work once, and the release after
// the container's last spec is reported (see specDone).
func (s *state) describe() {
	Describe("harmless: "+s.adapter.Name, func() {
		here := CurrentTreeConstructionNodeReport()
		s.constructionDepth = len(here.ContainerHierarchyTexts)
		// The construction report may count the tree's root, which has no
		// code location; a spec's report does not.
		s.reportDepth = 0
		for _, loc := range here.ContainerHierarchyLocations {
			if loc.FileName != "" {
				s.reportDepth++
			}
		}
		BeforeEach(s.start, NodeTimeout(setupTimeout))
		ReportBeforeEach(s.specStarts)
		ReportAfterEach(s.specDone, NodeTimeout(s.cleanupTimeout()))
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
		s.externalEffect()
	})
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

// start runs before each spec of the container that runs: the first time,
// it sets the run up; a run that could not start, or whose context is
// done, skips the spec.
func (s *state) start(ctx SpecContext) {
	if err := s.ctx.Err(); err != nil {
		s.cancelled = true
		s.unrun()
		Skip(fmt.Sprintf("the run was cancelled: %v", context.Cause(s.ctx)))
	}
	if s.setUpDone {
		if s.setupErr != nil {
			s.unrun()
			Skip(s.secrets.String(s.setupErr.Error()))
		}
		return
	}
	s.setUpDone = true
	// The setup ends with either context: Ginkgo's (a timeout, a signal)
	// or the caller's.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	s.setupErr = s.setUp(sctx)
	if s.setupErr != nil {
		s.unrun()
		Fail(s.secrets.String(s.setupErr.Error()))
	}
}

// unrun marks the spec that runs now as one that did not run: the run
// could not start, or was cancelled.
func (s *state) unrun() {
	if rec := s.record(CurrentSpecReport()); rec != nil {
		rec.unrun = true
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
		Provision:          s.cfg.provision,
		DeliveryTimeout:    s.cfg.deliveryTimeout,
		RedeliveryPatience: s.cfg.redeliveryPatience,
		Seed:               s.seed,
		Logf:               s.cfg.logf,
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

// specStarts notices the start of the container and the end of a fixture:
// specs run one fixture after another, so a spec of another fixture
// starting means the one before has finished.
func (s *state) specStarts(sr SpecReport) {
	rec := s.record(sr)
	if rec == nil {
		return
	}
	if s.started.IsZero() {
		s.started = time.Now()
	}
	if id := rec.rule.Fixture; id != s.fixture.id {
		s.fixtureDone()
		s.fixture.id = id
	}
}

// specDone keeps Ginkgo's report of a finished spec with its record,
// reports a spec that ran (not one a filter left out) through the
// configured logf, and collects it for its fixture's progress report.
// After the container's last spec it ends the registration's run.
func (s *state) specDone(ctx SpecContext, sr SpecReport) {
	rec := s.record(sr)
	if rec == nil || rec.report != nil {
		return
	}
	rec.report = &sr
	s.reported++
	if rec.ran() {
		s.cfg.logf("%-7s %s (%.1fs)", strings.ToUpper(sr.State.String()), rec.where+" / "+sr.LeafNodeText, sr.RunTime.Seconds())
	}
	if rec.rule.Fixture == s.fixture.id {
		s.fixture.specs = append(s.fixture.specs, rec)
		s.fixture.ran = s.fixture.ran || rec.ran()
	}
	if s.reported == len(s.order) {
		if err := s.finish(ctx); err != nil {
			Fail(s.secrets.String(err.Error()))
		}
	}
}

// finish ends the registration's run: it reports the last fixture,
// releases the database and builds the certificate, which it hands to
// WithCertificate unless Run or Certify hosts the run. It runs once, after
// the container's last spec, or when the host finds the suite ended
// without reaching it; the error is the release's.
func (s *state) finish(ctx context.Context) error {
	if s.cert != nil {
		return nil
	}
	s.fixtureDone()
	var err error
	if s.run != nil {
		cctx, cancel := s.cleanupContext(ctx)
		defer cancel()
		if err = s.run.Close(cctx); err != nil {
			err = fmt.Errorf("harmless: release the run's database: %w", err)
		}
	}
	cert := s.certificate()
	s.cert = &cert
	if !s.hosted {
		s.deliver()
	}
	return err
}

// deliver hands the certificate to WithCertificate.
func (s *state) deliver() {
	for _, fn := range s.cfg.onCertificate {
		fn(*s.cert)
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
	Rules []certificate.RuleResult
	// Started is when the fixture's first spec that ran started.
	Started time.Time
	// Duration is how long the fixture's specs ran, from the start of the
	// first to the end of the last.
	Duration time.Duration
}

// Count returns how many of the fixture's rules have verdict v.
func (p FixtureProgress) Count(v certificate.Verdict) int {
	return certificate.Certificate{Rules: p.Rules}.Count(v)
}

// fixtureRun collects the specs of the fixture that runs now.
type fixtureRun struct {
	id    string
	specs []*specRecord
	ran   bool // whether any of specs ran, rather than being filtered out
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
	for _, rec := range fx.specs {
		if !rec.ran() {
			continue
		}
		sr := rec.report
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

// ran reports whether a reported spec ran: Ginkgo skips the specs a filter
// leaves out (and all specs once the suite is interrupted) without a
// message, and a spec skipped at run time (not-supported, say) with one;
// the specs of a run that could not start, or was cancelled, did not run
// either.
func (rec *specRecord) ran() bool {
	sr := rec.report
	return sr != nil && !rec.unrun && !(sr.State == types.SpecStateSkipped && sr.Failure.Message == "") && sr.State != types.SpecStatePending
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
// database. [certificate.Certificate].Error carries it.
var ErrSetup = errors.New("harmless could not start")

func (c config) validate() error {
	switch {
	case c.contenders < 2:
		return fmt.Errorf("contenders must be at least 2, not %d", c.contenders)
	case c.plainRounds < 1 || c.overlapRounds < 1:
		return fmt.Errorf("rounds must be at least 1, not %d plain and %d overlapping", c.plainRounds, c.overlapRounds)
	case c.deliveryTimeout <= 0:
		return fmt.Errorf("delivery timeout must be positive, not %s", c.deliveryTimeout)
	case c.redeliveryPatience <= 0:
		return fmt.Errorf("the redelivery patience must be positive, not %s", c.redeliveryPatience)
	}
	return nil
}

// cleanupTimeout bounds the cleanup of a play, and of the run: closing the
// two instances of the implementation (each a guarded call) and the
// harness's own work of dropping what it created.
func (s *state) cleanupTimeout() time.Duration {
	return 2*harness.CallSlot(s.cfg.deliveryTimeout) + 2*time.Minute
}

// newPlay gives the current Ordered container a fresh play (its own schema
// and instances), named name in messages, closed after the container's
// last spec, when the crashes of its instances are kept for the
// certificate.
func (s *state) newPlay(ctx context.Context, name string) *harness.Play {
	GinkgoHelper()
	play, err := s.run.NewPlay(ctx, s.adapter)
	Expect(err).NotTo(HaveOccurred(), "create the play's environment")
	DeferCleanup(func(ctx SpecContext) {
		for _, n := range slices.Sorted(maps.Keys(play.CrashCounts())) {
			crashes := play.CrashesOf(n)
			s.crashes = append(s.crashes, certificate.Crash{Play: name, Instance: n, Count: len(crashes), First: crashes[0]})
		}
		r := play.Redelivery()
		s.redelivery.LongestWait = max(s.redelivery.LongestWait, r.LongestWait.Seconds())
		s.redelivery.GaveUp += r.GaveUp
		cctx, cancel := s.cleanupContext(ctx)
		defer cancel()
		Expect(play.Close(cctx)).To(Succeed(), "clean up the play's environment")
	}, NodeTimeout(s.cleanupTimeout()))
	return play
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

// ginkgoEvidence says, in Ginkgo's report, where the evidence left out of
// a failure's excerpt is.
const ginkgoEvidence = "all in the harmless certificate"

// ginkgoFailure is the message a rule's spec fails with in Ginkgo's
// report, msg being the rule's whole violation: an excerpt of it, or,
// when the run's subtests report the evidence (see state.subtests), only
// its first line, the rule, and where the evidence is.
func (s *state) ginkgoFailure(r fixtures.Rule, msg string) string {
	if s.subtests {
		line, _, _ := strings.Cut(msg, "\n")
		return line + "\nThe evidence is in the failure of the go test subtest for " + r.ID + ", below."
	}
	return certificate.RuleResult{Message: msg}.Excerpt(ginkgoExcerptLines, ginkgoEvidence)
}

// ginkgoExcerptLines bounds the excerpt a spec fails with: Ginkgo prints
// it where the spec fails (Run's suite prints only the rule there; see
// ginkgoFailure).
const ginkgoExcerptLines = 12

// judgement is what a rule's check found: a pass (the zero judgement, or
// one with only a note), a failure (problems), or a rule that cannot be
// judged here (unsupported).
type judgement struct {
	// unsupported, when set, says why the rule cannot be judged in this
	// play: its verdict there is not-supported, or not-applicable when
	// inapplicable is set, whatever else the judgement holds.
	unsupported  string
	inapplicable bool
	// problems are the violations found; none means the rule held.
	problems []string
	// note, when the rule held, is what the check observed, shown in the
	// certificate as information.
	note string
	// unplayed marks problems of the harness's play rather than of the
	// implementation (a budget that ran out): no guess at a real-world bug
	// follows them.
	unplayed bool
	// cause, when set, is the cause of the problems as the history shows
	// it, ruling out the alternatives; it replaces the rule's usual
	// suspect, which is only a guess.
	cause string
	// hint, when set, is a guess at the cause that fits the evidence
	// better than the rule's usual suspect, which it replaces; it is
	// worded as a guess.
	hint string
	// lead, when set, is what the evidence of the whole play shows before
	// any rule's judgement (a process that crashed, deliveries none of
	// which was acknowledged): it is stated first, and then no usual
	// suspect is guessed at.
	lead string
	// leadless marks problems that already say what a lead would (the
	// rule that reports the crashes themselves).
	leadless bool
}

// failureMessage states a rule's violation: the rule, then what the play's
// evidence shows first when j has a lead, then every problem found, then
// the cause the history shows when j has one, else a hint that fits the
// evidence, else, unless the problems are the harness's own or the lead
// already says what happened, the real-world bug such a failure usually
// means. Each problem is a line starting with "- ", its further lines
// indented by two spaces, so that an excerpt can tell them apart (see
// [certificate.RuleResult.Excerpt]); the certificate keeps them all, each
// line bounded (see [certificate.Problem]).
func failureMessage(r fixtures.Rule, j judgement) string {
	msg := failureBody(r, j)
	if h := hintLine(r, []judgement{j}, ""); h != "" {
		msg += "\n" + h
	}
	return msg
}

// failureBody is a rule's violation in one play, without the guess at its
// cause: the rule, the play's lead, the problems and the cause the
// history shows, if it shows one. A rule judged in several plays gets one
// guess for all of them (see hintLine).
func failureBody(r fixtures.Rule, j judgement) string {
	msg := fmt.Sprintf("%s %s violated: %s", r.Level, r.ID, r.Doc)
	if j.lead != "" {
		msg += "\nFirst, what the play shows: " + j.lead
	}
	for _, p := range j.problems {
		msg += "\n" + certificate.Problem(p)
	}
	if j.cause != "" {
		msg += "\nThe deliveries show the cause: " + j.cause + "."
	}
	return msg
}

// hintLine is the guess at the cause of a rule's violations in the plays
// that judged it failed: "" when each shows its cause, or when none can be
// guessed at (the harness's own trouble, or a lead that already says what
// happened); the hints the checks chose from their evidence when they
// chose any; else a hint from what the plays showed together (pattern,
// see variantHint); else the rule's usual suspect.
func hintLine(r fixtures.Rule, failed []judgement, pattern string) string {
	var hints []string
	guessable := false
	for _, j := range failed {
		switch {
		case j.cause != "":
		case j.hint != "":
			if !slices.Contains(hints, j.hint) {
				hints = append(hints, j.hint)
			}
		case !j.unplayed && j.lead == "":
			guessable = true
		}
	}
	switch {
	case len(hints) > 0:
		return "This may mean: " + strings.Join(hints, "; or ") + "."
	case !guessable:
		return ""
	case pattern != "":
		return "This may mean: " + pattern + "."
	case r.Suspect != "":
		return "This usually means: " + r.Suspect + "."
	}
	return ""
}
