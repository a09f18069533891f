package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/exec"
	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/docgen"
	"github.com/harmless-dev/harmless/internal/provenance"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/internal/redact"
	"github.com/harmless-dev/harmless/internal/suite"
	"github.com/harmless-dev/harmless/suite/certificate"
	"github.com/harmless-dev/harmless/suite/docker"
)

// Exit codes.
const (
	exitCertified    = 0
	exitNotCertified = 1
	exitUsage        = 2
	exitPartial      = 3
)

// exitCode is the exit code of a certificate's status.
func exitCode(st certificate.Status) int {
	switch st {
	case certificate.StatusCertified:
		return exitCertified
	case certificate.StatusPartial:
		return exitPartial
	}
	return exitNotCertified
}

// usage is the command's help. Its synopses are the commands' own, and
// README's "Using the command" lists the same commands and flags
// (TestUsageMatchesTheReadme).
const usage = `harmless certifies that an implementation makes duplicate event delivery harmless.

Usage:
  ` + certifySynopsis + `
      certify a built-in adapter, or a program in any language that speaks the exec
      protocol: run the suite, print a verdict per rule
  ` + soakSynopsis + `
      run a long, faulty, concurrent load and check its history
  ` + listSynopsis + `
      print the known adapters and rules; with an implementation, say which rules
      a certify run will run, and why the others cannot
  harmless matrix
      print the verdict matrix: which fixture each built-in adapter must pass or fail
  harmless version
      print the suite version (also: harmless --version)
  harmless help [COMMAND]
      print this, or a command's help with all its flags (also: harmless COMMAND -h)

Exit codes: 0 certified (every MUST rule ran and passed), 1 not certified (a rule
failed), 2 usage or environment error, 3 partial (no rule failed, but some MUST
rules did not run; the last lines say which and why), 130 or 143 interrupted by
SIGINT or SIGTERM (everything the run created is removed first). soak: 0 clean,
1 anomalies found, 2 usage or environment error, 4 no delivery acknowledged for
--no-ack-timeout (the implementation is dead or cannot work here).
`

// run is the whole command; main only exits with its result.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "certify":
		return certify(args[1:], stdout, stderr)
	case "soak":
		return soakCommand(args[1:], stdout, stderr)
	case "list":
		// list quotes no DSN, but an error about its flags may.
		m := maskArgs("harmless list", stdout, stderr, args[1:])
		defer m.flush()
		return list(args[1:], m.stdout, m.stderr)
	case "matrix":
		return noFlags("harmless matrix", "harmless matrix", args[1:], stdout, stderr, func() {
			fmt.Fprint(stdout, docgen.MatrixTable())
		})
	case "version", "--version", "-version":
		return noFlags("harmless version", "harmless version  (or harmless --version)", args[1:], stdout, stderr, func() {
			fmt.Fprintf(stdout, "harmless %s (commit %s)\n", suite.Version, provenance.Harness().Commit)
		})
	case "help":
		return help(args[1:], stdout, stderr)
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitCertified
	default:
		fmt.Fprintf(stderr, "harmless: unknown command %q%s\n\n%s", args[0], didYouMean(args[0], commands, "%s"), usage)
		return exitUsage
	}
}

// commands are the commands run knows, for help and its did-you-mean.
var commands = []string{"certify", "soak", "list", "matrix", "version", "help"}

// help prints the usage, or with a command's name, that command's help.
func help(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		fmt.Fprint(stdout, usage)
		return exitCertified
	case len(args) > 1:
		fmt.Fprintf(stderr, "harmless help: unexpected arguments: %s (usage: harmless help [COMMAND])\n", strings.Join(args[1:], " "))
		return exitUsage
	case args[0] == "help" || args[0] == "-h" || args[0] == "-help" || args[0] == "--help":
		fmt.Fprintf(stdout, "Usage:\n  harmless help [COMMAND]\n\nprints the usage, or a command's help: one of %s\n", strings.Join(commands, ", "))
		return exitCertified
	case !slices.Contains(commands, args[0]):
		fmt.Fprintf(stderr, "harmless help: unknown command %q%s (known: %s)\n", args[0], didYouMean(args[0], commands, "%s"), strings.Join(commands, ", "))
		return exitUsage
	}
	return run([]string{args[0], "-h"}, stdout, stderr)
}

