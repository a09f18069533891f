package certificate

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// A rule's message is written for two readers. The certificate (JSON,
// JUnit) keeps the whole evidence: every problem the check found, each line
// bounded by MaxMessageLine so that an error quoting a 1 MiB id cannot
// make a certificate of megabytes. A person reads an excerpt
// ([RuleResult.Excerpt]): the lines that say which rule broke, the first
// problems, and how many more there are.
//
// A failure message has this shape (package suite writes it, each problem
// with [Problem]): lines that name the rule and the variant, and sentences
// about the cause ("First, what the play shows: ...", "The deliveries show
// the cause: ...", "This may mean: ...", "This usually means: ..."), which
// an excerpt always keeps whole, wrapped at spaces rather than cut; and
// problems, each a line starting with "- ", continued by lines indented by
// two spaces, which an excerpt keeps as many of as fit, a long line cut
// between words where it can be.
const (
	// MaxMessageLine bounds each line of a rule's message in the
	// certificate, in bytes (see [BoundLines]).
	MaxMessageLine = 4096
	// excerptLine bounds each line of an excerpt.
	excerptLine = 400
	// excerptProblemLines bounds how many lines of one problem an excerpt
	// shows.
	excerptProblemLines = 6
	// ExcerptLines is how many lines [RuleResult.Excerpt] is meant to
	// show at most for one rule: a failed rule's report on a terminal.
	ExcerptLines = 40
)

const (
	problemStart = "- "
	problemCont  = "  "
)

// BoundLines cuts every line of s longer than [MaxMessageLine] bytes in
// its middle, saying how many bytes it left out: the start of a line says
// what failed, the end of a wrapped error says why. A rule's message is
// kept whole, but no line of it may be unbounded: an error that quotes a
// 1 MiB id would make a certificate of megabytes.
func BoundLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = elide(l, MaxMessageLine)
	}
	return strings.Join(lines, "\n")
}

// Problem writes problem p as a line of a failure message: "- " and its
// first line, each further line indented by two spaces, every line
// bounded (see [BoundLines]), so that an excerpt can tell the problems
// apart.
func Problem(p string) string {
	return problemStart + BoundLines(strings.ReplaceAll(p, "\n", "\n"+problemCont))
}

// elide returns line unchanged if it has at most limit bytes, else its
// start and its end with the middle left out and counted: the start of a
// message says what failed, the end of a wrapped error says why. It cuts
// between words where a space is near the cut (within wordReach bytes),
// else on a UTF-8 boundary: a word longer than that, such as a huge quoted
// id, is cut inside.
func elide(line string, limit int) string {
	if len(line) <= limit {
		return line
	}
	marker := func(n int) string { return fmt.Sprintf(" …(%d bytes left out)… ", n) }
	room := max(limit-len(marker(len(line))), 2)
	head, tail := runeStart(line, room*3/4), runeEnd(line, room-room*3/4)
	if i := strings.LastIndexByte(line[:head], ' '); i > 0 && head-i <= wordReach {
		head = i
	}
	if i := strings.IndexByte(line[tail:], ' '); i >= 0 && i <= wordReach {
		tail += i + 1
	}
	return line[:head] + marker(len(line)-head-(len(line)-tail)) + line[tail:]
}

// wordReach is how far elide looks for a space to cut at.
const wordReach = 48

// sentencePrefixes start the lines of a failure message that say what
// caused it: an excerpt keeps them whole (see wrap).
var sentencePrefixes = []string{"First, what the play shows: ", "The deliveries show the cause: ", "This may mean: ", "This usually means: "}

