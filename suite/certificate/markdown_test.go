package certificate

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/catalogid"
)

// TestPartialMarkdownSaysWhatDidNotRun: the summary of a partial run lists
// each MUST rule that did not run, with the first line of why.
func TestPartialMarkdownSaysWhatDidNotRun(t *testing.T) {
	c := Certificate{Adapter: "sample", Faults: map[string]int64{}, Rules: ruleVerdicts(VerdictPass, map[string]Verdict{
		catalogid.CrashRecoveryAppliedSurvives: VerdictNotSupported, catalogid.CrashRecoveryInFlightExactlyOnce: VerdictNotSupported,
	})}
	for i := range c.Rules {
		if c.Rules[i].Verdict == VerdictNotSupported {
			c.Rules[i].Message = "[crash-recovery] needs a server the harness owns\nmore"
		}
	}
	c.Status = StatusOf(c.Rules)
	var b bytes.Buffer
	if err := c.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## harmless: PARTIAL: `sample`\n",
		"No rule failed, but 2 MUST rules did not run",
		"- `" + catalogid.CrashRecoveryAppliedSurvives + "` (not-supported): [crash-recovery] needs a server the harness owns\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
}

// sampleCertificate is a certificate with every verdict: a failure whose
// message holds a code fence and a pipe, a not-supported rule, a skipped
// one, and passes.
func sampleCertificate() Certificate {
	except := map[string]Verdict{
		catalogid.ConflictingPayloadConflictDetected: VerdictFail,
		catalogid.CrashRecoveryAppliedSurvives:       VerdictNotSupported,
		catalogid.BadInputRunContinues:               VerdictSkipped,
	}
	rules := ruleVerdicts(VerdictPass, except)
	for i, r := range rules {
		switch r.Verdict {
		case VerdictFail:
			rules[i].Message = "MUST violated: answered Duplicate\n```\nnot the end | of anything\n```"
		case VerdictNotSupported:
			rules[i].Message = "[crash-recovery] needs a server the harness owns"
		case VerdictSkipped:
			rules[i].Message = "no spec of this rule ran"
		}
	}
	declares := adapters.Declaration{ConflictPolicy: adapters.RejectConflicts, RedeliveryWindow: time.Hour, AcceptsClock: true}
	return Certificate{
		Adapter:      "sample",
		SuiteVersion: "0.1.0",
		Harness:      HarnessInfo{Commit: "0123abcd-dirty"},
		Database:     "15.20 (Debian 15.20-0+deb12u1)",
		DatabaseKind: "dsn",
		Declared:     declares,
		Verified:     Verify(declares, rules),
		Seed:         42,
		Rules:        rules,
		Faults:       map[string]int64{"db:raise@effect": 3, "hook:panic": 1, "proxy:cut@before-commit": 2},
		Started:      time.Date(2026, 11, 29, 23, 40, 0, 0, time.UTC),
		Duration:     6.1,
	}
}

func TestWriteMarkdown(t *testing.T) {
	c := sampleCertificate()
	var b bytes.Buffer
	if err := c.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	t.Logf("the Markdown:\n%s", md)
	lines := strings.Split(md, "\n")
	if want := "## harmless: NOT CERTIFIED: `sample`"; lines[0] != want {
		t.Errorf("heading %q; want %q", lines[0], want)
	}
	for _, want := range []string{
		"**" + c.Summary() + "**",
		"| database | PostgreSQL 15.20 (Debian 15.20-0+deb12u1) (dsn) |",
		"| harness | 0.1.0, commit `0123abcd-dirty` |",
		"| seed | 42 (repeat with `--seed 42`) |",
		"| declared | conflict policy reject, redelivery window 1h0m0s, accepts the harness's clock |",
		"| verified | redelivery window 1h0m0s, accepts the harness's clock |",
		"| faults fired | `db:raise@effect` 3, `hook:panic` 1, `proxy:cut@before-commit` 2 |",
		"| rule | fixture | level | verdict |",
		"| `double-delivery.one-effect` | double-delivery | MUST | PASS |",
		"| `conflicting-payload.conflict-detected` | conflicting-payload | MUST | **FAIL** |",
		"| `crash-recovery.applied-survives` | crash-recovery | MUST | _NOT-SUPPORTED_ |",
		"| `bad-input.run-continues` | bad-input | MUST | _SKIPPED_ |",
		"<details><summary><code>conflicting-payload.conflict-detected</code> (MUST, fail)</summary>",
		"<details><summary><code>crash-recovery.applied-survives</code> (MUST, not-supported)</summary>",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("no line %q", want)
		}
	}
	rows := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "| `") {
			rows++
		}
	}
	if rows != len(c.Rules) {
		t.Errorf("%d rule rows; want %d", rows, len(c.Rules))
	}
	// The message holds a fence of three backticks: the block around it
	// needs a longer one, so the message shows whole.
	if !strings.Contains(md, "````text\nMUST violated: answered Duplicate\n```\nnot the end | of anything\n```\n````\n") {
		t.Error("the failure message is not fenced whole")
	}
	if strings.Contains(md, "\x1b[") {
		t.Error("the Markdown holds ANSI escapes")
	}
	if strings.Contains(md, "| protocol |") {
		t.Error("a protocol row without a protocol")
	}

	c.Protocol = &Protocol{Name: "harmless-exec", Version: 1, Command: "./consumer --harmless", Implementation: "consumer 1.4.2", MaxInFlight: 8}
	c.Status, c.Certified = StatusCertified, true
	b.Reset()
	if err := c.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## harmless: CERTIFIED: `sample`\n",
		"\n| protocol | harmless-exec v1: \"./consumer --harmless\", implementation \"consumer 1.4.2\", up to 8 requests in flight per process |\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
}
