// Package suite is the harmless conformance suite: it plays the fixtures
// of package fixtures against any implementation behind an
// [adapters.Adapter], as Go subtests, as Ginkgo v2 specs or from a
// program, and gives a certificate that says which rules held. The
// certificate's model and its reports are package [certificate]
// (suite/certificate), which a program that only reads or renders
// certificates can import without linking Ginkgo or the harness.
//
// There are three ways to run it, each giving every adapter a certificate
// of its own, from a run (and a database) of its own.
//
// From your own tests, run the whole suite with one call, for one adapter
// or several; [RunWith] takes options, which apply to every adapter:
//
//	func TestConformance(t *testing.T) {
//		suite.Run(t, myAdapter, myOtherAdapter)
//	}
//
// To embed the specs in an existing Ginkgo suite, one with its own
// BeforeSuite and AfterSuite included, call [Register] at package level,
// once per adapter, and let your own RunSpecs run them. It adds only a
// container per adapter, never a suite-level node:
//
//	var _ = suite.Register(myAdapter, suite.WithCertificate(save))
//
// From a program, without a *testing.T, call [Certify], as the harmless
// command does:
//
//	cert, err := suite.Certify(ctx, myAdapter)
//
// Run, RunWith and Certify need no test framework: they may be called any
// number of times in one process, concurrently too, and in a test binary
// that has Ginkgo specs of its own. Register makes Ginkgo specs that run
// the same plays and judges.
//
// This package is the suite's public face, kept to what an implementer
// needs; the suite itself is internal (docs/architecture.md), so that it
// can change without breaking a caller.
package suite