func isSentence(line string) bool {
	for _, p := range sentencePrefixes {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

// wrap breaks line at spaces into lines of at most width bytes, the
// further ones indented by two spaces, so that a sentence is shown whole;
// a word longer than a line is cut (see elide).
func wrap(line string, width int) []string {
	var out []string
	for len(line) > width {
		cut := strings.LastIndexByte(line[:width+1], ' ')
		if cut <= len(problemCont) {
			break // one long word: elide cuts it
		}
		out = append(out, line[:cut])
		line = problemCont + strings.TrimLeft(line[cut:], " ")
	}
	return append(out, elide(line, width))
}

// runeStart is the largest index at most n that starts a rune of s.
func runeStart(s string, n int) int {
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// runeEnd is the smallest index at least len(s)-n that starts a rune of s.
func runeEnd(s string, n int) int {
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return i
}

// Excerpt returns the rule's message shortened for a person: at most
// maxLines lines (3 at least), none longer than 400 bytes. It keeps the lines
// that name the rule, each variant that failed and the bug it usually
// means; of the problems, it shows the first ones of each variant, each cut
// to a few lines, then "- … and N more problems". fullAt says where the
// whole evidence is, e.g. "all in the JSON certificate"; every line that
// says something was left out ends with it.
func (r RuleResult) Excerpt(maxLines int, fullAt string) string {
	return excerpt(r.Message, maxLines, fullAt)
}

// FirstLine is the first line of the rule's message, cut as a line of an
// excerpt is: for a list with a line per rule.
func (r RuleResult) FirstLine() string {
	line, _, _ := strings.Cut(r.Message, "\n")
	return elide(line, excerptLine)
}

// messageItem is a line that names the rule or the variant, a sentence
// about the cause, or a problem.
type messageItem struct {
	lines    []string
	problem  bool
	sentence bool
}

// parseMessage splits a message into its items (see the shape above).
func parseMessage(msg string) []messageItem {
	var items []messageItem
	for _, line := range strings.Split(msg, "\n") {
		switch {
		case strings.HasPrefix(line, problemStart):
			items = append(items, messageItem{lines: []string{line}, problem: true})
		case strings.HasPrefix(line, problemCont) && len(items) > 0 && items[len(items)-1].problem:
			last := &items[len(items)-1]
			last.lines = append(last.lines, line)
		case isSentence(line):
			items = append(items, messageItem{lines: wrap(line, excerptLine), sentence: true})
		default:
			items = append(items, messageItem{lines: []string{line}})
		}
	}
	return items
}

func excerpt(msg string, maxLines int, fullAt string) string {
	maxLines = max(maxLines, 3)
	items := parseMessage(msg)

	// Problems come in runs, one run per variant that failed.
	type run struct{ start, end, shown int }
	var runs []run
	fixed := 0
	for i, it := range items {
		switch {
		case !it.problem:
			fixed += len(it.lines)
		case i > 0 && items[i-1].problem:
			runs[len(runs)-1].end = i + 1
		default:
			runs = append(runs, run{start: i, end: i + 1})
		}
	}
	// Each run's first problem must fit, with a line saying how many more
	// the run has: a problem gets fewer lines when the excerpt is short.
	budget := maxLines - fixed - len(runs)
	perProblem := excerptProblemLines
	if len(runs) > 0 {
		perProblem = min(perProblem, max(2, budget/len(runs)))
	}
	for i := range items {
		it := &items[i]
		if it.problem && len(it.lines) > perProblem {
			left := len(it.lines) - (perProblem - 1)
			it.lines = append(it.lines[:perProblem-1:perProblem-1],
				fmt.Sprintf("%s… and %d more lines of this problem; %s", problemCont, left, fullAt))
		}
		if !it.sentence {
			for j, l := range it.lines {
				it.lines[j] = elide(l, excerptLine)
			}
		}
	}

	// Show each run's first problem, then the second of each, and so on,
	// while the lines fit; a run that does not show all of its problems
	// ends with a line saying how many more it has.
	for k, more := 0, true; more; k++ {
		more = false
		for g := range runs {
			r := &runs[g]
			if r.shown != k || r.start+k >= r.end {
				continue
			}
			cost := len(items[r.start+k].lines)
			if k > 0 && cost > budget {
				continue
			}
			budget -= cost
			r.shown++
			more = true
		}
	}

	var out []string
	next := 0
	for _, r := range runs {
		for _, it := range items[next:r.start] {
			out = append(out, it.lines...)
		}
		for _, it := range items[r.start : r.start+r.shown] {
			out = append(out, it.lines...)
		}
		if left := r.end - r.start - r.shown; left > 0 {
			out = append(out, elide(fmt.Sprintf("%s… and %d more %s; %s", problemStart, left, plural(left, "problem", "problems"), fullAt), excerptLine))
		}
		next = r.end
	}
	// The sentences that end the message (the guess at its cause) are
	// kept whole: lines are left out before them.
	var last []string
	for _, it := range items[next:] {
		if it.sentence {
			last = append(last, it.lines...)
			continue
		}
		out = append(out, slices.Concat(last, it.lines)...)
		last = nil
	}
	if len(out)+len(last) > maxLines {
		keep := max(maxLines-1-len(last), 1)
		left := len(out) - keep
		out = append(out[:keep:keep], elide(fmt.Sprintf("… and %d more %s; %s", left, plural(left, "line", "lines"), fullAt), excerptLine))
	}
	return strings.Join(append(out, last...), "\n")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
