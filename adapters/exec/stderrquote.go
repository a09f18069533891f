package exec

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/harmless-dev/harmless/internal/redact"
)

// What a child's stderr quote holds. harmless reads all of a child's stderr
// but keeps only these, so memory stays bounded however much it writes.
const (
	// endLines is how many of the last non-blank lines are kept.
	endLines = 6
	// reportLines is how many lines of the last crash report are kept,
	// from its first line.
	reportLines = 4
	// lineBytes bounds each line kept; the rest of a longer line is cut.
	lineBytes = 240
	// endBytes and reportBytes bound the two parts of a quote: the last
	// lines keep their end, the crash report its start.
	endBytes    = 600
	reportBytes = 400
)

// crashStart matches, at the start of a line (after its indentation), a
// line that may start a crash report: where a runtime or a logger says what
// went wrong, before the stack. Go: "panic: ", "fatal error: "; Python:
// "Traceback (most recent call last):" and "psycopg2.OperationalError: ...";
// Java: "Exception in thread ..."; Node.js: the source line it quotes
// ("throw er; // Unhandled 'error' event"), then "Error: ...",
// "TypeError: ...", "error: ..." (node-postgres), "Error [ERR_...]: ...",
// "[UnhandledPromiseRejection: ..."; V8's "FATAL ERROR: ...".
var crashStart = regexp.MustCompile(`^(?:panic: |fatal error: |Traceback \(most recent call last\)|Exception in thread |Uncaught\b|Unhandled|FATAL|throw\b|\[?[\w.$]*(?i:error|exception|rejection)(?: \[[^\]]*\])?:)`)

// reportStart matches the lines that always start a new crash report when
// they are not indented: a runtime's own first line.
var reportStart = regexp.MustCompile(`^(?:panic: |fatal error: |Traceback \(most recent call last\)|Exception in thread )`)

// stderrQuote reads a child's stderr as it is written and keeps what
// messages about the child quote: its last lines and the first lines of
// its last crash report.
//
// Runtimes put the cause of a crash at different ends of their dump. Python
// ends its traceback with the exception, so the last lines show it. Go
// starts with "panic: ..." and Node.js with the error (node-postgres's
// unhandled 'error' event is followed by about 300 lines of stack and
// object dump), so the cause is only in the report's first lines.
//
// A crash report starts at a line that matches crashStart, unless that line
// continues the current report: it follows, indented or not, another start
// line, or an indented line (a stack frame, an object's property) other
// than Node.js's caret under the source line it quotes. A runtime's first
// line (reportStart) at the start of a line always starts a new report.
//
// The secrets of the DSN the child was given are masked in each line before
// it is kept: a child that prints its connection string and crashes must
// not put the password into the reports that quote it.
type stderrQuote struct {
	secrets *redact.Redactor
	mu      sync.Mutex
	line    []byte // the line being written, cut at lineBytes and the longest secret
	cut     bool   // bytes of the line being written were dropped
	n       int    // non-blank lines completed
	last    []numbered
	report  []numbered // first lines of the last crash report
	cause   numbered   // the last line of that report that matches crashStart, unindented but for its first
	prev    lineKind   // of the last non-blank line
	reports int        // crash reports seen
}

// numbered is a kept line with its number among the non-blank lines.
type numbered struct {
	n    int
	text string
}

// lineKind classifies a line for telling where a crash report starts.
type lineKind int

const (
	plainLine    lineKind = iota // not indented: a log line, or a report's header
	indentedLine                 // a stack frame, an object's property
	caretLine                    // Node.js's "^" under the source line it quotes
	startLine                    // matches crashStart
)

// newStderrQuote returns a quote that masks secrets (nil: none).
func newStderrQuote(secrets *redact.Redactor) *stderrQuote {
	return &stderrQuote{secrets: secrets}
}

// Write reads b, line by line.
func (q *stderrQuote) Write(b []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	// A line is kept beyond lineBytes by the longest secret, so that a
	// secret across the cut is still masked whole before the line is cut.
	keep := lineBytes + q.secrets.MaxLen()
	for rest := b; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		chunk := rest
		if i >= 0 {
			chunk = rest[:i]
		}
		if room := keep - len(q.line); len(chunk) > room {
			q.line = append(q.line, chunk[:max(room, 0)]...)
			q.cut = true
		} else {
			q.line = append(q.line, chunk...)
		}
		if i < 0 {
			break
		}
		q.endLine()
		rest = rest[i+1:]
	}
	return len(b), nil
}

