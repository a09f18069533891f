package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"

	"github.com/harmless-dev/harmless/adapters/builtin"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/docgen"
	"github.com/harmless-dev/harmless/suite"
)

// Exit codes.
const (
	exitCertified    = 0
	exitNotCertified = 1
	exitUsage        = 2
)

const usage = `harmless certifies that an implementation makes duplicate event delivery harmless.

Usage:
  harmless certify --adapter NAME [flags]   run the suite and print a verdict per rule
  harmless list                             print the known adapters and rules
  harmless matrix                           print the verdict matrix: which fixture each built-in adapter must pass or fail
  harmless version                          print the suite version

Exit codes: 0 certified, 1 not certified, 2 usage or environment error.
Run 'harmless certify -h' for the certify flags.
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
	case "list":
		return list(args[1:], stdout, stderr)
	case "matrix":
		if len(args) > 1 {
			fmt.Fprintf(stderr, "harmless matrix: unexpected arguments: %s\n", strings.Join(args[1:], " "))
			return exitUsage
		}
		fmt.Fprint(stdout, docgen.MatrixTable())
		return exitCertified
	case "version":
		fmt.Fprintf(stdout, "harmless suite %s\n", suite.Version)
		return exitCertified
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitCertified
	default:
		fmt.Fprintf(stderr, "harmless: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
}

type certifyFlags struct {
	adapter         string
	dsn             string
	image           string
	provision       string
	labelFilter     string
	jsonPath        string
	junitPath       string
	contenders      int
	rounds          int
	overlapRounds   int
	deliveryTimeout time.Duration
	verbose         bool
}

func parseCertify(args []string, stderr io.Writer) (certifyFlags, error) {
	var f certifyFlags
	fs := flag.NewFlagSet("harmless certify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.adapter, "adapter", "", "built-in adapter to certify (see 'harmless list')")
	fs.StringVar(&f.dsn, "dsn", "", "PostgreSQL connection string (default: $HARMLESS_DSN, else $DATABASE_URL, else a container, else a throwaway local cluster)")
	fs.StringVar(&f.image, "image", "", "container image when starting PostgreSQL in a container (default: $HARMLESS_IMAGE, else postgres:17-alpine)")
	fs.StringVar(&f.provision, "provision", "", "force one way to get a database: dsn, container or cluster")
	fs.StringVar(&f.labelFilter, "label-filter", "", "run only specs matching this Ginkgo label filter, e.g. 'fixture:double-delivery'")
	fs.StringVar(&f.jsonPath, "json", "", "write the certificate as JSON to this file")
	fs.StringVar(&f.junitPath, "junit", "", "write a JUnit XML report (one testcase per rule) to this file")
	fs.IntVar(&f.contenders, "contenders", suite.DefaultContenders, "concurrent deliveries per concurrent-delivery round")
	fs.IntVar(&f.rounds, "rounds", suite.DefaultPlainRounds, "plain concurrent-delivery rounds")
	fs.IntVar(&f.overlapRounds, "overlap-rounds", suite.DefaultOverlapRounds, "concurrent-delivery rounds with a database-side sleep after the claim")
	fs.DurationVar(&f.deliveryTimeout, "delivery-timeout", 15*time.Second, "how long one delivery may take before it counts as hung")
	fs.BoolVar(&f.verbose, "v", false, "verbose Ginkgo output")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	switch {
	case fs.NArg() > 0:
		return f, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	case f.adapter == "":
		return f, errors.New("--adapter is required (see 'harmless list')")
	}
	switch f.provision {
	case "", "dsn", "container", "cluster":
	default:
		return f, fmt.Errorf("--provision must be dsn, container or cluster, not %q", f.provision)
	}
	if f.labelFilter != "" {
		if _, err := types.ParseLabelFilter(f.labelFilter); err != nil {
			return f, fmt.Errorf("--label-filter %q: %w", f.labelFilter, err)
		}
	}
	return f, nil
}

func certify(args []string, stdout, stderr io.Writer) int {
	f, err := parseCertify(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitCertified
	}
	if err != nil {
		fmt.Fprintf(stderr, "harmless certify: %v\n", err)
		return exitUsage
	}
	adapter, err := builtin.Lookup(f.adapter)
	if err != nil {
		fmt.Fprintf(stderr, "harmless certify: %v\n", err)
		return exitUsage
	}

	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	var cert *suite.Certificate
	opts := []suite.Option{
		suite.WithLogf(logf),
		suite.WithContenders(f.contenders),
		suite.WithRounds(f.rounds, f.overlapRounds),
		suite.WithDeliveryTimeout(f.deliveryTimeout),
		suite.WithCertificate(func(c suite.Certificate) { cert = &c }),
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

	gomega.RegisterFailHandler(ginkgo.Fail)
	suite.Register(adapter, opts...)
	suiteConfig, reporterConfig := ginkgo.GinkgoConfiguration()
	suiteConfig.LabelFilter = f.labelFilter
	reporterConfig.Succinct = !f.verbose
	reporterConfig.Verbose = f.verbose
	reporterConfig.NoColor = !isTerminal(stdout)
	ginkgo.RunSpecs(ginkgoT{}, "harmless certify "+adapter.Name, suiteConfig, reporterConfig)

	if cert == nil {
		fmt.Fprintln(stderr, "harmless certify: the suite produced no certificate")
		return exitUsage
	}
	if cert.Error != "" {
		fmt.Fprintf(stderr, "harmless certify: %s\n", cert.Error)
		return exitUsage
	}
	for _, out := range []struct {
		path  string
		write func(string) error
	}{{f.jsonPath, cert.WriteJSON}, {f.junitPath, cert.WriteJUnit}} {
		if out.path == "" {
			continue
		}
		if err := out.write(out.path); err != nil {
			fmt.Fprintf(stderr, "harmless certify: %v\n", err)
			return exitUsage
		}
	}

	fmt.Fprintf(stdout, "\nharmless %s: %s on PostgreSQL %s (%s)\n\n%s\n", suite.Version, cert.Adapter, cert.Database, cert.DatabaseKind, cert.Table())
	for _, r := range cert.Rules {
		if r.Verdict == suite.VerdictFail {
			fmt.Fprintf(stdout, "FAIL %s\n  %s\n\n", r.ID, strings.ReplaceAll(r.Message, "\n", "\n  "))
		}
	}
	if cert.Certified {
		fmt.Fprintf(stdout, "CERTIFIED: %s\n", cert.Adapter)
	} else {
		fmt.Fprintf(stdout, "NOT CERTIFIED: %s\n", cert.Adapter)
	}
	fmt.Fprintln(stdout, cert.Summary())
	if !cert.Certified {
		return exitNotCertified
	}
	return exitCertified
}

func list(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("harmless list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print as JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitCertified
		}
		return exitUsage
	}
	if *asJSON {
		type adapterInfo struct {
			Name             string  `json:"name"`
			ConflictPolicy   string  `json:"conflict_policy"`
			RedeliveryWindow float64 `json:"redelivery_window_s"`
			AcceptsClock     bool    `json:"accepts_clock"`
		}
		out := struct {
			Adapters []adapterInfo   `json:"adapters"`
			Rules    []fixtures.Rule `json:"rules"`
		}{Rules: fixtures.Rules()}
		for _, a := range builtin.All() {
			out.Adapters = append(out.Adapters, adapterInfo{a.Name, string(a.Declares.ConflictPolicy), a.Declares.RedeliveryWindow.Seconds(), a.Declares.AcceptsClock})
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			fmt.Fprintf(stderr, "harmless list: %v\n", err)
			return exitUsage
		}
		return exitCertified
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ADAPTER\tCONFLICT POLICY\tREDELIVERY WINDOW\tACCEPTS CLOCK")
	for _, a := range builtin.All() {
		policy := string(a.Declares.ConflictPolicy)
		if policy == "" {
			policy = "(none)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%t\n", a.Name, policy, a.Declares.RedeliveryWindow, a.Declares.AcceptsClock)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "RULE\tFIXTURE\tLEVEL\tDOC")
	for _, r := range fixtures.Rules() {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.ID, r.Fixture, r.Level, r.Doc)
	}
	if err := w.Flush(); err != nil {
		return exitUsage
	}
	return exitCertified
}

// ginkgoT lets RunSpecs run outside go test: Ginkgo only needs Fail, and
// the certificate carries the verdict.
type ginkgoT struct{}

func (ginkgoT) Fail() {}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
