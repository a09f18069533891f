package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/applicability"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/suite/docker"
)

// adapterInfo is an adapter and what it declares, as list prints it.
type adapterInfo struct {
	Name             string  `json:"name"`
	ConflictPolicy   string  `json:"conflict_policy"`
	RedeliveryWindow float64 `json:"redelivery_window_s"`
	AcceptsClock     bool    `json:"accepts_clock"`
	ExternalEffects  string  `json:"external_effects"`
	// MaxSendDelay is absent when not declared, as in the declaration's
	// own JSON.
	MaxSendDelay float64 `json:"max_send_delay_s,omitempty"`
}

func infoOf(a adapters.Adapter) adapterInfo {
	d := a.Declares
	return adapterInfo{a.Name, string(d.ConflictPolicy), d.RedeliveryWindow.Seconds(), d.AcceptsClock, string(d.ExternalEffects), d.MaxSendDelay.Seconds()}
}

// list prints the built-in adapters and the rules, or, with --adapter or
// --exec, which rules a run of certify with the same flags will run.
func list(args []string, stdout, stderr io.Writer) int {
	var f certifyFlags
	var asJSON bool
	fs := listFlagSet(&f, &asJSON)
	if err := parseFlags(fs, args, stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitCertified
		}
		fmt.Fprintf(stderr, "harmless list: %v\n", err)
		return exitUsage
	}
	return listWith(f, asJSON, fs.Args(), stdout, stderr)
}

// listSynopsis is list's lines of the usage.
const listSynopsis = `harmless list [--json]
  harmless list (--adapter NAME | --exec COMMAND) [--dsn DSN] [--provision dsn|container|cluster|ha] [--json]`

// listFlagSet is list's flags, parsed into f and asJSON.
func listFlagSet(f *certifyFlags, asJSON *bool) *flag.FlagSet {
	fs := flag.NewFlagSet("harmless list", flag.ContinueOnError)
	setUsage(fs, listSynopsis)
	fs.BoolVar(asJSON, "json", false, "print as JSON")
	fs.StringVar(&f.adapter, "adapter", "", "say which rules a certify run of this built-in adapter will run, and why the others cannot")
	fs.StringVar(&f.exec, "exec", "", "the same for the program this shell command runs (started once, to read what it declares)")
	fs.Var(dsnValue{&f.dsn, &f.dsnSet}, "dsn", "as for certify: the database the run would use (default: $HARMLESS_DSN, else $DATABASE_URL, else a server harmless starts); list connects to it once, and exits 2 if it cannot")
	fs.StringVar(&f.provision, "provision", "", "as for certify: force one way to get a database: dsn, container, cluster or ha")
	return fs
}

// listWith is list once its flags are parsed.
func listWith(f certifyFlags, asJSON bool, rest []string, stdout, stderr io.Writer) int {
	if err := checkListFlags(f, rest); err != nil {
		fmt.Fprintf(stderr, "harmless list: %v\n", err)
		return exitUsage
	}
	if f.adapter == "" && f.exec == "" {
		return listAll(asJSON, stdout, stderr)
	}
	if err := checkDatabaseFlags(f, os.LookupEnv); err != nil {
		fmt.Fprintf(stderr, "harmless list: %v\n", err)
		return exitUsage
	}
	// A signal stops the connection to a DSN rather than the process, so
	// that what list started (an --exec program) is stopped too.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	plan, err := planOf(ctx, f)
	if err != nil {
		fmt.Fprintf(stderr, "harmless list: %v\n", err)
		return exitUsage
	}
	if asJSON {
		return printJSON(stdout, stderr, plan)
	}
	if err := plan.print(stdout); err != nil {
		fmt.Fprintf(stderr, "harmless list: %v\n", err)
		return exitUsage
	}
	return exitCertified
}

// checkListFlags checks list's flags: the database flags say where a run
// of an implementation would be made, so they need one.
func checkListFlags(f certifyFlags, rest []string) error {
	switch {
	case len(rest) > 0:
		return fmt.Errorf("unexpected arguments: %s", strings.Join(rest, " "))
	case f.adapter == "" && f.exec == "" && (f.dsnSet || f.provision != ""):
		return errors.New("--dsn and --provision say where a run would be made: give --adapter NAME or --exec COMMAND too")
	}
	if f.adapter != "" || f.exec != "" {
		return checkImplementationFlags(f)
	}
	return nil
}

