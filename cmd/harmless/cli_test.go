package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/suite"
	"github.com/harmless-dev/harmless/suite/certificate"
)

func TestUsageErrorsExit2(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "Usage:"},
		{"unknown command", []string{"certfy"}, `unknown command "certfy"`},
		{"unknown adapter", []string{"certify", "--adapter", "nosuch"}, `unknown adapter "nosuch" (known: `},
		{"no adapter", []string{"certify"}, "--adapter NAME or --exec COMMAND is required"},
		{"unknown flag", []string{"certify", "--adapter", "reference", "--nope"}, "flag provided but not defined: -nope"},
		{"bad provision", []string{"certify", "--adapter", "reference", "--provision", "cloud"}, "--provision must be dsn, container, cluster or ha"},
		{"bad label filter", []string{"certify", "--adapter", "reference", "--label-filter", "fixture:(("}, "--label-filter"},
		{"stray argument", []string{"certify", "--adapter", "reference", "extra"}, "unexpected arguments: extra"},
		{"repeat with a seed", []string{"certify", "--adapter", "reference", "--repeat", "3", "--seed", "7"}, "--repeat draws a fresh seed for each run"},
		{"repeat zero", []string{"certify", "--adapter", "reference", "--repeat", "0"}, "--repeat must be at least 1, not 0"},
		{"mistyped label filter", []string{"certify", "--adapter", "reference", "--label-filter", "fixture:double-delivry"}, `--label-filter "fixture:double-delivry" selects no rule, so nothing would run; did you mean fixture:double-delivery? (known fixtures: double-delivery, concurrent-delivery, `},
		{"a label filter no rule matches", []string{"certify", "--adapter", "reference", "--label-filter", "level:MAY"}, `--label-filter "level:MAY" selects no rule`},
		{"fixture and filter exclude each other", []string{"certify", "--adapter", "reference", "--fixture", "bad-input", "--label-filter", "fixture:double-delivery"}, `--label-filter "fixture:double-delivery" with --fixture and --rule selects no rule`},
		{"unknown fixture", []string{"certify", "--adapter", "reference", "--fixture", "double-delivery,double-delivry"}, `--fixture: no such id "double-delivry" (did you mean double-delivery?) (known: double-delivery, concurrent-delivery, `},
		{"unknown rule", []string{"certify", "--adapter", "reference", "--rule", "nope"}, `--rule: no such id "nope" (known: double-delivery.first-applied, `},
		{"empty fixture list", []string{"certify", "--adapter", "reference", "--fixture", ","}, `--fixture "," names no id`},
		{"verbose and quiet", []string{"certify", "--adapter", "reference", "-v", "-q"}, "-v and --quiet contradict each other"},
		{"bad seed", []string{"certify", "--adapter", "reference", "--seed", "-1"}, "invalid value \"-1\" for flag -seed"},
		{"list: unknown adapter", []string{"list", "--adapter", "nosuch"}, `unknown adapter "nosuch" (known: `},
		{"list: adapter and exec", []string{"list", "--adapter", "reference", "--exec", "true"}, "--adapter and --exec both name an implementation"},
		{"list: a database without an adapter", []string{"list", "--provision", "cluster"}, "give --adapter NAME or --exec COMMAND too"},
		{"list: bad provision", []string{"list", "--adapter", "reference", "--provision", "cloud"}, "--provision must be dsn, container, cluster or ha"},
		{"list: stray argument", []string{"list", "--adapter", "reference", "extra"}, "unexpected arguments: extra"},
		{"soak: no adapter", []string{"soak"}, "--adapter NAME or --exec COMMAND is required"},
		{"soak: one instance", []string{"soak", "--adapter", "reference", "--instances", "1"}, "--instances must be at least 2"},
		{"soak: one instance, by the deprecated name", []string{"soak", "--adapter", "reference", "--workers", "1"}, "--workers must be at least 2"},
		{"soak: the deprecated name beside the new one", []string{"soak", "--adapter", "reference", "--workers", "3", "--instances", "3"}, "--workers is the old name of --instances"},
		{"soak: duplicates above one", []string{"soak", "--adapter", "reference", "--duplicates", "1.5"}, "--duplicates is a share between 0 and 1"},
		{"soak: negative duration", []string{"soak", "--adapter", "reference", "--duration", "-1s"}, "--duration must not be negative"},
		{"soak: unknown nemesis", []string{"soak", "--adapter", "reference", "--nemesis", "kill,flood"}, "--nemesis flood: no such nemesis (known: kill, "},
		{"soak: crash on a DSN", []string{"soak", "--adapter", "reference", "--dsn", "postgres://u@127.0.0.1:1/db", "--nemesis", "crash"}, "--nemesis crash: the server is named by a DSN"},
		{"soak: destination without external effects", []string{"soak", "--adapter", "broken-in-memory", "--provision", "cluster", "--nemesis", "destination"}, "--nemesis destination: the implementation declares no external effects"},
		{"soak: stray argument", []string{"soak", "--adapter", "reference", "extra"}, "unexpected arguments: extra"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != exitUsage {
				t.Errorf("exit code %d; want %d", code, exitUsage)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr does not say %q:\n%s", tc.want, stderr.String())
			}
		})
	}
}