// noFlags runs a command that takes no flags nor arguments: do, or its
// help for -h, or a usage error.
func noFlags(name, synopsis string, args []string, stdout, stderr io.Writer, do func()) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	setUsage(fs, synopsis)
	err := parseFlags(fs, args, stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitCertified
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitUsage
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "%s: unexpected arguments: %s\n", name, strings.Join(fs.Args(), " "))
		return exitUsage
	}
	do()
	return exitCertified
}

type certifyFlags struct {
	adapter         string
	exec            string
	dsn             string
	dsnSet          bool // whether --dsn was given, empty or not
	image           string
	provision       string
	labelFilter     string
	fixtureList     string // --fixture, comma-separated
	ruleList        string // --rule, comma-separated
	selection       selection
	jsonPath        string
	junitPath       string
	markdownPath    string
	contenders      int
	rounds          int
	overlapRounds   int
	deliveryTimeout time.Duration
	// patience is the broker's redelivery patience.
	patience time.Duration
	seed     uint64
	seedSet  bool // whether --seed was given
	// repeat is how many runs --repeat asks for, each with a fresh seed.
	repeat  int
	verbose bool
	quiet   bool
}

// outputs are the report files certify writes, to check before it runs.
func (f certifyFlags) outputs(getenv func(string) string) []outputPath {
	return []outputPath{
		{"--json", f.jsonPath},
		{"--junit", f.junitPath},
		{"--markdown", f.markdownPath},
		{"$" + stepSummaryEnv, getenv(stepSummaryEnv)},
	}
}

// addDatabaseFlags adds the flags that choose the database, which certify
// and soak share.
func addDatabaseFlags(fs *flag.FlagSet, f *certifyFlags) {
	fs.Var(dsnValue{&f.dsn, &f.dsnSet}, "dsn", "PostgreSQL connection string (default: $HARMLESS_DSN, else $DATABASE_URL, else a container, else a throwaway local cluster); an empty one, given or set, is refused")
	fs.StringVar(&f.image, "image", "", "container image when starting PostgreSQL in a container, with --provision container only (default: $HARMLESS_IMAGE, else postgres:17-alpine)")
	fs.StringVar(&f.provision, "provision", "", "force one way to get a database: dsn, container, cluster or ha (a replicated formation, for the failover fixture and the soak's failover nemesis); container, cluster and ha start a server of their own, and refuse --dsn")
}

// certifySynopsis is certify's line of the usage.
const certifySynopsis = `harmless certify (--adapter NAME | --exec COMMAND) [--dsn DSN | --provision dsn|container|cluster|ha] [--fixture ID[,ID]]
                   [--label-filter EXPR] [--rule ID[,ID]] [--seed N] [--repeat N] [--redelivery-patience 10s] [--json FILE] [--junit FILE] [--markdown FILE] [-q | -v]`

// certifyFlagSet is certify's flags, parsed into f.
func certifyFlagSet(f *certifyFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("harmless certify", flag.ContinueOnError)
	setUsage(fs, certifySynopsis)
	fs.StringVar(&f.adapter, "adapter", "", "built-in adapter to certify (see 'harmless list')")
	fs.StringVar(&f.exec, "exec", "", "certify the program this shell command runs, over the exec protocol (docs/protocol.md)")
	addDatabaseFlags(fs, f)
	fs.StringVar(&f.labelFilter, "label-filter", "", "run only specs matching this Ginkgo label filter, e.g. 'fixture:double-delivery' (labels: fixture:ID, rule:ID, level:MUST, level:SHOULD)")
	fs.StringVar(&f.fixtureList, "fixture", "", "run only these fixtures, comma-separated ids (see 'harmless list'); with --rule, the rules of either")
	fs.StringVar(&f.ruleList, "rule", "", "run only these rules, comma-separated ids (see 'harmless list'); with --fixture, the rules of either")
	fs.StringVar(&f.jsonPath, "json", "", "write the certificate as JSON to this file")
	fs.StringVar(&f.junitPath, "junit", "", "write a JUnit XML report (one testcase per rule) to this file")
	fs.StringVar(&f.markdownPath, "markdown", "", "write a Markdown summary to this file (also appended to $"+stepSummaryEnv+" when that is set)")
	fs.IntVar(&f.contenders, "contenders", suite.DefaultContenders, "concurrent deliveries per concurrent-delivery round")
	fs.IntVar(&f.rounds, "rounds", suite.DefaultPlainRounds, "plain concurrent-delivery rounds")
	fs.IntVar(&f.overlapRounds, "overlap-rounds", suite.DefaultOverlapRounds, "concurrent-delivery rounds with a database-side sleep after the claim")
	fs.DurationVar(&f.deliveryTimeout, "delivery-timeout", suite.DefaultDeliveryTimeout, "how long one delivery may take before it counts as hung; every fixture's time budget follows from it")
	fs.DurationVar(&f.patience, "redelivery-patience", suite.DefaultRedeliveryPatience, "how long the broker harmless plays goes on redelivering, after pauses growing from 10ms to 1s, while none of a play's deliveries is acknowledged; it models a real broker's redelivery (SQS's visibility timeout, RabbitMQ's requeue, Kafka's retries): raise it for an implementation that leans on the broker for longer (a lease, a slow restart)")
	addSeedFlag(fs, f, "seed of the run's random choices, to repeat a run (default: random; the certificate records it)")
	fs.IntVar(&f.repeat, "repeat", 1, "run the selected rules up to this many times, each with a fresh seed, to find a rare race: stop at the first run with a failed rule and print the --seed that replays it")
	fs.BoolVar(&f.verbose, "v", false, "verbose: a line per rule judged and the suite's log on stderr")
	fs.BoolVar(&f.quiet, "quiet", false, "print only the final verdict lines and errors")
	fs.BoolVar(&f.quiet, "q", false, "short for --quiet")
	return fs
}

