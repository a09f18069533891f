package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/speclabel"
)

// TestABadOutputPathStartsNothing: a report path that cannot be written is
// a usage error before anything runs, naming the flag and the path. With
// no database to be had, a run that started anyway would fail on the
// database instead, without naming the flag.
func TestABadOutputPathStartsNothing(t *testing.T) {
	unsetenv(t, "HARMLESS_DSN", "DATABASE_URL")
	t.Setenv(stepSummaryEnv, "")
	missing := filepath.Join(t.TempDir(), "no-such-dir", "report")
	dir := t.TempDir()
	for _, tc := range []struct {
		command, flag, path string
	}{
		{"certify", "--json", missing},
		{"certify", "--junit", missing},
		{"certify", "--markdown", missing},
		{"certify", "--json", dir},
		{"soak", "--json", missing},
		{"soak", "--html", missing},
	} {
		t.Run(tc.command+" "+tc.flag+" "+filepath.Base(tc.path), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run([]string{tc.command, "--adapter", "reference", "--provision", "dsn", tc.flag, tc.path}, &stdout, &stderr)
			if code != exitUsage {
				t.Errorf("exit code %d; want %d", code, exitUsage)
			}
			if want := tc.flag + " " + tc.path + ": cannot be written"; !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
			}
			if stdout.Len() > 0 {
				t.Errorf("something ran; stdout:\n%s", stdout.String())
			}
		})
	}
}

// TestCheckWritableChangesNothing: checking a path leaves an existing
// file's content as it was, and no file where there was none.
func TestCheckWritableChangesNothing(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "old.json")
	if err := os.WriteFile(existing, []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(dir, "new.json")
	if err := checkOutputPaths(outputPath{"--json", existing}, outputPath{"--junit", fresh}); err != nil {
		t.Fatalf("writable paths refused: %v", err)
	}
	if b, err := os.ReadFile(existing); err != nil || string(b) != "kept" {
		t.Errorf("the existing file holds %q (%v) after the check; want it unchanged", b, err)
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("the check left %s behind (%v)", fresh, err)
	}
}

// TestAReportThatFailsAtTheEndFollowsTheVerdicts: a report that passes the
// check before the run and cannot be written after it (the run's file
// size limit, RLIMIT_FSIZE, is smaller than the certificate: the check
// writes nothing, the write fails with EFBIG) costs the run its exit
// code, not its verdicts: they are printed first.
func TestAReportThatFailsAtTheEndFollowsTheVerdicts(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skipf("no prlimit (util-linux) to limit the run's file size: %v", err)
	}
	bin := binary(t)
	dsn := pgtest.DSN(t)
	path := filepath.Join(t.TempDir(), "c.json")
	code, stdout, stderr := runCommand(t, prlimit, nil, "--fsize=64", "--", bin, "certify",
		"--adapter", "reference", "--dsn", dsn, "--label-filter", "fixture:double-delivery", "--json", path)
	if code != exitUsage {
		t.Errorf("exit code %d; want %d", code, exitUsage)
	}
	if !strings.Contains(stdout, "\nPARTIAL: reference\n") || !strings.Contains(stdout, "double-delivery.one-effect") {
		t.Errorf("stdout lacks the verdicts:\n%s", stdout)
	}
	if !strings.Contains(stderr, "--json "+path+": ") {
		t.Errorf("stderr does not name the report that could not be written:\n%s", stderr)
	}
}

// TestReportsNeedFilesOfTheirOwn: two reports naming one file (by the
// same path or through a link), and a path that is not a regular file
// (a named pipe, which would block the run for ever before it starts,
// or a device), are refused before the run, with exit code 2.
func TestReportsNeedFilesOfTheirOwn(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "c.json")
	link := filepath.Join(dir, "link.json")
	if err := os.WriteFile(report, []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(report, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := binary(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"one path twice", []string{"--json", report, "--markdown", report}, "--json and --markdown both name " + report},
		{"a relative path to the same file", []string{"--json", report, "--junit", filepath.Join(dir, ".", "c.json")}, "--json and --junit both name"},
		{"a link to the same file", []string{"--markdown", report, "--json", link}, "--json and --markdown both name " + report},
		{"a named pipe", []string{"--json", fifo}, "--json " + fifo + ": cannot be written, so the run was not started: it is not a regular file (a named pipe)"},
		{"a device", []string{"--junit", os.DevNull}, "it is not a regular file (a character device)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, append([]string{"certify", "--adapter", "reference", "--dsn", "postgres://nobody@127.0.0.1:1/none"}, tc.args...)...)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != exitUsage || !strings.Contains(string(out), tc.want) {
				t.Errorf("%v, output:\n%s\nwant exit code %d and %q", err, out, exitUsage, tc.want)
			}
		})
	}
	if b, err := os.ReadFile(report); err != nil || string(b) != "kept" {
		t.Errorf("the report file holds %q (%v); want it untouched", b, err)
	}
}