func TestListNamesAdaptersAndRules(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"list"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	for _, want := range []string{"reference", "reject"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("list does not mention %q", want)
		}
	}
	for _, r := range fixtures.Rules() {
		if !strings.Contains(stdout.String(), r.ID) || !strings.Contains(stdout.String(), r.Doc) {
			t.Errorf("list does not show rule %s with its doc", r.ID)
		}
	}
}

// built is the harmless command the test binary built for its tests, in
// a directory of its own that TestMain removes: linking it takes seconds,
// and some thirty tests run it. It is test-only process state.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

// binary builds the harmless command once per test binary and returns
// its path. The tests run it; none changes it.
func binary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "harmless-cmd-test-"); built.err != nil {
			return
		}
		bin := filepath.Join(built.dir, "harmless")
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		built.bin = bin
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// removeBinary removes what binary built.
func removeBinary() {
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
}

// runCertify runs the built command and returns its exit code and output.
func runCertify(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	return runCommand(t, bin, env, append([]string{"certify"}, args...)...)
}

// runCommand runs the built command with args and returns its exit code
// and output. env is added to this process's environment; an entry made
// by unset removes a variable instead.
func runCommand(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = childEnv(env)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("run %s: %v", bin, err)
	return 0, "", ""
}

// unsetMark prefixes a name that runCommand removes from the child's
// environment.
const unsetMark = "!unset:"

// unset returns entries of runCommand's env that remove the variables
// named: a DSN variable set but empty is refused, not taken for unset, so
// a child that must start a throwaway server must not see it at all.
func unset(names ...string) []string {
	var env []string
	for _, name := range names {
		env = append(env, unsetMark+name)
	}
	return env
}

// childEnv is this process's environment with env's entries added, and
// those made by unset removed.
func childEnv(env []string) []string {
	var removed []string
	var added []string
	for _, kv := range env {
		if name, ok := strings.CutPrefix(kv, unsetMark); ok {
			removed = append(removed, name)
		} else {
			added = append(added, kv)
		}
	}
	return append(environWithout(removed...), added...)
}

// environWithout is this process's environment without the variables
// named.
func environWithout(names ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !slices.Contains(names, name) {
			out = append(out, kv)
		}
	}
	return out
}

// unsetenv unsets the variables named for the rest of the test, and
// restores them after it, as t.Setenv would.
func unsetenv(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		t.Setenv(name, "") // to restore it afterwards
		if err := os.Unsetenv(name); err != nil {
			t.Fatal(err)
		}
	}
}

// besideOthers lets t, a test that certifies or soaks on the package's
// shared server, run beside the package's other such tests when the test
// binary started that server: most of a run is waiting (on the server, a
// child, a sleep a fixture plans), and the server's connections are the
// tests' alone. On a server named by a DSN, which others may be using, the
// tests run one at a time, so that none is refused for the connections
// another holds.
func besideOthers(t *testing.T) {
	t.Helper()
	if pgtest.Owned(t) {
		t.Parallel()
	}
}