// parseCertify parses certify's args; help goes to stdout.
func parseCertify(args []string, stdout io.Writer) (certifyFlags, error) {
	var f certifyFlags
	fs := certifyFlagSet(&f)
	if err := parseFlags(fs, args, stdout); err != nil {
		return f, err
	}
	switch {
	case fs.NArg() > 0:
		return f, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	case f.verbose && f.quiet:
		return f, errors.New("-v and --quiet contradict each other: choose one")
	case f.patience <= 0:
		return f, fmt.Errorf("--redelivery-patience must be positive, not %s", f.patience)
	case f.deliveryTimeout <= 0:
		return f, fmt.Errorf("--delivery-timeout must be positive, not %s", f.deliveryTimeout)
	case f.contenders < 2:
		return f, fmt.Errorf("--contenders must be at least 2 (a race needs two), not %d", f.contenders)
	case f.rounds < 1:
		return f, fmt.Errorf("--rounds must be at least 1, not %d", f.rounds)
	case f.overlapRounds < 1:
		return f, fmt.Errorf("--overlap-rounds must be at least 1, not %d", f.overlapRounds)
	case f.repeat < 1:
		return f, fmt.Errorf("--repeat must be at least 1, not %d", f.repeat)
	case f.repeat > 1 && f.seedSet:
		return f, errors.New("--repeat draws a fresh seed for each run: to replay one run, give its --seed without --repeat")
	}
	if err := checkImplementationFlags(f); err != nil {
		return f, err
	}
	f.selection.labelFilter = f.labelFilter
	var err error
	if f.fixtureList != "" {
		if f.selection.fixtures, err = unknownIDs("--fixture", f.fixtureList, fixtureIDs()); err != nil {
			return f, err
		}
	}
	if f.ruleList != "" {
		if f.selection.rules, err = unknownIDs("--rule", f.ruleList, ruleIDs()); err != nil {
			return f, err
		}
	}
	if err := f.selection.check(); err != nil {
		return f, err
	}
	return f, nil
}

// checkImplementationFlags checks the flags that name the implementation
// and the way to get a database, which certify and list share.
func checkImplementationFlags(f certifyFlags) error {
	switch {
	case f.adapter == "" && f.exec == "":
		return errors.New("--adapter NAME or --exec COMMAND is required (see 'harmless list')")
	case f.adapter != "" && f.exec != "":
		return errors.New("--adapter and --exec both name an implementation: give one")
	}
	switch f.provision {
	case "", "dsn", "container", "cluster", "ha":
		return nil
	}
	return fmt.Errorf("--provision must be dsn, container, cluster or ha, not %q", f.provision)
}

// level is the verbosity f asks for.
func (f certifyFlags) level() verbosity {
	switch {
	case f.quiet:
		return quiet
	case f.verbose:
		return verbose
	}
	return normal
}

