package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

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
	t.Setenv("HARMLESS_DSN", "")
	t.Setenv("DATABASE_URL", "")
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
// check before the run and cannot be written after it (/dev/full opens,
// and every write to it fails) costs the run its exit code, not its
// verdicts: they are printed first.
func TestAReportThatFailsAtTheEndFollowsTheVerdicts(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skipf("no /dev/full to fail a write: %v", err)
	}
	bin := binary(t)
	dsn := pgtest.DSN(t)
	code, stdout, stderr := runCertify(t, bin, nil, "--adapter", "reference", "--dsn", dsn, "--label-filter", "fixture:double-delivery", "--json", "/dev/full")
	if code != exitUsage {
		t.Errorf("exit code %d; want %d", code, exitUsage)
	}
	if !strings.Contains(stdout, "\nPARTIAL: reference\n") || !strings.Contains(stdout, "double-delivery.one-effect") {
		t.Errorf("stdout lacks the verdicts:\n%s", stdout)
	}
	if !strings.Contains(stderr, "--json /dev/full: ") {
		t.Errorf("stderr does not name the report that could not be written:\n%s", stderr)
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