// listAll prints the built-in adapters, what they declare, and every rule.
func listAll(asJSON bool, stdout, stderr io.Writer) int {
	if asJSON {
		out := struct {
			Adapters []adapterInfo   `json:"adapters"`
			Rules    []fixtures.Rule `json:"rules"`
		}{Rules: fixtures.Rules()}
		for _, a := range builtin.All() {
			out.Adapters = append(out.Adapters, infoOf(a))
		}
		return printJSON(stdout, stderr, out)
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ADAPTER\tCONFLICT POLICY\tREDELIVERY WINDOW\tACCEPTS CLOCK\tEXTERNAL EFFECTS\tMAX SEND DELAY")
	for _, a := range builtin.All() {
		policy := string(a.Declares.ConflictPolicy)
		if policy == "" {
			policy = "(none)"
		}
		external := string(a.Declares.ExternalEffects)
		if external == "" {
			external = "(none)"
		}
		delay := "(none)"
		if a.Declares.MaxSendDelay > 0 {
			delay = a.Declares.MaxSendDelay.String()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%t\t%s\t%s\n", a.Name, policy, a.Declares.RedeliveryWindow, a.Declares.AcceptsClock, external, delay)
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

func printJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(stderr, "harmless list: %v\n", err)
		return exitUsage
	}
	return exitCertified
}

// runPlan is which rules a run of certify would run against an
// implementation, and why the others cannot: the catalogue's decision
// (applicability.Of), made before any run, as the run makes it.
type runPlan struct {
	Adapter adapterInfo `json:"adapter"`
	// OutOfProcess is set for a program run with --exec.
	OutOfProcess bool `json:"out_of_process"`
	// Database is the way the run would get its database: dsn, container
	// or cluster, resolved as certify would (a daemon that answers, else
	// server binaries found), or "none" when no way would work.
	Database string `json:"database"`
	// Where says which server that is, e.g. "a throwaway cluster
	// (binaries: /usr/lib/postgresql/15/bin)".
	Where string `json:"where"`
	// Note says why a container was passed over, or why the way would
	// fail.
	Note string `json:"note,omitempty"`
	// ServerVersion is the server_version of the server named by a DSN,
	// which list connects to: a DSN that does not connect is an error,
	// as for the run.
	ServerVersion string `json:"server_version,omitempty"`
	// OwnedServer is set when that is a server harmless starts, which it
	// may crash.
	OwnedServer bool       `json:"owned_server"`
	Rules       []ruleplan `json:"rules"`
}

// ruleplan is whether a rule will run, and the variants of its fixture
// that will not.
type ruleplan struct {
	ID      string         `json:"id"`
	Fixture string         `json:"fixture"`
	Level   fixtures.Level `json:"level"`
	Runs    bool           `json:"runs"`
	Reason  string         `json:"reason,omitempty"`
	// NotApplicable marks a rule that does not run because the
	// implementation has nothing it tests: not-applicable, which does not
	// lower the status (see applicability.Decision.NotApplicable).
	NotApplicable bool                      `json:"not_applicable,omitempty"`
	Excluded      []applicability.Exclusion `json:"excluded_variants,omitempty"`
}

// planOf decides which rules a certify run with flags f would run. It
// starts nothing but an --exec program, once, for its declaration: the
// database is named, from the flags and the environment, as certify
// would choose it, and a server named by a DSN is connected to once,
// within dsnCheckTimeout: what list says would be judged is judged only
// if the run can connect, and a DSN that cannot is the exit code 2 the
// run would end with, said before any run.
func planOf(ctx context.Context, f certifyFlags) (runPlan, error) {
	adapter, _, err := implementation(ctx, f)
	if err != nil {
		return runPlan{}, err
	}
	// Choose probes the Docker daemon and looks for server binaries, as
	// certify's Open would try them, but starts neither.
	choice, err := provision.Options{DSN: f.dsn, Image: f.image, Only: provision.Kind(f.provision), Container: provision.Engine(docker.Start)}.Choose(ctx)
	if err != nil {
		return runPlan{}, err
	}
	// Every built-in adapter is Go code in this process; a program run
	// with --exec is another process.
	p := runPlan{Adapter: infoOf(adapter), OutOfProcess: f.exec != "", Database: string(choice.Kind), Where: choice.Where, Note: choice.Note, OwnedServer: choice.Kind != provision.KindDSN}
	if choice.Kind == provision.KindDSN && choice.Where != "none" {
		checkCtx, cancel := context.WithTimeout(ctx, dsnCheckTimeout)
		defer cancel()
		p.ServerVersion, err = provision.Options{DSN: f.dsn, Only: provision.Kind(f.provision)}.CheckDSN(checkCtx)
		if err != nil {
			return runPlan{}, err
		}
	}
	if choice.Kind == "" {
		p.Database = "none"
	}
	target := applicability.Target{
		RedeliveryWindow: adapter.Declares.RedeliveryWindow,
		AcceptsClock:     adapter.Declares.AcceptsClock,
		OutOfProcess:     p.OutOfProcess,
		OwnedServer:      p.OwnedServer,
		ExternalEffects:  string(adapter.Declares.ExternalEffects),
		Formation:        choice.Kind == provision.KindHA,
	}
	for _, fx := range fixtures.Catalog() {
		a := applicability.Of(fx, target)
		for _, r := range fx.Rules {
			p.Rules = append(p.Rules, ruleplan{ID: r.ID, Fixture: r.Fixture, Level: r.Level, Runs: a.Runs, Reason: a.Reason, NotApplicable: a.NotApplicable, Excluded: a.Excluded})
		}
	}
	return p, nil
}

// dsnCheckTimeout bounds list's connection to a server named by a DSN: a
// host that drops packets would otherwise hold it for the dialer's whole
// patience.
const dsnCheckTimeout = 10 * time.Second

// print writes the plan for people: the adapter and the database, a line
// per rule, the variants that will not be played, and what that means for
// the verdict.
func (p runPlan) print(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	where := "in this process"
	if p.OutOfProcess {
		where = "in another process"
	}
	owned := "a server harmless starts, which it may crash"
	switch {
	case p.Database == "none":
		owned = "certify would stop with exit code 2: no way to get a database works"
	case p.Database == string(provision.KindHA) && p.Note != "":
		owned = "certify would stop with exit code 2: no formation can start here"
	case !p.OwnedServer:
		owned = "a server named by a DSN, which harmless does not own"
	}
	server := p.Where
	if p.ServerVersion != "" {
		server += ", PostgreSQL " + p.ServerVersion
	}
	fmt.Fprintf(w, "adapter %s (%s); database: %s (%s)\n", p.Adapter.Name, where, server, owned)
	if p.Note != "" {
		fmt.Fprintf(w, "  (%s)\n", p.Note)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "RULE\tLEVEL\tWILL RUN")
	var notRun, mustNotRun, notApplicable int
	seen := map[string]bool{}
	var variants []string
	for _, r := range p.Rules {
		verdict := "runs"
		switch {
		case r.NotApplicable:
			verdict = "not-applicable: " + r.Reason
			notApplicable++
		case !r.Runs:
			verdict = "not-supported: " + r.Reason
			notRun++
			if r.Level == fixtures.Must {
				mustNotRun++
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", r.ID, r.Level, verdict)
		for _, e := range r.Excluded {
			if key := r.Fixture + "/" + e.ID; !seen[key] {
				seen[key] = true
				variants = append(variants, fmt.Sprintf("  %s (%s): %s", key, e.Variant, e.Reason))
			}
		}
	}
	fmt.Fprintf(w, "\n%d of %d rules will run", len(p.Rules)-notRun-notApplicable, len(p.Rules))
	if notApplicable > 0 {
		fmt.Fprintf(w, "; %d are not-applicable, which does not lower the status", notApplicable)
	}
	if mustNotRun > 0 {
		fmt.Fprintf(w, "; %d MUST rules cannot, so the run can at best be PARTIAL", mustNotRun)
	}
	fmt.Fprintln(w, ".")
	if len(variants) > 0 {
		fmt.Fprintln(w, "Variants that will not be played (their fixture's rules are judged on the others):")
		fmt.Fprintln(w, strings.Join(variants, "\n"))
	}
	return w.Flush()
}