// implementation returns the implementation to certify and the suite
// options it needs: the one place that turns flags into an adapter. For
// --exec it starts the program once to learn what it declares.
func implementation(ctx context.Context, f certifyFlags) (adapters.Adapter, []suite.Option, error) {
	if f.exec == "" {
		adapter, err := builtin.Lookup(f.adapter)
		return adapter, nil, err
	}
	adapter, info, err := exec.Probe(ctx, exec.Config{
		Command:      f.exec,
		StartTimeout: max(f.deliveryTimeout, exec.DefaultStartTimeout),
	})
	if err != nil {
		return adapters.Adapter{}, nil, fmt.Errorf("--exec %q: %w", f.exec, err)
	}
	return adapter, []suite.Option{suite.WithProtocol(certificate.Protocol{
		Name:           execProtocol,
		Version:        info.Protocol,
		Command:        f.exec,
		Implementation: info.Implementation.String(),
		MaxInFlight:    info.MaxInFlight,
	})}, nil
}

// execProtocol names the exec protocol in the certificates of --exec.
const execProtocol = "harmless-exec"

// suiteOptions turns the flags about the run (database, sizes, seed) into
// suite options. The command can always start PostgreSQL in a container:
// it links package container, which the suite alone does not.
func suiteOptions(f certifyFlags) []suite.Option {
	opts := []suite.Option{
		suite.WithContainers(docker.Start),
		suite.WithContenders(f.contenders),
		suite.WithRounds(f.rounds, f.overlapRounds),
		suite.WithDeliveryTimeout(f.deliveryTimeout),
		suite.WithRedeliveryPatience(f.patience),
		suite.WithSeed(f.seed),
	}
	if f.dsn != "" {
		opts = append(opts, suite.WithDSN(f.dsn))
	}
	if f.image != "" {
		opts = append(opts, suite.WithImage(f.image))
	}
	if f.provision != "" {
		opts = append(opts, suite.WithProvisioning(f.provision))
	}
	return opts
}

// randomSeed returns a random seed below 2^53, so that the certificate's
// JSON number reads back exactly in any language.
func randomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails: it crashes the program instead
	var seed uint64
	for _, x := range b {
		seed = seed<<8 | uint64(x)
	}
	return seed & (1<<53 - 1)
}

// certify runs the suite. Everything it writes, to stdout and stderr, its
// own lines and the suite's, passes through writers that mask the
// run's secrets (see package internal/redact): the passwords of the DSNs it
// may use, known before anything is printed, and those the suite learns.
// The reports written to files are masked in the certificate they are
// made from.
func certify(args []string, stdout, stderr io.Writer) int {
	m := maskArgs("harmless certify", stdout, stderr, args)
	defer m.flush()
	return m.certify(args)
}

// maskArgs returns output streams that mask the passwords of the DSNs a
// command may quote: those of the environment, the value of --dsn, and
// any argument that is a DSN (a stray one is quoted as unexpected). They
// are known before the flags are parsed, since an error about them may
// quote them.
func maskArgs(command string, stdout, stderr io.Writer, args []string) *masker {
	m := newMasker(command, stdout, stderr)
	for _, dsn := range []string{os.Getenv("HARMLESS_DSN"), os.Getenv("DATABASE_URL")} {
		m.addDSN(dsn)
	}
	for _, arg := range args {
		if v, ok := strings.CutPrefix(strings.TrimLeft(arg, "-"), "dsn="); ok {
			arg = v
		}
		m.addDSN(arg)
	}
	return m
}

// masker holds the output streams of certify (and list), which mask the
// run's secrets.
type masker struct {
	command        string // for its warning, e.g. "harmless certify"
	secrets        *redact.Redactor
	stdout, stderr *redact.Writer
	// rawStdout and rawStderr are the streams themselves, to tell whether
	// they are terminals.
	rawStdout, rawStderr io.Writer
	short                bool // whether a secret too short to mask was reported
}

func newMasker(command string, stdout, stderr io.Writer) *masker {
	secrets := redact.New()
	return &masker{command: command, secrets: secrets, stdout: secrets.Writer(stdout), stderr: secrets.Writer(stderr), rawStdout: stdout, rawStderr: stderr}
}

