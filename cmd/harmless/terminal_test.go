package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/execchild"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/suite"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// maxTerminalLine bounds a line of certify's output: an excerpt's line,
// indented.
const maxTerminalLine = 420

// failureBlocks returns the report of each failed rule on stdout: its FAIL
// line and the indented lines of its message, by rule id.
func failureBlocks(stdout string) map[string][]string {
	blocks := map[string][]string{}
	var current string
	for _, line := range strings.Split(stdout, "\n") {
		switch {
		case strings.HasPrefix(line, "FAIL "):
			current = strings.TrimPrefix(line, "FAIL ")
			blocks[current] = []string{line}
		case current != "" && strings.HasPrefix(line, "  "):
			blocks[current] = append(blocks[current], line)
		default:
			current = ""
		}
	}
	return blocks
}

// checkTerminalReport checks that each failed rule's report on stdout is
// short: at most certificate.ExcerptLines lines of message, none of them long.
func checkTerminalReport(t *testing.T, stdout string, failed int) {
	t.Helper()
	blocks := failureBlocks(stdout)
	if len(blocks) != failed {
		t.Errorf("%d failed rules reported on stdout; want %d", len(blocks), failed)
	}
	for id, lines := range blocks {
		if len(lines) > 1+certificate.ExcerptLines {
			t.Errorf("rule %s takes %d lines on stdout; want at most %d:\n%s", id, len(lines), 1+certificate.ExcerptLines, strings.Join(lines, "\n"))
		}
	}
	for _, line := range strings.Split(stdout, "\n") {
		if len(line) > maxTerminalLine {
			t.Errorf("a line of %d bytes on stdout; want at most %d: %.300q…", len(line), maxTerminalLine, line)
		}
	}
}

// TestTerminalReportIsShort prints the result of a certificate whose
// failed rule has many problems, one of them quoting a 1 MiB id: the
// terminal shows the first problems and how many more there are, names
// the JSON certificate, and prints no long line.
func TestTerminalReportIsShort(t *testing.T) {
	var problems []string
	for i := 1; i <= 30; i++ {
		problems = append(problems, fmt.Sprintf("- round %d: event e/%d applied 2 times; 16 deliveries:\n  Applied: 2\n  Duplicate: 14\n  error: cannot handle %q", i, i, strings.Repeat("m", 1<<20)))
	}
	msg := "[concurrent-delivery / plain] MUST concurrent-delivery.one-effect violated: one effect\n" + strings.Join(problems, "\n") + "\nThis usually means: a race."
	cert := certificate.Certificate{Adapter: "sample", Status: certificate.StatusNotCertified, Rules: []certificate.RuleResult{
		{ID: catalogid.ConcurrentDeliveryOneEffect, Fixture: catalogid.ConcurrentDelivery, Level: fixtures.Must, Verdict: certificate.VerdictFail, Message: msg},
		{ID: catalogid.DoubleDeliveryOneEffect, Fixture: catalogid.DoubleDelivery, Level: fixtures.Must, Verdict: certificate.VerdictPass},
	}}
	for _, jsonPath := range []string{"", "/tmp/c.json"} {
		var stdout bytes.Buffer
		p := newPrinter(&stdout, &bytes.Buffer{}, normal, func(string) string { return "" })
		p.jsonPath = jsonPath
		p.result(cert)
		out := stdout.String()
		checkTerminalReport(t, out, 1)
		where := "run again with --json FILE for the full evidence"
		if jsonPath != "" {
			where = "the full evidence is in the JSON certificate " + jsonPath
		}
		for _, want := range []string{"- round 1:", "- round 2:", "This usually means: a race.", "more problems; " + shortenedHint, where} {
			if !strings.Contains(out, want) {
				t.Errorf("--json %q: stdout lacks %q:\n%s", jsonPath, want, out)
			}
		}
		if len(out) > 32<<10 {
			t.Errorf("%d bytes on stdout for one failed rule", len(out))
		}
	}
}

// TestCrashingChildReportIsShort certifies, with the built command, a
// child that crashes at every delivery, so that every rule fails with many
// problems: each failed rule's report on stdout stays short (a run printed
// 345 KB before), while the JSON certificate keeps every problem.
func TestCrashingChildReportIsShort(t *testing.T) {
	besideOthers(t)
	bin := binary(t)
	dsn := pgtest.DSN(t)
	path := filepath.Join(t.TempDir(), "c.json")
	code, stdout, stderr := runCertify(t, bin, nil, "--exec", execchild.Command(execchild.CrashOnDeliver), "--dsn", dsn, "--json", path)
	if code != exitNotCertified {
		t.Fatalf("exit code %d; want %d\nstdout:\n%s\nstderr:\n%s", code, exitNotCertified, stdout, stderr)
	}
	cert := readCertificate(t, path)
	failed := cert.Count(certificate.VerdictFail)
	if info, err := os.Stat(path); err == nil {
		t.Logf("%d failed rules: %d bytes, %d lines on stdout; a JSON certificate of %d bytes", failed, len(stdout), strings.Count(stdout, "\n"), info.Size())
	}
	checkTerminalReport(t, stdout, failed)
	if !strings.Contains(stdout, "the full evidence is in the JSON certificate "+path) {
		t.Errorf("stdout does not say where the full evidence is:\n%s", stdout)
	}

	// The certificate keeps every problem: each round of concurrent
	// delivery, each redelivery of double delivery.
	messages := map[string]string{}
	for _, r := range cert.Rules {
		messages[r.ID] = r.Message
	}
	var want []string
	for i := 1; i <= suite.DefaultPlainRounds; i++ {
		want = append(want, fmt.Sprintf("\n- round %d (plain,", i))
	}
	for i := 1; i <= suite.DefaultOverlapRounds; i++ {
		want = append(want, fmt.Sprintf("\n- round %d (overlap,", i))
	}
	for _, w := range want {
		if !strings.Contains(messages[catalogid.ConcurrentDeliveryOneApplied], w) {
			t.Errorf("the certificate's %s lost the problem %q", catalogid.ConcurrentDeliveryOneApplied, w)
		}
	}
	for i := 1; i <= 10; i++ {
		if w := fmt.Sprintf("\n- redelivery %d (attempt", i); !strings.Contains(messages[catalogid.DoubleDeliveryRedeliveryDuplicate], w) {
			t.Errorf("the certificate's %s lost the problem %q", catalogid.DoubleDeliveryRedeliveryDuplicate, w)
		}
	}
}