// endLine files the line just completed. The caller holds q.mu.
func (q *stderrQuote) endLine() {
	raw := q.text(q.line, q.cut)
	q.line, q.cut = q.line[:0], false
	text := strings.TrimSpace(raw)
	if text == "" {
		return
	}
	q.n++
	line := numbered{q.n, text}
	q.last = append(q.last, line)
	if len(q.last) > endLines {
		q.last = q.last[1:]
	}
	indented := raw[0] == ' ' || raw[0] == '\t'
	kind := plainLine
	switch {
	case crashStart.MatchString(text):
		kind = startLine
		continues := q.reports > 0 && (q.prev == startLine || q.prev == indentedLine)
		if !continues || (!indented && reportStart.MatchString(text)) {
			q.reports++
			q.report = q.report[:0]
			q.cause = line
		} else if !indented {
			// An indented one is a property of an object the report
			// dumps, not an error it names.
			q.cause = line
		}
	case text == "^":
		kind = caretLine
	case indented:
		kind = indentedLine
	}
	q.prev = kind
	if q.reports > 0 && len(q.report) < reportLines && (len(q.report) > 0 || kind == startLine) {
		q.report = append(q.report, line)
	}
}

// text is a line as kept: secrets masked, cut at lineBytes, with "…" where
// it was cut, and without trailing blanks.
func (q *stderrQuote) text(line []byte, cut bool) string {
	s := q.secrets.String(string(line))
	if len(s) > lineBytes {
		s, cut = s[:lineBytes], true
	}
	s = strings.ToValidUTF8(strings.TrimRight(s, " \t\r"), "�")
	if cut {
		s += "…"
	}
	return s
}

// Summary quotes the child's stderr on one line, for an error message that
// reports read only the first line of: "" when stderr had nothing but blank
// lines. It quotes the last lines and, when they do not include it, the
// start of the last crash report.
func (q *stderrQuote) Summary() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	last := q.lastLines()
	if len(last) == 0 {
		return ""
	}
	ends := join(last)
	if len(ends) > endBytes {
		ends = "…" + strings.ToValidUTF8(ends[len(ends)-endBytes:], "")
	}
	var report []numbered
	for _, l := range q.report {
		if l.n < last[0].n {
			report = append(report, l)
		}
	}
	if len(report) == 0 {
		if last[0].n == 1 {
			return "; its stderr: " + ends
		}
		return "; its stderr ends: " + ends
	}
	return "; its stderr's last crash report starts: " + quoteStart(report) + gap(report[len(report)-1], last[0]) + ends
}

// Excerpt quotes less of the child's stderr than Summary, for a list of
// crashes: the first lines of its last crash report and, when that report
// names an error further down (Python ends its traceback with the
// exception), that line; without a crash report, as many of the last
// lines as a report's start may have. "" when stderr had nothing but blank
// lines.
func (q *stderrQuote) Excerpt() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.report) == 0 {
		last := q.lastLines()
		if len(last) == 0 {
			return ""
		}
		last = last[max(0, len(last)-reportLines):]
		ends := join(last)
		if len(ends) > reportBytes {
			ends = "…" + strings.ToValidUTF8(ends[len(ends)-reportBytes:], "")
		}
		if last[0].n == 1 {
			return "; its stderr: " + ends
		}
		return "; its stderr ends: " + ends
	}
	excerpt := "; its stderr's last crash report starts: " + quoteStart(q.report)
	if end := q.report[len(q.report)-1]; q.cause.n > end.n {
		excerpt += gap(end, q.cause) + q.cause.text
	}
	return excerpt
}

// lastLines are the last lines, with the line being written, if any. The
// caller holds q.mu.
func (q *stderrQuote) lastLines() []numbered {
	last := q.last
	if pending := strings.TrimSpace(q.text(q.line, q.cut)); pending != "" {
		last = append(last[:len(last):len(last)], numbered{q.n + 1, pending})
		last = last[max(0, len(last)-endLines):]
	}
	return last
}

// quoteStart quotes the first lines of a crash report, cut at reportBytes.
func quoteStart(report []numbered) string {
	start := join(report)
	if len(start) > reportBytes {
		start = strings.ToValidUTF8(start[:reportBytes], "") + "…"
	}
	return start
}

// gap is the visible line break between two quoted lines, saying how many
// lines between them are left out.
func gap(before, after numbered) string {
	switch between := after.n - before.n - 1; {
	case between <= 0:
		return " ⏎ "
	case between == 1:
		return " ⏎ [1 more line] ⏎ "
	default:
		return " ⏎ [" + strconv.Itoa(between) + " more lines] ⏎ "
	}
}

// join joins lines with a visible line break.
func join(lines []numbered) string {
	texts := make([]string, len(lines))
	for i, l := range lines {
		texts[i] = l.text
	}
	return strings.Join(texts, " ⏎ ")
}
