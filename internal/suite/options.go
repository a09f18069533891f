package suite

import (
	"slices"
	"time"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// Option configures the suite.
type Option func(*config)

type config struct {
	provision       provision.Options
	deliveryTimeout time.Duration
	// redeliveryPatience is the broker's (see WithRedeliveryPatience).
	redeliveryPatience time.Duration
	// concurrent is the concurrent-delivery fixture's tuning, which its
	// file defines.
	concurrent    concurrentTuning
	logf          func(format string, args ...any)
	onCertificate []func(certificate.Certificate)
	onFixture     []func(FixtureProgress)
	onSecret      []func(string)
	seed          uint64
	seedSet       bool
	protocol      *certificate.Protocol
	// budget, when set, replaces every play's budget: the harness's
	// own tests use it to make a budget run out.
	budget time.Duration
	// rules, when not nil, are the ids of the only rules the run plays
	// (see WithRules).
	rules []string
	// playsAtOnce, when set, bounds the plays Certify runs side by side
	// (see WithPlaysAtOnce).
	playsAtOnce int
}

func newConfig(opts []Option) config {
	c := config{
		deliveryTimeout:    DefaultDeliveryTimeout,
		redeliveryPatience: harness.DefaultRedeliveryPatience,
		concurrent:         defaultConcurrentTuning(),
	}
	for _, o := range opts {
		o(&c)
	}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	return c
}

// DefaultOverlapSleep is how long a database-side sleep holds a delivery
// past its claim in the plays that make deliveries overlap: the
// concurrent-delivery fixture's overlapping rounds and the
// conflicting-payload fixture's copy in flight.
const DefaultOverlapSleep = 250 * time.Millisecond

// WithPlaysAtOnce bounds how many plays [Certify] runs side by side; 1
// runs them one after another. The default is as many as the machine was
// measured to gain from, fewer when the server has few free connections.
// Plays that crash, restart or fail over the server always run alone.
// Register's specs run one after another whatever it says: Ginkgo runs
// them.
func WithPlaysAtOnce(n int) Option { return func(c *config) { c.playsAtOnce = n } }

// WithDSN runs the suite against the database at dsn instead of provisioning
// one. See package internal/provision for the order of choice without it.
func WithDSN(dsn string) Option { return func(c *config) { c.provision.DSN = dsn } }

// WithImage sets the container image used when the suite starts PostgreSQL
// in a container (see WithContainers).
func WithImage(image string) Option { return func(c *config) { c.provision.Image = image } }

// WithProvisioning forces one way of getting a database: "dsn", "container"
// (which needs WithContainers), "cluster" or "ha" (a replicated formation,
// where the failover fixture plays; see docs/failover.md).
func WithProvisioning(kind string) Option {
	return func(c *config) { c.provision.Only = provision.Kind(kind) }
}

// DefaultDeliveryTimeout bounds one delivery unless [WithDeliveryTimeout]
// says otherwise.
const DefaultDeliveryTimeout = harness.DefaultDeliveryTimeout

// WithDeliveryTimeout bounds one delivery; a delivery that takes longer is
// recorded as hung.
func WithDeliveryTimeout(d time.Duration) Option { return func(c *config) { c.deliveryTimeout = d } }

// DefaultRedeliveryPatience is the broker's patience unless
// [WithRedeliveryPatience] says otherwise.
const DefaultRedeliveryPatience = harness.DefaultRedeliveryPatience

// WithRedeliveryPatience sets the patience of the broker the suite plays.
// It models an at-least-once broker's redelivery of what a consumer does
// not acknowledge: an unacknowledged delivery is handed out again after a
// pause that grows from 10 ms to 1 s, jittered, for as long as the
// implementation makes progress; once a whole patience passes in which
// events of a play await redelivery and none of the play's deliveries is
// acknowledged or refused, the broker gives up on them (as a dead-letter
// limit would) and the rules judge what happened. Raise it for an
// implementation that leans on the broker for longer: a lease, a visibility
// timeout or a restart that takes more than a few seconds. docs/broker.md
// tells the whole model.
func WithRedeliveryPatience(d time.Duration) Option {
	return func(c *config) { c.redeliveryPatience = d }
}

// WithLogf sends the suite's progress lines to logf.
func WithLogf(logf func(format string, args ...any)) Option {
	return func(c *config) { c.logf = logf; c.provision.Logf = logf }
}

// WithSecrets calls fn with each secret the suite learns, as it learns it:
// the password of the DSN it was given (WithDSN, $HARMLESS_DSN,
// $DATABASE_URL, and $PGPASSWORD or a password file when the DSN has none),
// and of the DSN of the server it provisioned. The suite masks them in what
// it reports (the certificate, its log lines, its failure messages); fn
// lets a caller mask them in output of its own, such as Ginkgo's report.
// Secrets are plain strings; a short one (under 4 bytes) is passed on but
// not masked, since masking it would garble every report.
func WithSecrets(fn func(secret string)) Option {
	return func(c *config) { c.onSecret = append(c.onSecret, fn) }
}

// WithCertificate calls fn with the certificate once the suite has run.
func WithCertificate(fn func(certificate.Certificate)) Option {
	return func(c *config) { c.onCertificate = append(c.onCertificate, fn) }
}

// WithFixtureProgress calls fn once for each fixture that ran, when it
// finishes: when the first spec of the next fixture starts, or at the end
// of the suite. A fixture none of whose specs ran (all filtered out, say)
// is not reported.
func WithFixtureProgress(fn func(FixtureProgress)) Option {
	return func(c *config) { c.onFixture = append(c.onFixture, fn) }
}

// WithSeed sets the seed of the suite's random choices, recorded in the
// certificate so that a run can be repeated: the order in which the
// concurrent-delivery fixture starts its contenders and which of the two
// instances each one is delivered to. Without it the suite picks one at
// random; under [Register], Ginkgo's random seed (GinkgoRandomSeed, set
// with -ginkgo.seed).
func WithSeed(seed uint64) Option {
	return func(c *config) { c.seed, c.seedSet = seed, true }
}

// WithProtocol records in the certificate how the harness drove an
// implementation that runs in another process. In-process adapters leave
// it out, and so does their certificate.
func WithProtocol(p certificate.Protocol) Option {
	return func(c *config) { c.protocol = &p }
}

// WithRules makes [Certify] and [RunWith] play only the rules ids, and
// the plays that judge them; the other rules are skipped in the
// certificate. [Register] ignores it: Ginkgo's label filters select there.
func WithRules(ids []string) Option {
	return func(c *config) { c.rules = slices.Clone(ids) }
}

// WithFixtures makes [Certify] and [RunWith] play only the rules of the
// fixtures ids (see [WithRules]).
func WithFixtures(ids ...string) Option {
	return func(c *config) {
		c.rules = []string{}
		for _, r := range fixtures.Rules() {
			if slices.Contains(ids, r.Fixture) {
				c.rules = append(c.rules, r.ID)
			}
		}
	}
}
