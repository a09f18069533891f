package suite

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/failuremsg"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/redact"
	"github.com/harmless-dev/harmless/internal/version"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// Version is the suite's version, recorded in every certificate.
const Version = version.Harness

// setupTimeout bounds the suite's setup: finding or starting the
// database. The fixtures' plays have budgets of their own, which follow
// from the delivery timeout (see playNode).
const setupTimeout = 5 * time.Minute

// state is one registration's run: its container's setup, specs and
// records, and the certificate they make.
type state struct {
	adapter  adapters.Adapter
	cfg      config
	run      *harness.Run
	database string
	kind     string
	setupErr error
	// reachErr, set as the run finishes, says that no fault on the wire
	// could reach the implementation (see unreachable).
	reachErr error
	seed     uint64
	// secrets are masked in everything the suite reports: its log lines,
	// failure messages and the certificate.
	secrets *redact.Redactor
	// ctx, when it is done, stops the run before its next spec (see
	// [Certify]); Register's never is.
	ctx context.Context

	// root is the tree of the registration's fixtures (see tree.go), and
	// building the node being described while it is built. order holds
	// the record of every spec, in the order described.
	root, building *node
	order          []*specRecord

	mu sync.Mutex
	// crashShare is where the crash-recovery plays running side by side
	// meet to crash the server once for all of them.
	crashShare sharedCrash

	cancelled   bool      // whether the run stopped because ctx was done
	interrupted string    // why a hosting test framework interrupted the run, if it did
	started     time.Time // when the run started
	// cert is the certificate, once the run has finished.
	cert *certificate.Certificate
	// closeErrs are the failures to release a play.
	closeErrs []error
	// crashes are the crashes of the implementation, by play and
	// instance, and redelivery what the plays needed of the broker, as
	// the plays closed.
	crashes    []certificate.Crash
	redelivery certificate.Redelivery
	// reports are what the fixtures saw beside their verdicts (see
	// certificate.Report), as their plays reported it.
	reports []certificate.Report
}

// newState prepares a registration of adapter.
func newState(ctx context.Context, adapter adapters.Adapter, opts []Option) *state {
	s := &state{adapter: adapter, cfg: newConfig(opts), secrets: redact.New(), ctx: ctx}
	s.maskLogs()
	for _, dsn := range []string{s.cfg.provision.DSN, os.Getenv("HARMLESS_DSN"), os.Getenv("DATABASE_URL")} {
		s.addDSN(dsn)
	}
	s.build()
	return s
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

// setUp validates the adapter and the options and starts the run, within
// setupTimeout.
func (s *state) setUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	s.seed = s.cfg.seed
	if !s.cfg.seedSet {
		s.seed = rand.Uint64()
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

// finish ends the registration's run: it releases the database and
// builds the certificate, which it hands to WithCertificate. It runs once;
// the error is the release's, and that of any play that could not be
// cleaned up.
func (s *state) finish(ctx context.Context) error {
	if s.cert != nil {
		return nil
	}
	errs := s.closeErrs
	if s.run != nil {
		if !s.cancelled && s.interrupted == "" {
			s.reachErr = unreachable(s.run)
		}
		cctx, cancel := s.cleanupContext(ctx)
		defer cancel()
		if err := s.run.Close(cctx); err != nil {
			errs = append(errs, fmt.Errorf("harmless: release the run's database: %w", err))
		}
	}
	cert := s.certificate()
	s.cert = &cert
	s.deliver()
	if s.reachErr != nil {
		errs = append(errs, s.reachErr)
	}
	return errors.Join(errs...)
}

// deliver hands the certificate to WithCertificate.
func (s *state) deliver() {
	for _, fn := range s.cfg.onCertificate {
		fn(*s.cert)
	}
}

// report keeps what a fixture saw beside its verdicts for the
// certificate (see certificate.Report).
func (s *state) report(r certificate.Report) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reports = append(s.reports, r)
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

// fixtureDone reports the fixture id, once its plays have run, if any
// of its specs ran.
func (s *state) fixtureDone(id string) {
	if len(s.cfg.onFixture) == 0 {
		return
	}
	var specs []*specRecord
	ran := false
	for _, rec := range s.order {
		if rec.rule.Fixture == id {
			specs = append(specs, rec)
			ran = ran || rec.ran()
		}
	}
	if !ran {
		return
	}
	var rules []fixtures.Rule
	for _, r := range fixtures.Rules() {
		if r.Fixture == id {
			rules = append(rules, r)
		}
	}
	p := FixtureProgress{Fixture: id}
	for _, r := range ruleResults(rules, specs) {
		if r.Message != noSpecRan {
			p.Rules = append(p.Rules, r)
		}
	}
	var end time.Time
	for _, rec := range specs {
		if !rec.ran() {
			continue
		}
		if p.Started.IsZero() || rec.started.Before(p.Started) {
			p.Started = rec.started
		}
		if rec.ended.After(end) {
			end = rec.ended
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
	if err := c.concurrent.validate(); err != nil {
		return err
	}
	switch {
	case c.deliveryTimeout <= 0:
		return fmt.Errorf("delivery timeout must be positive, not %s", c.deliveryTimeout)
	case c.redeliveryPatience <= 0:
		return fmt.Errorf("the redelivery patience must be positive, not %s", c.redeliveryPatience)
	case c.playsAtOnce < 0:
		return fmt.Errorf("plays at once must be at least 1, not %d", c.playsAtOnce)
	}
	return nil
}

// cleanupTimeout bounds the cleanup of a play, and of the run: closing the
// two instances of the implementation (each a guarded call) and the
// harness's own work of dropping what it created.
func (s *state) cleanupTimeout() time.Duration {
	return 2*harness.CallSlot(s.cfg.deliveryTimeout) + 2*time.Minute
}

// cleanupContext is the context of a cleanup: it ends after the cleanup's
// own timeout, but not with ctx. An interrupted run (SIGINT, SIGTERM)
// cancels the context a test framework gives its cleanup nodes at once,
// and the cleanup must still remove what the run created.
func (s *state) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.cleanupTimeout())
}

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
// line bounded (see [failuremsg.Problem]).
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
		msg += "\n" + failuremsg.Problem(p)
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
