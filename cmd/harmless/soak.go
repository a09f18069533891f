package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/internal/soak"
	"github.com/harmless-dev/harmless/internal/suite"
	"github.com/harmless-dev/harmless/suite/docker"
)

// Exit codes of soak besides those certify shares: 0 clean, 1 anomalies
// found, 2 usage or environment error, and 4 when the soak ended because
// the implementation acknowledged no delivery for --no-ack-timeout (see
// soak.NoAckError). That is neither an environment error of the harness's
// (2) nor a verdict on the events (1): the implementation is dead or
// cannot work where it runs, and a CI job should say so. 3 is certify's
// PARTIAL, which a soak never is.
const (
	exitClean     = 0
	exitAnomalies = 1
	exitNoAck     = 4
)

type soakFlags struct {
	certifyFlags // adapter, exec, dsn, image, provision, delivery timeout
	cfg          soak.Config
	nemesis      string
	htmlPath     string
	seedSet      bool
	workersSet   bool // the deprecated --workers was given
}

// soakSynopsis is soak's line of the usage.
const soakSynopsis = `harmless soak (--adapter NAME | --exec COMMAND) [--dsn DSN | --provision dsn|container|cluster|ha]
                [--duration 60s | --events N] [--instances N]
                [--duplicates 0.3] [--conflicts 0.01] [--nemesis LIST] [--seed N]
                [--redelivery-patience 10s] [--no-ack-timeout 10s] [--json FILE] [--html FILE]`

// soakFlagSet is soak's flags, parsed into f.
func soakFlagSet(f *soakFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("harmless soak", flag.ContinueOnError)
	setUsage(fs, soakSynopsis)
	fs.StringVar(&f.adapter, "adapter", "", "built-in adapter to soak (see 'harmless list')")
	fs.StringVar(&f.exec, "exec", "", "soak the program this shell command runs, over the exec protocol (docs/protocol.md); each instance is a pool of its processes")
	addDatabaseFlags(fs, &f.certifyFlags)
	fs.DurationVar(&f.cfg.Duration, "duration", 0, "how long to generate events (default 60s unless --events is given)")
	fs.IntVar(&f.cfg.Events, "events", 0, "how many events to generate (with --duration too, whichever ends first)")
	fs.IntVar(&f.cfg.Instances, "instances", soak.DefaultInstances, "implementation instances delivering concurrently, at least 2")
	fs.IntVar(&f.cfg.Instances, "workers", soak.DefaultInstances, "deprecated: the name of --instances before 0.2.0, still accepted")
	fs.Float64Var(&f.cfg.Duplicates, "duplicates", soak.DefaultDuplicates, "share of events delivered more than once: at once, later, or to two instances at the same time")
	fs.Float64Var(&f.cfg.Conflicts, "conflicts", soak.DefaultConflicts, "share of events that also get a conflicting copy (same identity, another payload)")
	fs.StringVar(&f.nemesis, "nemesis", "all", "faults to inject, comma-separated: "+strings.Join(soak.Nemeses(), ", ")+
		"; all (those the environment allows: crash needs one server harmless started, failover a replicated formation, --provision ha, where crash is unavailable) or none")
	addSeedFlag(fs, &f.certifyFlags, "seed of the event stream and the fault schedule, to repeat a run (default: random; the report records it)")
	fs.StringVar(&f.jsonPath, "json", "", "write the report as JSON to this file")
	fs.StringVar(&f.htmlPath, "html", "", "write the report as one self-contained HTML page to this file")
	fs.DurationVar(&f.deliveryTimeout, "delivery-timeout", suite.DefaultDeliveryTimeout, "how long one delivery may take before it counts as hung (an unknown outcome)")
	fs.DurationVar(&f.cfg.RedeliveryPatience, "redelivery-patience", suite.DefaultRedeliveryPatience, "how long the broker goes on redelivering a copy whose deliveries end unknown, after pauses growing from 10ms to 1s; one that runs out of it while faults are injected gets a whole patience again once they are healed")
	fs.DurationVar(&f.cfg.NoAckTimeout, "no-ack-timeout", soak.DefaultNoAckTimeout, "end the soak (exit 4) when no delivery was acknowledged for this long, no fault being in progress, while deliveries kept failing: the implementation is dead or cannot work here")
	fs.BoolVar(&f.verbose, "v", false, "verbose: the harness's and the implementation's log lines on stderr")
	return fs
}

