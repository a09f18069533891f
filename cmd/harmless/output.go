package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/suite"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// ANSI colours of the terminal output.
const (
	green  = "\x1b[32m"
	red    = "\x1b[31m"
	yellow = "\x1b[33m"
	reset  = "\x1b[0m"
)

// verdictColors colour each verdict on a terminal: pass green, fail red,
// not-supported and skipped yellow.
var verdictColors = map[certificate.Verdict]string{
	certificate.VerdictPass:         green,
	certificate.VerdictFail:         red,
	certificate.VerdictNotSupported: yellow,
	certificate.VerdictSkipped:      yellow,
	// Not-applicable is no warning: the implementation has nothing to test.
	certificate.VerdictNotApplicable: "",
}

// verbosity is how much certify prints while the suite runs.
type verbosity int

const (
	// quiet prints only the final verdict lines and errors.
	quiet verbosity = iota
	// normal adds one progress line per fixture on stderr.
	normal
	// verbose adds a line per rule judged and the suite's log on stderr.
	verbose
)

// printer writes certify's terminal output: progress on stderr, the result
// on stdout, in colour only where that stream is a terminal and NO_COLOR
// is not set.
type printer struct {
	stdout, stderr     io.Writer
	colorOut, colorErr bool
	level              verbosity
	start              time.Time
	fixtureWidth       int // the longest fixture id, to align progress lines
	// jsonPath is where the JSON certificate is written, if anywhere:
	// the full evidence of the failures whose messages are shortened.
	jsonPath string
}

// shortenedHint ends each line of a shortened failure message that says
// something was left out; the line after the failures says where it is.
const shortenedHint = "all in the JSON certificate"

// shortenedNote is the line printed after shortened failure messages.
func (p *printer) shortenedNote() string {
	if p.jsonPath == "" {
		return "The failures above are shortened: run again with --json FILE for the full evidence in a JSON certificate."
	}
	return "The failures above are shortened: the full evidence is in the JSON certificate " + p.jsonPath + "."
}

// A failed rule's message on the terminal is an excerpt (see
// certificate.RuleResult.Excerpt): at most certificate.ExcerptLines lines, fewer when
// many rules failed, so that the failures together take about
// failureLines lines, but never fewer than excerptMinLines each.
const (
	failureLines    = 240
	excerptMinLines = 12
)

// excerptLines is how many lines each failed rule's message may take when
// n rules failed.
func excerptLines(n int) int {
	return min(certificate.ExcerptLines, max(excerptMinLines, failureLines/max(n, 1)))
}

func newPrinter(stdout, stderr io.Writer, level verbosity, getenv func(string) string) *printer {
	p := &printer{
		stdout:   stdout,
		stderr:   stderr,
		colorOut: useColor(stdout, getenv),
		colorErr: useColor(stderr, getenv),
		level:    level,
		start:    time.Now(),
	}
	for _, f := range fixtures.Catalog() {
		p.fixtureWidth = max(p.fixtureWidth, len(f.ID))
	}
	return p
}