// add masks secret from now on, or, once, warns that it is too short to be.
func (m *masker) add(secret string) {
	if !m.secrets.Add(secret) && secret != "" && !m.short {
		m.short = true
		fmt.Fprintf(m.stderr, "%s: warning: a password of the database is shorter than %d bytes, too short to mask: output that quotes it shows it\n", m.command, redact.MinLen)
	}
}

// addDSN masks the passwords of dsn.
func (m *masker) addDSN(dsn string) {
	for _, secret := range redact.Passwords(dsn) {
		m.add(secret)
	}
}

// flush passes on what the masking writers hold back.
func (m *masker) flush() {
	_ = m.stdout.Flush()
	_ = m.stderr.Flush()
}

func (m *masker) certify(args []string) int {
	stdout, stderr := m.stdout, m.stderr
	f, err := parseCertify(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return exitCertified
	}
	if err != nil {
		fmt.Fprintf(stderr, "harmless certify: %v\n", err)
		return exitUsage
	}
	// From here on, SIGINT and SIGTERM stop the run: what runs is
	// stopped, every cleanup runs and the rest is skipped; the signal
	// names the interruption, and the exit code. A second one abandons the
	// run at once.
	ctx, unwatch := m.interruptible()
	defer unwatch()
	if err := checkDatabaseFlags(f, os.LookupEnv); err != nil {
		fmt.Fprintf(stderr, "harmless certify: %v\n", err)
		return exitUsage
	}
	if err := checkOutputPaths(f.outputs(os.Getenv)...); err != nil {
		fmt.Fprintf(stderr, "harmless certify: %v\n", err)
		return exitUsage
	}
	// Each contender of a concurrent-delivery round is an instance of its
	// own, with a connection of its own.
	if err := checkCapacity(ctx, provision.Options{DSN: f.dsn, Only: provision.Kind(f.provision)}, "--contenders", f.contenders); err != nil {
		return m.beforeTheRun(ctx, err)
	}
	adapter, opts, err := implementation(ctx, f)
	if err != nil {
		return m.beforeTheRun(ctx, err)
	}
	if f.repeat <= 1 {
		if !f.seedSet {
			f.seed = randomSeed()
		}
		return m.finish(f, m.certifyOnce(ctx, f, adapter, opts))
	}
	// A rare race shows in one run of many: each run draws a fresh seed,
	// and the first that fails is the one reported, with the seed that
	// replays its random choices.
	var seeds []string
	for i := 1; ; i++ {
		f.seed = randomSeed()
		seeds = append(seeds, strconv.FormatUint(f.seed, 10))
		r := m.certifyOnce(ctx, f, adapter, opts)
		failed := r.cert.Count(certificate.VerdictFail) > 0
		if !failed && i < f.repeat && r.sig == nil && r.cert.Error == "" {
			fmt.Fprintf(stderr, "harmless certify: run %d of %d (seed %d): %s\n", i, f.repeat, f.seed, r.cert.Summary())
			continue
		}
		code := m.finish(f, r)
		switch {
		case failed:
			fmt.Fprintf(stdout, "run %d of %d failed; replay it with --seed %d\n", i, f.repeat, f.seed)
		case i == f.repeat && code != exitUsage:
			fmt.Fprintf(stdout, "%d runs, none failed (seeds %s)\n", f.repeat, strings.Join(seeds, ", "))
		}
		return code
	}
}

// certified is what one run of the suite left: its certificate, the
// error that did not stop it judging, and the signal that stopped it.
type certified struct {
	cert certificate.Certificate
	err  error
	sig  os.Signal
	out  *printer
}

// certifyOnce runs the suite once with f's seed, until ctx is cancelled
// by a signal (see interruptible).
func (m *masker) certifyOnce(ctx context.Context, f certifyFlags, adapter adapters.Adapter, implOpts []suite.Option) certified {
	stdout, stderr := m.stdout, m.stderr
	// Colour depends on the streams themselves, which the masking writers
	// hide.
	out := newPrinter(m.rawStdout, m.rawStderr, f.level(), os.Getenv)
	out.stdout, out.stderr = stdout, stderr
	out.jsonPath = f.jsonPath
	opts := append(slices.Clip(implOpts), suiteOptions(f)...)
	opts = append(opts,
		suite.WithLogf(out.logf),
		suite.WithFixtureProgress(out.fixture),
		suite.WithSecrets(m.add),
		suite.WithRules(f.selection.selected()),
	)
	cert, err := suite.Certify(ctx, adapter, opts...)
	sig := signalOf(ctx)
	if sig != nil {
		// The interruption is the verdict's to state, not an error.
		err = withoutInterruption(err)
		// A run stopped while it set up, or in the moment after its last
		// play, is interrupted too.
		cert.Status, cert.Certified, cert.Interrupted = certificate.StatusInterrupted, false, "interrupted by "+signalName(sig)
	}
	return certified{cert: cert, err: err, sig: sig, out: out}
}