// parseSoak parses soak's args; help goes to stdout.
func parseSoak(args []string, stdout io.Writer) (soakFlags, error) {
	var f soakFlags
	fs := soakFlagSet(&f)
	if err := parseFlags(fs, args, stdout); err != nil {
		return f, err
	}
	// The seed is certify's type (see seedValue), below 2^63.
	f.cfg.Seed, f.seedSet = int64(f.certifyFlags.seed), f.certifyFlags.seedSet
	if rest := fs.Args(); len(rest) > 0 {
		return f, fmt.Errorf("unexpected arguments: %s", strings.Join(rest, " "))
	}
	if err := checkImplementationFlags(f.certifyFlags); err != nil {
		return f, err
	}
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	if f.workersSet = given["workers"]; f.workersSet && given["instances"] {
		return f, errors.New("--workers is the old name of --instances: give --instances alone")
	}
	switch {
	case f.cfg.Duration < 0:
		return f, errors.New("--duration must not be negative")
	case f.cfg.Events < 0:
		return f, errors.New("--events must not be negative")
	case f.cfg.Instances < 2:
		name := "--instances"
		if f.workersSet {
			name = "--workers"
		}
		return f, fmt.Errorf("%s must be at least 2 (duplicates go to different instances), not %d", name, f.cfg.Instances)
	// Written so that NaN, which compares false with everything, fails
	// too: it would run, and then fail to write the JSON report.
	case !(f.cfg.Duplicates >= 0 && f.cfg.Duplicates <= 1):
		return f, fmt.Errorf("--duplicates is a share between 0 and 1, not %g", f.cfg.Duplicates)
	case !(f.cfg.Conflicts >= 0 && f.cfg.Conflicts <= 1):
		return f, fmt.Errorf("--conflicts is a share between 0 and 1, not %g", f.cfg.Conflicts)
	case f.deliveryTimeout <= 0:
		return f, errors.New("--delivery-timeout must be positive")
	case f.cfg.RedeliveryPatience <= 0:
		return f, fmt.Errorf("--redelivery-patience must be positive, not %s", f.cfg.RedeliveryPatience)
	case f.cfg.NoAckTimeout <= 0:
		return f, fmt.Errorf("--no-ack-timeout must be positive, not %s", f.cfg.NoAckTimeout)
	}
	if f.cfg.Duration == 0 && f.cfg.Events == 0 {
		f.cfg.Duration = soak.DefaultDuration
	}
	f.cfg.DeliveryTimeout = f.deliveryTimeout
	return f, nil
}

func soakCommand(args []string, stdout, stderr io.Writer) int {
	m := maskArgs("harmless soak", stdout, stderr, args)
	defer m.flush()
	f, err := parseSoak(args, m.stdout)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitClean
		}
		fmt.Fprintf(m.stderr, "harmless soak: %v\n", err)
		return exitUsage
	}
	if f.workersSet {
		fmt.Fprintln(m.stderr, "harmless soak: --workers is deprecated: it is --instances since 0.2.0")
	}
	if err := checkDatabaseFlags(f.certifyFlags, os.LookupEnv); err != nil {
		fmt.Fprintf(m.stderr, "harmless soak: %v\n", err)
		return exitUsage
	}
	if err := checkOutputPaths(outputPath{"--json", f.jsonPath}, outputPath{"--html", f.htmlPath}); err != nil {
		fmt.Fprintf(m.stderr, "harmless soak: %v\n", err)
		return exitUsage
	}
	instancesFlag := "--instances"
	if f.workersSet {
		instancesFlag = "--workers"
	}
	if err := checkCapacity(context.Background(), provision.Options{DSN: f.dsn, Only: provision.Kind(f.provision)}, instancesFlag, f.cfg.Instances); err != nil {
		fmt.Fprintf(m.stderr, "harmless soak: %v\n", err)
		return exitUsage
	}
	if !f.seedSet {
		f.cfg.Seed = time.Now().UnixNano()
	}

	// The first signal ends the load and reports what ran; a second one
	// abandons the run at once.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := make(chan struct{})
	var sig os.Signal
	unwatch := onSignals(m.command, m.stderr, func(s os.Signal) {
		sig = s
		fmt.Fprintf(m.stderr, "\nharmless soak: %s: ending the load, healing the faults and checking what ran (again to abandon it at once)\n", signalName(s))
		close(stop)
	})
	rep, code := m.soak(ctx, f, stop)
	unwatch()
	if rep != nil && rep.Interrupted && sig != nil {
		if sig == syscall.SIGTERM {
			return 143
		}
		return 130
	}
	return code
}

