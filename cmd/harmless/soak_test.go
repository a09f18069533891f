package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/internal/execchild"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/soak"
)

// runSoak runs the built command's soak and reads its JSON report.
func runSoak(t *testing.T, bin string, args ...string) (int, soak.Report, string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "soak.json")
	cmd := append([]string{"--dsn", pgtest.DSN(t), "--json", path}, args...)
	code, stdout, stderr := runCommand(t, bin, nil, append([]string{"soak"}, cmd...)...)
	var rep soak.Report
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("exit %d, no JSON report: %v\nstdout:\n%s\nstderr:\n%s", code, err, stdout, stderr)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("the JSON report does not parse: %v", err)
	}
	return code, rep, stdout, stderr
}

// The command's verdicts, end to end: the reference soaks clean (exit 0),
// an in-memory claim duplicates across instances (exit 1), and both reports
// are written.
func TestSoakCommand(t *testing.T) {
	besideOthers(t)
	bin := binary(t)

	t.Run("reference is clean", func(t *testing.T) {
		code, rep, stdout, stderr := runSoak(t, bin, "--adapter", "reference", "--duration", "3s", "--nemesis", "kill,db-raise,cut-after-commit", "--seed", "7")
		if code != exitClean || rep.Verdict != "clean" || !strings.Contains(stdout, "soak of reference: CLEAN") {
			t.Fatalf("exit %d, verdict %q\nstdout:\n%s\nstderr:\n%s", code, rep.Verdict, stdout, stderr)
		}
		if rep.Config.Seed != 7 || rep.Totals.Events == 0 || rep.Environment.Harmless == "" {
			t.Errorf("report: seed %d, %d events, harmless %q", rep.Config.Seed, rep.Totals.Events, rep.Environment.Harmless)
		}
	})

	t.Run("in-memory duplicates", func(t *testing.T) {
		html := filepath.Join(t.TempDir(), "soak.html")
		code, rep, stdout, stderr := runSoak(t, bin, "--adapter", "broken-in-memory", "--duration", "2s", "--nemesis", "none", "--html", html)
		if code != exitAnomalies || rep.Verdict != "anomalies" || rep.Totals.Duplicated == 0 {
			t.Fatalf("exit %d, verdict %q, totals %+v\nstdout:\n%s\nstderr:\n%s", code, rep.Verdict, rep.Totals, stdout, stderr)
		}
		if first := rep.Anomalies[0]; !strings.Contains(stdout, strings.Join(first.Kinds, ", ")+" "+first.ID+": ") {
			t.Errorf("stdout does not name the first anomaly, %v %s:\n%s", first.Kinds, first.ID, stdout)
		}
		page, err := os.ReadFile(html)
		if err != nil || !strings.Contains(string(page), rep.Anomalies[0].ID) {
			t.Errorf("the HTML report (%v) does not name the first anomaly %s", err, rep.Anomalies[0].ID)
		}
	})
}

// The Python example soaks clean over the exec protocol, each instance a
// process of its own.
func TestSoakExecPython(t *testing.T) {
	python := needPsycopg(t)
	bin := binary(t)
	script := filepath.Join(repoRoot(t), "examples", "python-psycopg", "impl.py")
	code, rep, stdout, stderr := runSoak(t, bin, "--exec", python+" "+script, "--duration", "3s", "--instances", "2", "--nemesis", "kill,db-raise")
	if code != exitClean || rep.Totals.Events == 0 {
		t.Fatalf("exit %d, totals %+v\nstdout:\n%s\nstderr:\n%s", code, rep.Totals, stdout, stderr)
	}
}

