package certificate

import (
	"fmt"
	"html"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/harmless-dev/harmless/adapters"
)

// markdownVerdicts are the verdicts as the Markdown table shows them: a
// failure in bold, what did not run in italics.
var markdownVerdicts = map[Verdict]string{
	VerdictPass:          "PASS",
	VerdictFail:          "**FAIL**",
	VerdictNotSupported:  "_NOT-SUPPORTED_",
	VerdictSkipped:       "_SKIPPED_",
	VerdictNotApplicable: "not-applicable",
}

// markdownEvidence says, in a Markdown summary, where the evidence left
// out of a message is.
const markdownEvidence = "all in the JSON certificate (harmless certify --json FILE)"

// WriteMarkdown writes the certificate as a Markdown summary for a pull
// request or a CI step summary (GitHub's $GITHUB_STEP_SUMMARY): a heading
// "harmless: CERTIFIED", "harmless: PARTIAL", "harmless: INTERRUPTED" or
// "harmless: NOT CERTIFIED" with the adapter, the summary counts, for a
// partial run the MUST rules that did not run and why, a table of the run
// (adapter, database, suite version and harness commit, protocol when
// there is one, seed, declared and verified capabilities, faults fired,
// start and duration), a table with one row per rule (rule id, fixture,
// level, verdict), and the message of every failed, not-supported and
// not-applicable rule
// in a collapsed <details> block, as a fenced code block. The messages are
// excerpts (see [RuleResult.Excerpt]), so that the summary stays readable
// and within what a CI step summary may hold (GitHub's takes 1 MiB); the
// JSON certificate has them whole. It writes no colour and no emoji.
func (c Certificate) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## harmless: %s: %s\n\n", c.Headline(), mdCode(c.Adapter))
	if c.Error != "" {
		fmt.Fprintf(&b, "The run could not start:\n\n%s\n", mdFence(c.Error))
	}
	fmt.Fprintf(&b, "**%s**\n\n", c.Summary())
	if notRun := c.NotRun(); c.Status == StatusPartial {
		fmt.Fprintf(&b, "No rule failed, but %d MUST rules did not run, so the run certifies nothing about them:\n\n", len(notRun))
		for _, r := range notRun {
			fmt.Fprintf(&b, "- %s (%s): %s\n", mdCode(r.ID), r.Verdict, mdCell(r.FirstLine()))
		}
		b.WriteString("\n")
	}

	b.WriteString("| run | |\n|---|---|\n")
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, mdCell(v)) }
	row("adapter", mdCode(c.Adapter))
	row("database", fmt.Sprintf("PostgreSQL %s (%s)", c.Database, c.DatabaseKind))
	row("harness", fmt.Sprintf("%s, commit %s", c.SuiteVersion, mdCode(c.Harness.Commit)))
	if c.Protocol != nil {
		row("protocol", c.Protocol.String())
	}
	row("seed", fmt.Sprintf("%d (repeat with %s)", c.Seed, mdCode(fmt.Sprintf("--seed %d", c.Seed))))
	row("declared", capabilities(c.Declared))
	row("verified", capabilities(c.Verified))
	row("faults fired", faultList(c.Faults))
	if !c.Started.IsZero() {
		row("started", fmt.Sprintf("%s, took %.1fs", c.Started.UTC().Format(time.RFC3339), c.Duration))
	}

	b.WriteString("\n| rule | fixture | level | verdict |\n|---|---|---|---|\n")
	for _, r := range c.Rules {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", mdCell(mdCode(r.ID)), mdCell(r.Fixture), r.Level, markdownVerdicts[r.Verdict])
	}
	for _, section := range []struct {
		title   string
		verdict Verdict
	}{{"Failures", VerdictFail}, {"Not supported", VerdictNotSupported}, {"Not applicable", VerdictNotApplicable}} {
		if c.Count(section.verdict) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n### %s\n", section.title)
		for _, r := range c.Rules {
			if r.Verdict == section.verdict {
				fmt.Fprintf(&b, "\n<details><summary><code>%s</code> (%s, %s)</summary>\n\n%s\n</details>\n",
					html.EscapeString(r.ID), r.Level, r.Verdict, mdFence(r.Excerpt(ExcerptLines, markdownEvidence)))
			}
		}
	}
	for _, r := range c.Reports {
		fmt.Fprintf(&b, "\n### %s, from %s (information, not a verdict)\n\n%s\n", mdCell(r.Title), mdCell(r.Fixture), mdCell(r.Note))
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write Markdown summary: %w", err)
	}
	return nil
}

// capabilities describes what d declares (or a run verified), e.g.
// "conflict policy reject, redelivery window 24h0m0s, accepts the
// harness's clock, external effects outbox, max send delay 3s", or "none".
func capabilities(d adapters.Declaration) string {
	var parts []string
	if d.ConflictPolicy != adapters.NoConflictPolicy {
		parts = append(parts, "conflict policy "+string(d.ConflictPolicy))
	}
	if d.RedeliveryWindow > 0 {
		parts = append(parts, "redelivery window "+d.RedeliveryWindow.String())
	}
	if d.AcceptsClock {
		parts = append(parts, "accepts the harness's clock")
	}
	if d.ExternalEffects != adapters.NoExternalEffects {
		parts = append(parts, "external effects "+string(d.ExternalEffects))
	}
	if d.MaxSendDelay > 0 {
		parts = append(parts, "max send delay "+d.MaxSendDelay.String())
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// faultList lists fault counts by kind, e.g. "db:raise@effect 3,
// server:crash 1", or "none".
func faultList(counts map[string]int64) string {
	if len(counts) == 0 {
		return "none"
	}
	var parts []string
	for _, kind := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", mdCode(kind), counts[kind]))
	}
	return strings.Join(parts, ", ")
}

// mdCell makes s safe in a Markdown table cell: one line, pipes escaped.
func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\r\n", " ", "\n", " ").Replace(s)
}

// mdCode returns s as a Markdown code span, delimited by more backticks
// than s has in a row.
func mdCode(s string) string {
	ticks := strings.Repeat("`", longestRun(s, '`')+1)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return ticks + s + ticks
}

// mdFence returns s as a fenced code block, the fence longer than any run
// of backticks in s.
func mdFence(s string) string {
	fence := strings.Repeat("`", max(3, longestRun(s, '`')+1))
	return fence + "text\n" + strings.TrimRight(s, "\n") + "\n" + fence + "\n"
}

// longestRun is the length of the longest run of c in s.
func longestRun(s string, c byte) int {
	longest, run := 0, 0
	for i := range len(s) {
		if s[i] == c {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return longest
}