// soak runs the soak f asks for and prints and writes its report.
func (m *masker) soak(ctx context.Context, f soakFlags, stop <-chan struct{}) (*soak.Report, int) {
	logf := func(format string, args ...any) { fmt.Fprintf(m.stderr, format+"\n", args...) }
	adapter, _, err := implementation(ctx, f.certifyFlags)
	if err != nil {
		fmt.Fprintf(m.stderr, "harmless soak: %v\n", err)
		return nil, exitUsage
	}
	popts := provision.Options{DSN: f.dsn, Image: f.image, Only: provision.Kind(f.provision),
		Container: provision.Engine(docker.Start), Logf: logf}
	kind, err := popts.Planned()
	if err != nil {
		fmt.Fprintf(m.stderr, "harmless soak: %v\n", err)
		return nil, exitUsage
	}
	// Checked before a server is started: naming a nemesis that cannot run
	// here is a usage error.
	db := soak.Database{Owned: kind != provision.KindDSN, Formation: kind == provision.KindHA}
	if f.cfg.Nemeses, err = soak.ParseNemeses(f.nemesis, adapter, db); err != nil {
		fmt.Fprintf(m.stderr, "harmless soak: %v\n", err)
		return nil, exitUsage
	}
	// The implementation's log lines (a relay retrying while the server is
	// down) would drown the progress: only -v shows them.
	quiet := func(string, ...any) {}
	if f.verbose {
		quiet = logf
	}
	run, err := harness.Start(ctx, harness.Options{Provision: popts, DeliveryTimeout: f.deliveryTimeout, Logf: quiet})
	if err != nil {
		fmt.Fprintf(m.stderr, "harmless soak: %v\n", err)
		return nil, exitUsage
	}
	if d := run.Server().DSN(); d != "" {
		m.addDSN(d)
	}
	defer func() {
		if err := run.Close(context.WithoutCancel(ctx)); err != nil {
			fmt.Fprintf(m.stderr, "harmless soak: %v\n", err)
		}
	}()
	// An exec child is named by the name it declared in hello, as in
	// certify's verdict line.
	name := adapter.Name
	fmt.Fprintf(m.stderr, "harmless soak: %s, %d instances, seed %d, nemeses: %s, on %s\n",
		name, f.cfg.Instances, f.cfg.Seed, nemesesList(f.cfg.Nemeses), run.Server())

	progress, done := progressPrinter(m, f.cfg)
	rep, err := soak.Run(ctx, run, adapter, f.cfg, soak.Options{Name: name, Progress: progress, Stop: stop, Logf: quiet})
	done()
	rep.Environment.Harmless = suite.Version
	if err != nil && rep.Verdict == "" {
		fmt.Fprintf(m.stderr, "harmless soak: %v\n", err)
		return &rep, exitUsage
	}
	if err != nil {
		fmt.Fprintf(m.stderr, "harmless soak: %v\n", err)
	}
	// The summary first: a report that cannot be written after all must
	// not hide what the run found.
	printSoakSummary(m.stdout, rep)
	if werr := writeSoakReports(f, rep); werr != nil {
		fmt.Fprintf(m.stderr, "harmless soak: %v\n", werr)
		return &rep, exitUsage
	}
	var noAck *soak.NoAckError
	switch {
	case errors.As(err, &noAck):
		return &rep, exitNoAck
	case !rep.Clean():
		return &rep, exitAnomalies
	}
	return &rep, exitClean
}

func nemesesList(n []string) string {
	if len(n) == 0 {
		return "none"
	}
	return strings.Join(n, ", ")
}