// useColor reports whether output to w may be coloured: w is a terminal and
// NO_COLOR (https://no-color.org) is unset or empty.
func useColor(w io.Writer, getenv func(string) string) bool {
	return getenv("NO_COLOR") == "" && isTerminal(w)
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// paint wraps s in color when on is set.
func paint(on bool, color, s string) string {
	if !on || color == "" {
		return s
	}
	return color + s + reset
}

// stamp prefixes a stderr line with the time since the run started.
func (p *printer) stamp(line string) {
	fmt.Fprintf(p.stderr, "[%6.1fs] %s\n", time.Since(p.start).Seconds(), line)
}

// logf prints the suite's log lines (a line per spec among them); only
// when verbose.
func (p *printer) logf(format string, args ...any) {
	if p.level >= verbose {
		p.stamp(fmt.Sprintf(format, args...))
	}
}

// fixture prints the progress line of a finished fixture, e.g.
//
//	[  3.2s] double-delivery        3 rules  3 pass                          (0.4s)
//
// unless quiet.
func (p *printer) fixture(f suite.FixtureProgress) {
	if p.level < normal {
		return
	}
	noun := "rules"
	if len(f.Rules) == 1 {
		noun = "rule"
	}
	const countsWidth = 36
	var counts []string
	width := 0
	for _, v := range []certificate.Verdict{certificate.VerdictPass, certificate.VerdictFail, certificate.VerdictNotSupported, certificate.VerdictSkipped, certificate.VerdictNotApplicable} {
		if n := f.Count(v); n > 0 {
			s := fmt.Sprintf("%d %s", n, v)
			width += len(s)
			counts = append(counts, paint(p.colorErr, verdictColors[v], s))
		}
	}
	if len(counts) > 1 {
		width += 2 * (len(counts) - 1)
	}
	pad := strings.Repeat(" ", max(1, countsWidth-width))
	p.stamp(fmt.Sprintf("%-*s %2d %-5s  %s%s(%.1fs)", p.fixtureWidth, f.Fixture, len(f.Rules), noun, strings.Join(counts, ", "), pad, f.Duration.Seconds()))
}

// result prints the verdict on stdout: unless quiet, a header naming the
// harness, the adapter, the database and the seed, the verdict table and
// each failure's message; always a FAIL line per failed rule, the verdict
// line (CERTIFIED, PARTIAL or NOT CERTIFIED) and the summary counts, and for
// a partial run, last, the MUST rules that did not run and why.
func (p *printer) result(cert certificate.Certificate) {
	if p.level >= normal {
		fmt.Fprintf(p.stdout, "\nharmless %s (commit %s): %s on PostgreSQL %s (%s), seed %d\n",
			cert.SuiteVersion, cert.Harness.Commit, cert.Adapter, cert.Database, cert.DatabaseKind, cert.Seed)
		if cert.Protocol != nil {
			fmt.Fprintf(p.stdout, "protocol %s\n", cert.Protocol)
		}
		fmt.Fprintf(p.stdout, "\n%s\n", p.table(cert))
	}
	lines, shortened := excerptLines(cert.Count(certificate.VerdictFail)), false
	for _, r := range cert.Rules {
		if r.Verdict != certificate.VerdictFail {
			continue
		}
		if p.level >= normal {
			msg := r.Excerpt(lines, shortenedHint)
			shortened = shortened || msg != r.Message
			fmt.Fprintf(p.stdout, "%s %s\n  %s\n\n", paint(p.colorOut, red, "FAIL"), r.ID, strings.ReplaceAll(msg, "\n", "\n  "))
		} else {
			fmt.Fprintf(p.stdout, "%s %s\n", paint(p.colorOut, red, "FAIL"), r.ID)
		}
	}
	if shortened {
		fmt.Fprintf(p.stdout, "%s\n\n", p.shortenedNote())
	}
	if n := cert.CrashCount(); n > 0 {
		fmt.Fprintf(p.stdout, "the implementation crashed %d times and was restarted, as a supervisor would:\n", n)
		for _, c := range cert.Crashes {
			fmt.Fprintf(p.stdout, "  %s, instance %d: %d; the first: %s\n", c.Play, c.Instance, c.Count, crashHead(c.First))
		}
	}
	for _, r := range cert.Reports {
		if p.level >= normal {
			fmt.Fprintf(p.stdout, "%s (from %s, information, not a verdict): %s\n\n", paint(p.colorOut, yellow, "INFO "+r.Title), r.Fixture, r.Note)
		}
	}
	fmt.Fprintf(p.stdout, "%s: %s\n", paint(p.colorOut, statusColors[cert.Status], cert.Headline()), subject(cert))
	fmt.Fprintln(p.stdout, cert.Summary())
	if cert.Status == certificate.StatusInterrupted {
		fmt.Fprintf(p.stdout, "the run was stopped (%s) and certifies nothing; no rule failed because of it, and what it created was removed\n", cert.Interrupted)
	}
	if notRun := cert.NotRun(); cert.Status == certificate.StatusPartial {
		fmt.Fprintf(p.stdout, "%d MUST rules did not run, so this run certifies nothing about them:\n", len(notRun))
		for _, r := range notRun {
			fmt.Fprintf(p.stdout, "  %s (%s): %s\n", r.ID, r.Verdict, r.FirstLine())
		}
	}
}

// subject names what the verdict line certifies: the adapter, and for a
// program run with --exec, the name it declared followed by "(exec)", e.g.
// "node-pg (exec)": the name is what was certified, the suffix says how it
// was run, so that the line reads the same for every language and still
// tells a child from a built-in adapter of the same name.
func subject(cert certificate.Certificate) string {
	if cert.Protocol != nil && cert.Protocol.Name == execProtocol {
		return cert.Adapter + " (" + execSuffix + ")"
	}
	return cert.Adapter
}

// execSuffix names how a program run with --exec was run, as the flag does.
const execSuffix = "exec"

// statusColors colour the verdict line: certified green, partial and
// interrupted yellow, not certified red.
var statusColors = map[certificate.Status]string{
	certificate.StatusCertified:    green,
	certificate.StatusPartial:      yellow,
	certificate.StatusNotCertified: red,
	certificate.StatusInterrupted:  yellow,
}

// table is the certificate's verdict table, each verdict coloured on a
// terminal. The verdict is the last column, so colour does not upset the
// alignment.
func (p *printer) table(cert certificate.Certificate) string {
	table := cert.Table()
	if !p.colorOut {
		return table
	}
	lines := strings.SplitAfter(table, "\n")
	for i, r := range cert.Rules {
		if i+1 >= len(lines) {
			break
		}
		word := strings.ToUpper(string(r.Verdict))
		if line, ok := strings.CutSuffix(lines[i+1], word+"\n"); ok {
			lines[i+1] = line + paint(true, verdictColors[r.Verdict], word) + "\n"
		}
	}
	return strings.Join(lines, "")
}

// crashHead is a crash's description up to the first line of its crash
// report (the exec adapter joins the report's lines with " ⏎ "): the rest
// is in the JSON certificate.
func crashHead(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	s, _, _ = strings.Cut(s, " ⏎ ")
	return s
}