import (
	"context"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	impl "github.com/harmless-dev/harmless/internal/suite"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// ErrSetup marks a run that could not start: a bad adapter or option, or
// no database. [certificate.Certificate].Error carries it.
var ErrSetup = impl.ErrSetup

// Option changes how the suite runs.
type Option struct{ apply impl.Option }

func unwrap(opts []Option) []impl.Option {
	out := make([]impl.Option, 0, len(opts))
	for _, o := range opts {
		if o.apply != nil {
			out = append(out, o.apply)
		}
	}
	return out
}

// Run certifies each of adapters from a Go test, with the default options,
// and reports each rule's verdict through t (see [RunWith]).
func Run(t *testing.T, adapters ...adapters.Adapter) {
	t.Helper()
	impl.RunWith(t, nil, adapters...)
}

// RunWith certifies each of adapters from a Go test, with opts applied to
// every one of them, each with its own database and certificate. It
// reports each rule's verdict through t, as a subtest named after the rule
// (below a subtest named after the adapter when there are several): a
// rule that failed fails its subtest with its message; a rule that was
// skipped (not run because the run stopped) fails it too; a rule that
// could not run here (not-supported) is skipped, with the reason. go
// test's -run (and -skip) select rules: the suite plays only the rules
// whose subtests they let run (-run TestX/double-delivery, one fixture;
// -run TestX/double-delivery/one-effect, one rule), and fails t when they
// select none. When t's context ends (the test's deadline), the run stops
// before its next play.
func RunWith(t *testing.T, opts []Option, adapters ...adapters.Adapter) {
	t.Helper()
	impl.RunWith(t, unwrap(opts), adapters...)
}

// Register registers the suite's specs for adapter in the current Ginkgo
// suite, as one container named "harmless: " and the adapter's name. It
// adds no suite-level node, so it embeds in any Ginkgo suite and can be
// called for several adapters. Call it at package level
// (var _ = suite.Register(...)) or inside a container of your own, before
// RunSpecs; it returns true so it can be used that way. The suite must
// have Gomega's fail handler registered (RegisterFailHandler(Fail)). The
// container is Ordered and Serial, so its specs run one after another in
// one process; each rule is one It, labelled "fixture:ID", "rule:ID" and
// "level:LEVEL", that asserts the rule's judgement. When they end, the
// certificate is passed to [WithCertificate].
func Register(adapter adapters.Adapter, opts ...Option) bool {
	return impl.Register(adapter, unwrap(opts)...)
}

// Certify certifies adapter without a Go test, as the harmless command
// does, and returns its certificate. The error says the run could not
// start (it wraps [ErrSetup], and the certificate's Error says the same),
// was cancelled (it wraps the context's cause), or could not release its
// database; the certificate is valid either way. When ctx is done, the
// play that runs is stopped, every cleanup runs, the rest is skipped and
// the certificate says the run was interrupted. Certify handles no signal:
// to stop it on SIGINT or SIGTERM, cancel ctx (see signal.NotifyContext).
func Certify(ctx context.Context, adapter adapters.Adapter, opts ...Option) (certificate.Certificate, error) {
	return impl.Certify(ctx, adapter, unwrap(opts)...)
}

// WithDSN runs the suite against the database at dsn instead of
// provisioning one. Without it the suite takes $HARMLESS_DSN, else
// $DATABASE_URL, else a container (see [WithContainers]), else a throwaway
// cluster from local server binaries (docs/database.md).
func WithDSN(dsn string) Option { return Option{impl.WithDSN(dsn)} }

// WithProvisioning forces one way of getting a database: "dsn",
// "container" (which needs [WithContainers]) or "cluster".
func WithProvisioning(kind string) Option { return Option{impl.WithProvisioning(kind)} }

// ContainerServer is a throwaway PostgreSQL server in a container, such as
// the *Server that package github.com/harmless-dev/harmless/suite/docker
// starts: the suite owns it, crashes and restarts it for the
// crash-recovery fixture, and removes it at the end.
type ContainerServer interface {
	// DSN is a superuser connection string with the password; it changes
	// on Restart.
	DSN() string
	// Secrets are the passwords DSN carries; the suite masks them.
	Secrets() []string
	// Version is the server's server_version.
	Version() string
	// Crash kills the container without a clean shutdown.
	Crash(ctx context.Context) error
	// Restart starts the crashed container again, after crash recovery.
	Restart(ctx context.Context) error
	// Close removes the container.
	Close(ctx context.Context) error
	// String describes the container, without credentials.
	String() string
}

// WithContainers lets the suite start PostgreSQL in a throwaway container
// when no DSN is given: pass docker.Start from package
// github.com/harmless-dev/harmless/suite/docker.
//
//	suite.RunWith(t, []suite.Option{suite.WithContainers(docker.Start)}, adapter)
//
// The suite does not link the container machinery (testcontainers-go, the
// moby client) itself, so that a program that never asks for a container
// does not carry it. The image is $HARMLESS_IMAGE, else postgres:17-alpine.
func WithContainers[S ContainerServer](start func(ctx context.Context, image string, logf func(format string, args ...any)) (S, error)) Option {
	return Option{impl.WithContainers(start)}
}

// WithLogf sends the suite's progress lines to logf.
func WithLogf(logf func(format string, args ...any)) Option { return Option{impl.WithLogf(logf)} }

// WithCertificate calls fn with the certificate once the suite has run.
func WithCertificate(fn func(certificate.Certificate)) Option {
	return Option{impl.WithCertificate(fn)}
}

// WithSeed sets the seed of the suite's random choices, recorded in the
// certificate so that a run can be repeated. Without it the suite picks
// one at random; under [Register], it uses Ginkgo's random seed
// (-ginkgo.seed).
func WithSeed(seed uint64) Option { return Option{impl.WithSeed(seed)} }

// WithDeliveryTimeout bounds one delivery (default 15s); a delivery that
// takes longer is recorded as hung. Every fixture's time budget follows
// from it.
func WithDeliveryTimeout(d time.Duration) Option { return Option{impl.WithDeliveryTimeout(d)} }

// WithRedeliveryPatience sets the patience of the broker the suite plays
// (default 10s): an unacknowledged delivery is handed out again after a
// pause that grows from 10 ms to 1 s, for as long as the implementation
// makes progress; once a whole patience passes in which none of a play's
// deliveries is acknowledged or refused, the broker gives up on them. Raise
// it for an implementation that leans on the broker for longer: a lease, a
// visibility timeout or a slow restart. docs/broker.md tells the whole
// model.
func WithRedeliveryPatience(d time.Duration) Option {
	return Option{impl.WithRedeliveryPatience(d)}
}