// progressPrinter returns the soak's progress callback and a function that
// ends its display. On a terminal it draws a bar; elsewhere (CI logs) it
// prints a line every ten seconds.
func progressPrinter(m *masker, cfg soak.Config) (func(soak.Progress), func()) {
	line := func(p soak.Progress) string {
		s := fmt.Sprintf("%s %s: %d events, %d delivered, %d acked, %.0f/s, %d anomalies so far",
			p.Phase, p.Elapsed.Round(time.Second), p.Events, p.Delivered, p.Acked, p.Throughput, p.Anomalies)
		if p.Crashes > 0 {
			s += fmt.Sprintf(", %d crashes", p.Crashes)
		}
		if p.Fault != "" {
			s += ", fault: " + p.Fault
		}
		return s
	}
	if !isTerminal(m.rawStderr) {
		var last time.Duration
		return func(p soak.Progress) {
			if p.Elapsed-last >= 10*time.Second {
				last = p.Elapsed
				fmt.Fprintf(m.stderr, "harmless soak: %s\n", line(p))
			}
		}, func() {}
	}
	total, byEvents := int64(cfg.Duration/time.Second), cfg.Events > 0 && cfg.Duration == 0
	if byEvents {
		total = int64(cfg.Events)
	}
	bar := progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(m.stderr),
		progressbar.OptionSetWidth(20),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetRenderBlankState(true))
	return func(p soak.Progress) {
			if byEvents {
				_ = bar.Set64(int64(p.Events))
			} else {
				_ = bar.Set64(min(int64(p.Elapsed/time.Second), total))
			}
			bar.Describe(line(p))
		}, func() {
			_ = bar.Finish()
		}
}

func writeSoakReports(f soakFlags, rep soak.Report) error {
	if f.jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return fmt.Errorf("--json: %w", err)
		}
		if err := os.WriteFile(f.jsonPath, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	if f.htmlPath != "" {
		out, err := os.Create(f.htmlPath)
		if err != nil {
			return fmt.Errorf("--html: %w", err)
		}
		if err := soak.WriteHTML(out, rep); err != nil {
			out.Close()
			return fmt.Errorf("--html: %w", err)
		}
		if err := out.Close(); err != nil {
			return fmt.Errorf("--html: %w", err)
		}
	}
	return nil
}

func printSoakSummary(w io.Writer, r soak.Report) {
	t := r.Totals
	fmt.Fprintf(w, "soak of %s: %s\n", r.Adapter, strings.ToUpper(r.Verdict))
	// The crashes come first: they explain what follows (unknown
	// outcomes, an early end).
	if n := r.CrashCount(); n > 0 {
		per := make([]string, len(r.Crashes))
		for i, c := range r.Crashes {
			per[i] = fmt.Sprintf("instance %d: %d", c.Instance, c.Count)
		}
		fmt.Fprintf(w, "  crashes: the implementation's processes crashed %s and were restarted (%s); the first of instance %d: %s\n",
			harness.Times(n), strings.Join(per, ", "), r.Crashes[0].Instance, r.Crashes[0].First)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "  stopped early: %s\n", r.Error)
		fmt.Fprintf(w, "  the %d events never acknowledged or refused are unsettled, not judged lost\n", r.Totals.Unsettled)
	}
	if r.Interrupted {
		fmt.Fprintln(w, "  interrupted: the report covers what ran")
	}
	fmt.Fprintf(w, "  %d events, %d deliveries in %s (seed %d): %.0f acknowledged deliveries/s, latency p50 %s p99 %s\n",
		t.Events, t.Deliveries, r.Elapsed.Round(time.Millisecond), r.Config.Seed, r.Throughput,
		r.Latency.P50.Round(10*time.Microsecond), r.Latency.P99.Round(10*time.Microsecond))
	fmt.Fprintf(w, "  outcomes: %d applied, %d duplicate, %d rejected, %d refused, %d unknown (%d applied, %d not, by the ledger)\n",
		t.Applied, t.Duplicate, t.Rejected, t.Refused, t.Unknown, t.UnknownApplied, t.UnknownNotApplied)
	fmt.Fprintf(w, "  faults: %d injected", len(r.Faults))
	for _, k := range sortedKeys(r.FaultsFired) {
		fmt.Fprintf(w, ", %s fired %d", k, r.FaultsFired[k])
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  anomalies: %d lost, %d duplicated, %d wrong, %d conflicts applied\n", t.Lost, t.Duplicated, t.Wrong, t.ConflictsApplied)
	for i, a := range r.Anomalies {
		if i == 10 {
			fmt.Fprintf(w, "  ... and %d more (see --json or --html)\n", len(r.Anomalies)-10)
			break
		}
		fmt.Fprintf(w, "  %s %s: %s\n", strings.Join(a.Kinds, ", "), a.ID, a.Explanation)
	}
}

func sortedKeys(m map[string]int64) []string {
	return slices.Sorted(maps.Keys(m))
}