func TestCertify(t *testing.T) {
	besideOthers(t)
	bin := binary(t)
	dsn := pgtest.DSN(t)

	t.Run("reference is certified", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "c.json")
		junit := filepath.Join(t.TempDir(), "c.xml")
		// A bystander: a connection on the same server that the run did not
		// open. The run kills, cuts and terminates connections; never this one.
		bystander, err := pgx.Connect(t.Context(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer bystander.Close(context.Background())
		code, stdout, stderr := runCertify(t, bin, nil, "--adapter", "reference", "--dsn", dsn, "--json", path, "--junit", junit)
		// On a server named by a DSN the rules that crash the server cannot
		// run: the run is partial, exit code 3, never certified.
		if code != exitPartial {
			t.Fatalf("exit code %d; want %d\nstdout:\n%s\nstderr:\n%s", code, exitPartial, stdout, stderr)
		}
		if _, err := bystander.Exec(t.Context(), "SELECT 1"); err != nil {
			t.Errorf("a bystander connection did not survive the certify run: %v", err)
		}
		// On a server named by a DSN, the fixtures that crash the server
		// are not-supported: what list says before the run.
		// (crash-recovery, and failover, which needs a formation harmless
		// starts.)
		needsOwned, crashing, mustCrashing := notRunOnADSN(t, "reference"), 0, 0
		for _, f := range fixtures.Catalog() {
			if needsOwned[f.ID] != "" {
				crashing += len(f.Rules)
				for _, r := range f.Rules {
					if r.Level == fixtures.Must {
						mustCrashing++
					}
				}
			}
		}
		// The last lines: the verdict, the counts, and which MUST rules did
		// not run, and why.
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		tail := lines[max(0, len(lines)-mustCrashing-3):]
		want := []string{
			"PARTIAL: reference",
			fmt.Sprintf("%d passed, 0 failed, %d not-supported", len(fixtures.Rules())-crashing, crashing),
			fmt.Sprintf("%d MUST rules did not run, so this run certifies nothing about them:", mustCrashing),
		}
		for i, w := range want {
			if i >= len(tail) || tail[i] != w {
				t.Errorf("the last lines:\n%s\nwant them to start with:\n%s", strings.Join(tail, "\n"), strings.Join(want, "\n"))
				break
			}
		}
		for _, line := range tail[min(len(want), len(tail)):] {
			fixture, _, _ := strings.Cut(strings.TrimSpace(line), ".")
			if why := needsOwned[fixture]; why == "" || !strings.HasPrefix(line, "  ") || !strings.Contains(line, why) {
				t.Errorf("a line of the rules that did not run says %q; want a rule of crash-recovery or failover and why", line)
			}
		}
		// One progress line per fixture, none per spec without -v.
		ran, _ := progressLines(stderr)
		if len(ran) != len(fixtures.Catalog()) || strings.Contains(stderr, "PASSED") {
			t.Errorf("progress lines for %v; want one per fixture of the catalogue, and no line per spec:\n%s", ran, stderr)
		}
		cert := readCertificate(t, path)
		if cert.Status != certificate.StatusPartial || cert.Certified || cert.Adapter != "reference" || cert.SuiteVersion != suite.Version || !strings.HasPrefix(cert.Database, "1") {
			t.Errorf("certificate header wrong: %+v", cert)
		}
		passed := map[string]bool{}
		for _, r := range cert.Rules {
			if r.Verdict == certificate.VerdictPass {
				passed[r.Fixture] = true
			}
			if why := needsOwned[r.Fixture]; why != "" && (r.Verdict != certificate.VerdictNotSupported || !strings.Contains(r.Message, why)) {
				t.Errorf("rule %s on a DSN: verdict %s (%s); want not-supported, saying why", r.ID, r.Verdict, r.Message)
			}
		}
		for _, f := range fixtures.Catalog() {
			f := f.ID
			if !passed[f] && needsOwned[f] == "" {
				t.Errorf("no passing rule of fixture %s in the certificate", f)
			}
		}
		checkJUnit(t, junit, cert)
		if cert.Faults["proxy:cut@before-commit"] == 0 || cert.Faults["db:gate@effect"] < int64(suite.DefaultOverlapRounds) {
			t.Errorf("faults fired: %v; want the cuts and holds the fixtures plan", cert.Faults)
		}
	})

	t.Run("a filtered run is partial", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "c.json")
		code, stdout, _ := runCertify(t, bin, nil, "--adapter", "reference", "--dsn", dsn, "--json", path, "--label-filter", "fixture:double-delivery")
		if code != exitPartial {
			t.Fatalf("exit code %d; want %d\n%s", code, exitPartial, stdout)
		}
		cert := readCertificate(t, path)
		for _, r := range cert.Rules {
			want := certificate.VerdictSkipped
			if r.Fixture == catalogid.DoubleDelivery {
				want = certificate.VerdictPass
			}
			if r.Verdict != want {
				t.Errorf("rule %s: verdict %s; want %s", r.ID, r.Verdict, want)
			}
		}
		ran := 0
		for _, r := range fixtures.Rules() {
			if r.Fixture == catalogid.DoubleDelivery {
				ran++
			}
		}
		if want := fmt.Sprintf("\nPARTIAL: reference\n%d passed, 0 failed, %d skipped\n", ran, len(fixtures.Rules())-ran); !strings.Contains(stdout, want) {
			t.Errorf("summary lines wrong:\n%s", stdout)
		}
		if cert.Status != certificate.StatusPartial || cert.Certified {
			t.Errorf("a filtered run's status %s, certified %t; want partial", cert.Status, cert.Certified)
		}
	})

	t.Run("no database exits 2 and names all three ways", func(t *testing.T) {
		code, _, stderr := runCertify(t, bin, unset("HARMLESS_DSN", "DATABASE_URL"), "--adapter", "reference", "--provision", "dsn")
		if code != exitUsage {
			t.Fatalf("exit code %d; want %d\n%s", code, exitUsage, stderr)
		}
		for _, want := range []string{"HARMLESS_DSN", "container", "initdb"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("error does not mention %q:\n%s", want, stderr)
			}
		}
	})

	t.Run("an unreachable DSN exits 2", func(t *testing.T) {
		code, _, stderr := runCertify(t, bin, nil, "--adapter", "reference", "--dsn", "postgres://nobody@127.0.0.1:1/none?connect_timeout=5")
		if code != exitUsage {
			t.Fatalf("exit code %d; want %d\n%s", code, exitUsage, stderr)
		}
	})
}