// interruptible returns a context that the first SIGINT or SIGTERM
// cancels, with an interruptedBy cause, and the function that stops
// watching for them (see onSignals).
func (m *masker) interruptible() (context.Context, func()) {
	ctx, stop := context.WithCancelCause(context.Background())
	unwatch := onSignals(m.command, m.stderr, func(s os.Signal) {
		fmt.Fprintf(m.stderr, "\n%s: %s: stopping the run and cleaning up (again to abandon it at once)\n", m.command, signalName(s))
		stop(interruptedBy{s})
	})
	return ctx, func() {
		unwatch()
		stop(nil)
	}
}

// signalOf returns the signal that cancelled ctx (see interruptible), or
// nil.
func signalOf(ctx context.Context) os.Signal {
	var by interruptedBy
	if errors.As(context.Cause(ctx), &by) {
		return by.sig
	}
	return nil
}

// beforeTheRun reports err, which stopped certify before its run began,
// and returns the exit code: the signal's when one stopped it (the
// program's handshake, the check of the server), 2 otherwise.
func (m *masker) beforeTheRun(ctx context.Context, err error) int {
	if sig := signalOf(ctx); sig != nil {
		fmt.Fprintf(m.stderr, "%s: interrupted by %s before the run began\n", m.command, signalName(sig))
		return exitInterrupted(sig)
	}
	fmt.Fprintf(m.stderr, "%s: %v\n", m.command, err)
	return exitUsage
}

// interruptedBy is the cause of a run stopped by a signal.
type interruptedBy struct{ sig os.Signal }

func (i interruptedBy) Error() string { return "interrupted by " + signalName(i.sig) }

// withoutInterruption is err without the part that says the run was
// interrupted by a signal: what is left is a failure to clean up.
func withoutInterruption(err error) error {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var kept []error
		for _, e := range joined.Unwrap() {
			if kept1 := withoutInterruption(e); kept1 != nil {
				kept = append(kept, kept1)
			}
		}
		return errors.Join(kept...)
	}
	if errors.As(err, new(interruptedBy)) {
		return nil
	}
	return err
}

// finish prints a run's verdicts, writes its reports and returns its exit
// code.
func (m *masker) finish(f certifyFlags, r certified) int {
	stderr, cert := m.stderr, r.cert
	if r.err != nil && cert.Error == "" {
		// The run judged, but could not release its database: say so; the
		// verdict stands.
		fmt.Fprintf(stderr, "harmless certify: %v\n", r.err)
	}
	if cert.Error != "" && cert.Status != certificate.StatusInterrupted {
		// A run that played, but whose faults could not reach the
		// implementation, has verdicts and reports to show for it: the
		// error is the environment's, exit 2 as for a run that could not
		// start.
		if errors.Is(r.err, suite.ErrUnreachable) {
			r.out.result(cert)
			if err := writeReports(f, cert, os.Getenv); err != nil {
				fmt.Fprintf(stderr, "harmless certify: %v\n", err)
			}
		}
		fmt.Fprintf(stderr, "harmless certify: %s\n", cert.Error)
		return exitUsage
	}
	// The verdicts first: a report that cannot be written after all (the
	// disk filled up) must not hide what the run found.
	r.out.result(cert)
	if err := writeReports(f, cert, os.Getenv); err != nil {
		fmt.Fprintf(stderr, "harmless certify: %v\n", err)
		return exitUsage
	}
	if cert.Status == certificate.StatusInterrupted {
		return exitInterrupted(r.sig)
	}
	return exitCode(cert.Status)
}

// exitInterrupted is the exit code of a run a signal stopped: 128 and the
// signal's number, as shells report a process a signal killed (130 for
// SIGINT, 143 for SIGTERM).
func exitInterrupted(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 128 + int(syscall.SIGINT)
}

// signalName names sig as people write it, e.g. "SIGTERM".
func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}