// TestFixtureAndRuleSelectTheirRules: --fixture and --rule select the
// rules of the fixtures and the rules they name, and --label-filter
// narrows that.
func TestFixtureAndRuleSelectTheirRules(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want func(fixtures.Rule) bool
	}{
		{[]string{"--fixture", "double-delivery, bad-input"}, func(r fixtures.Rule) bool {
			return r.Fixture == catalogid.DoubleDelivery || r.Fixture == catalogid.BadInput
		}},
		{[]string{"--fixture", "bad-input", "--rule", catalogid.CrashRecoveryAppliedSurvives}, func(r fixtures.Rule) bool {
			return r.Fixture == catalogid.BadInput || r.ID == catalogid.CrashRecoveryAppliedSurvives
		}},
		{[]string{"--fixture", "failure-after-marker", "--label-filter", "level:SHOULD"}, func(r fixtures.Rule) bool {
			return r.Fixture == catalogid.FailureAfterMarker && r.Level == fixtures.Should
		}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			f, err := parseCertify(append([]string{"--adapter", "reference"}, tc.args...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			match, err := types.ParseLabelFilter(f.selection.filter())
			if err != nil {
				t.Fatalf("filter %q: %v", f.selection.filter(), err)
			}
			for _, r := range fixtures.Rules() {
				if got := match(speclabel.Of(r)); got != tc.want(r) {
					t.Errorf("rule %s selected: %t; want %t (filter %q)", r.ID, got, !got, f.selection.filter())
				}
			}
		})
	}
}

// replayLine is the line a repeat prints about the run that failed.
var replayLine = regexp.MustCompile(`(?m)^run (\d+) of (\d+) failed; replay it with --seed (\d+)$`)

// TestRepeatStopsAtTheFirstFailureAndNamesItsSeed: --repeat over an
// adapter that fails stops at the first failed run and prints its seed;
// the certificate of that run records that seed, and --seed with it makes
// a run with the same seed that fails the same rules. Over one that
// passes, every run has a seed of its own.
func TestRepeatStopsAtTheFirstFailureAndNamesItsSeed(t *testing.T) {
	bin := binary(t)
	dsn := pgtest.DSN(t)

	path := filepath.Join(t.TempDir(), "c.json")
	code, stdout, stderr := runCertify(t, bin, nil, "--adapter", "broken-in-memory", "--dsn", dsn, "--fixture", "double-delivery", "--repeat", "3", "--json", path, "-q")
	if code != exitNotCertified {
		t.Fatalf("exit code %d; want %d\nstdout:\n%s\nstderr:\n%s", code, exitNotCertified, stdout, stderr)
	}
	m := replayLine.FindStringSubmatch(stdout)
	if m == nil || m[1] != "1" || m[2] != "3" {
		t.Fatalf("stdout does not say run 1 of 3 failed, with its seed:\n%s", stdout)
	}
	if strings.Contains(stderr, "run 2 of 3") {
		t.Errorf("the repeat went on after the failed run:\n%s", stderr)
	}
	seed, err := strconv.ParseUint(m[3], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	failed := readCertificate(t, path)
	if failed.Seed != seed {
		t.Errorf("the failed run's certificate records seed %d; the replay line says %d", failed.Seed, seed)
	}

	replay := filepath.Join(t.TempDir(), "replay.json")
	code, stdout, stderr = runCertify(t, bin, nil, "--adapter", "broken-in-memory", "--dsn", dsn, "--fixture", "double-delivery", "--seed", m[3], "--json", replay)
	if code != exitNotCertified {
		t.Fatalf("replay: exit code %d; want %d\nstdout:\n%s\nstderr:\n%s", code, exitNotCertified, stdout, stderr)
	}
	replayed := readCertificate(t, replay)
	if replayed.Seed != seed || !strings.Contains(stdout, fmt.Sprintf(", seed %d\n", seed)) {
		t.Errorf("the replay ran with seed %d; want %d\n%s", replayed.Seed, seed, stdout)
	}
	for i, r := range replayed.Rules {
		if i < len(failed.Rules) && r.Verdict != failed.Rules[i].Verdict {
			t.Errorf("rule %s: %s in the replay, %s in the failed run", r.ID, r.Verdict, failed.Rules[i].Verdict)
		}
	}

	passing := filepath.Join(t.TempDir(), "pass.json")
	code, stdout, stderr = runCertify(t, bin, nil, "--adapter", "reference", "--dsn", dsn, "--fixture", "double-delivery", "--repeat", "2", "--json", passing, "-q")
	if code != exitPartial {
		t.Fatalf("a passing repeat: exit code %d; want %d\nstdout:\n%s\nstderr:\n%s", code, exitPartial, stdout, stderr)
	}
	none := regexp.MustCompile(`(?m)^2 runs, none failed \(seeds (\d+), (\d+)\)$`).FindStringSubmatch(stdout)
	if none == nil || none[1] == none[2] {
		t.Fatalf("stdout does not name two runs with seeds of their own:\n%s", stdout)
	}
	if !strings.Contains(stderr, "run 1 of 2 (seed "+none[1]+"): ") {
		t.Errorf("stderr does not report the first run and its seed:\n%s", stderr)
	}
	if last := readCertificate(t, passing); strconv.FormatUint(last.Seed, 10) != none[2] {
		t.Errorf("the certificate records seed %d; want the last run's, %s", last.Seed, none[2])
	}
}
