package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// interruptLimit bounds a certify run that was sent a signal: it must
// clean up and exit well within it.
const interruptLimit = 2 * time.Minute

var (
	runIDLine = regexp.MustCompile(`, run ([0-9a-f]{8}), seed `)
	// rulePassed matches the progress line of a rule that passed, e.g.
	// "[   1.9s] PASSED  ambiguous-commit / ...".
	rulePassed  = regexp.MustCompile(`^\[\s*[0-9.]+s\] PASSED `)
	clusterLine = regexp.MustCompile(`starting throwaway cluster in (\S+)`)
)

// interrupted is what a certify run that was sent a signal left.
type interrupted struct {
	code           int
	stdout, stderr string
	cert           certificate.Certificate
}

// interruptCertify runs certify with -v and args, sends sig once the
// third rule has passed, and returns what the run left.
//
// The third rule is the first of bad-input, a play of two rules: the
// signal lands while the play runs or between the judging of its rules,
// and the run must clean up all the same. The two rules before it have
// surely passed by then.
func interruptCertify(t *testing.T, bin string, sig syscall.Signal, args ...string) interrupted {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.json")
	ctx, cancel := context.WithTimeout(t.Context(), interruptLimit+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"certify", "-v", "--adapter", "reference", "--json", path}, args...)...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderrPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Read stderr line by line; signal once three rules have passed, so
	// that the run is in the middle of its fixtures.
	var stderr strings.Builder
	lines := bufio.NewScanner(stderrPipe)
	lines.Buffer(make([]byte, 64<<10), 16<<20)
	signalled, passed := false, 0
	var signalledAt time.Time
	for lines.Scan() {
		line := lines.Text()
		stderr.WriteString(line + "\n")
		if rulePassed.MatchString(line) {
			passed++
		}
		if !signalled && passed == 3 {
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			signalled, signalledAt = true, time.Now()
		}
	}
	err = cmd.Wait()
	if !signalled {
		t.Fatalf("fewer than three rules passed, so no signal was sent (%v)\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	t.Logf("the run ended %s after the signal", time.Since(signalledAt).Round(time.Millisecond))
	var exit *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run: %v", err)
	}
	return interrupted{code: code, stdout: stdout.String(), stderr: stderr.String(), cert: readCertificate(t, path)}
}

// check judges an interrupted run: the exit code of the signal, the
// INTERRUPTED verdict line, the certificate's status, and no rule failed
// because of the interruption.
func (r interrupted) check(t *testing.T, want int) {
	t.Helper()
	if r.code != want {
		t.Errorf("exit code %d; want %d", r.code, want)
	}
	if !strings.Contains(r.stdout, "\nINTERRUPTED: reference\n") || strings.Contains(r.stdout, "NOT CERTIFIED") {
		t.Errorf("stdout does not end with the INTERRUPTED verdict:\n%s", r.stdout)
	}
	if r.cert.Status != certificate.StatusInterrupted || r.cert.Certified || r.cert.Interrupted == "" {
		t.Errorf("certificate: status %s, certified %t, interrupted %q; want interrupted", r.cert.Status, r.cert.Certified, r.cert.Interrupted)
	}
	passed := 0
	for _, rule := range r.cert.Rules {
		switch rule.Verdict {
		case certificate.VerdictFail:
			t.Errorf("rule %s failed in an interrupted run: %s", rule.ID, rule.Message)
		case certificate.VerdictPass:
			passed++
		}
	}
	if passed < 2 || passed == len(r.cert.Rules) {
		t.Errorf("%d of %d rules passed; want the two rules before the signal passed and the run stopped in the middle", passed, len(r.cert.Rules))
	}
}

// TestInterruptCleansUpAndSaysSo sends SIGINT to a certify run on a DSN
// and SIGTERM to one on a throwaway cluster, each in the middle of its
// fixtures: each must clean up (no schema of the run left on the DSN; no
// cluster directory or server process left), exit 130 or 143, print
// INTERRUPTED and write a certificate whose status says so, with no rule
// failed because of it.
func TestInterruptCleansUpAndSaysSo(t *testing.T) {
	bin := binary(t)
	t.Run("SIGINT on a DSN", func(t *testing.T) {
		dsn := pgtest.DSN(t)
		r := interruptCertify(t, bin, syscall.SIGINT, "--dsn", dsn)
		r.check(t, 130)
		m := runIDLine.FindStringSubmatch(r.stderr)
		if m == nil {
			t.Fatalf("the run's id is not in its log:\n%s", r.stderr)
		}
		var left []string
		rows, err := pgtest.Pool(t).Query(t.Context(), `SELECT nspname FROM pg_namespace WHERE nspname LIKE $1`, "harmless\\_"+m[1]+"\\_%")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			left = append(left, name)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(left) > 0 {
			t.Errorf("the interrupted run left its schemas: %v", left)
		}
	})
	t.Run("SIGTERM on a throwaway cluster", func(t *testing.T) {
		if _, err := exec.LookPath("initdb"); err != nil {
			if matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(matches) == 0 {
				t.Skip("no PostgreSQL server binaries for a throwaway cluster")
			}
		}
		r := interruptCertify(t, bin, syscall.SIGTERM, "--provision", "cluster")
		r.check(t, 143)
		m := clusterLine.FindStringSubmatch(r.stderr)
		if m == nil {
			t.Fatalf("the cluster's directory is not in the run's log:\n%s", r.stderr)
		}
		if _, err := os.Stat(m[1]); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the interrupted run left its cluster directory %s (%v)", m[1], err)
		}
		if procs := processesMentioning(t, m[1]); len(procs) > 0 {
			t.Errorf("the interrupted run left processes of its cluster: %v", procs)
		}
	})
}

// processesMentioning lists the processes whose command line mentions s.
func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range dirs {
		cmdline, err := os.ReadFile(d)
		if err != nil {
			continue // gone meanwhile
		}
		if bytes.Contains(cmdline, []byte(s)) {
			out = append(out, strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}