// SIGINT ends the load: the soak heals, settles, checks what ran, writes its
// report marked interrupted and exits 130.
func TestSoakInterrupt(t *testing.T) {
	besideOthers(t)
	bin := binary(t)
	path := filepath.Join(t.TempDir(), "soak.json")
	ctx, cancel := context.WithTimeout(t.Context(), interruptLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "soak", "--adapter", "reference", "--dsn", pgtest.DSN(t),
		"--duration", "1h", "--nemesis", "kill", "--json", path)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The first progress line (every 10 s off a terminal) says the load
	// is under way.
	var log strings.Builder
	lines := bufio.NewScanner(stderr)
	for lines.Scan() {
		log.WriteString(lines.Text() + "\n")
		if strings.HasPrefix(lines.Text(), "harmless soak: load ") {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() {
		log.WriteString(lines.Text() + "\n")
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("exit: %v; want 130\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), log.String())
	}
	var rep soak.Report
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no report: %v", err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Interrupted || !rep.Clean() || rep.Totals.Events == 0 || !strings.Contains(stdout.String(), "interrupted: the report covers what ran") {
		t.Errorf("interrupted %t, totals %+v\nstdout:\n%s", rep.Interrupted, rep.Totals, stdout.String())
	}
	if !strings.Contains(log.String(), "SIGINT: ending the load") {
		t.Errorf("stderr does not say what the signal does:\n%s", log.String())
	}
}

// A soak of a child that crashes says so first. One that crashes now and
// then is restarted and soaks clean (exit 0), its crashes counted; one that
// crashes at every delivery ends once nothing was acknowledged for
// --no-ack-timeout, long before its duration, with exit 4 and the crash
// named, not with every event lost.
func TestSoakOfACrashingChild(t *testing.T) {
	besideOthers(t)
	bin := binary(t)

	t.Run("crashes now and then", func(t *testing.T) {
		command := execchild.EnvCrashAt + "=40 " + execchild.Command(execchild.CrashAtNth)
		code, rep, stdout, stderr := runSoak(t, bin, "--exec", command, "--duration", "3s", "--instances", "2", "--nemesis", "none")
		lines := strings.Split(stdout, "\n")
		if code != exitClean || rep.Verdict != "clean" || rep.CrashCount() == 0 || len(lines) < 2 {
			t.Fatalf("exit %d, verdict %q, crashes %+v\nstdout:\n%s\nstderr:\n%s", code, rep.Verdict, rep.Crashes, stdout, stderr)
		}
		if want := "  crashes: the implementation's processes crashed " + harness.Times(rep.CrashCount()) + " and were restarted (instance 1: "; !strings.HasPrefix(lines[1], want) ||
			!strings.Contains(lines[1], execchild.LastWords) {
			t.Errorf("the summary does not lead with the crashes (%q, the last words):\n%s", want, stdout)
		}
	})

	t.Run("crashes at every delivery", func(t *testing.T) {
		code, rep, stdout, stderr := runSoak(t, bin, "--exec", execchild.Command(execchild.CrashOnDeliver), "--duration", "2m", "--instances", "2",
			"--nemesis", "none", "--no-ack-timeout", "2s")
		if code != exitNoAck || rep.Verdict != "no-ack" || rep.Totals.Lost != 0 || rep.Elapsed > time.Minute {
			t.Fatalf("exit %d, verdict %q after %s, totals %+v\nstdout:\n%s\nstderr:\n%s", code, rep.Verdict, rep.Elapsed, rep.Totals, stdout, stderr)
		}
		for _, want := range []string{": NO-ACK\n  crashes: the implementation's processes crashed ",
			"  stopped early: no delivery was acknowledged for 2", "during which the implementation's processes crashed",
			"events never acknowledged or refused are unsettled, not judged lost", "anomalies: 0 lost"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, stdout)
			}
		}
		if !strings.Contains(rep.Error, execchild.LastWords) || len(rep.Crashes) != 2 {
			t.Errorf("the report's error %q does not quote the crash, or its crashes %+v are not per instance", rep.Error, rep.Crashes)
		}
	})
}

// A nemesis the database cannot take is a usage error, said before
// anything starts: a failover needs a replicated formation, and on one a
// crash is a failover.
func TestSoakNemesisTheDatabaseCannotTake(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"failover on a DSN", []string{"--dsn", "postgres://nobody@127.0.0.1:1/none", "--nemesis", "kill,failover"},
			"--nemesis failover: the database is one server: a failover needs a replicated formation (use --provision ha)"},
		{"failover on a cluster", []string{"--provision", "cluster", "--nemesis", "failover"},
			"--nemesis failover: the database is one server"},
		{"crash on a formation", []string{"--provision", "ha", "--nemesis", "crash"},
			"--nemesis crash: on a replicated formation a crash of the primary is a failover: use the failover nemesis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := soakCommand(append([]string{"--adapter", "reference", "--duration", "1s"}, tc.args...), &stdout, &stderr)
			if code != exitUsage || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr.String(), exitUsage, tc.want)
			}
			if strings.Contains(stderr.String(), "starting") {
				t.Errorf("something was started before the nemeses were checked:\n%s", stderr.String())
			}
		})
	}
}
