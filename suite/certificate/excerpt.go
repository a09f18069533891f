package certificate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/harmless-dev/harmless/internal/failuremsg"
)

// A rule's message is written for two readers. The certificate (JSON,
// JUnit) keeps the whole evidence: every problem the check found, each line
// bounded (internal/failuremsg) so that an error quoting a 1 MiB id cannot
// make a certificate of megabytes. A person reads an excerpt
// ([RuleResult.Excerpt]): the lines that say which rule broke, the first
// problems, and how many more there are.
//
// A failure message has this shape (the harness writes it with
// internal/failuremsg): lines that name the rule and the variant, sentences
// about the cause ("First, what the play shows: ...", "The deliveries show
// the cause: ...", "This may mean: ...", "This usually means: ..."), which
// an excerpt always keeps whole, wrapped at spaces rather than cut; and
// problems, each a line starting with "- ", continued by lines indented by
// two spaces, which an excerpt keeps as many of as fit, a long line cut
// between words where it can be.
const (
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
	problemStart = failuremsg.ProblemStart
	problemCont  = failuremsg.ProblemCont
)

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
// a word longer than a line is cut (see failuremsg.Elide).
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
	return append(out, failuremsg.Elide(line, width))
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
	return failuremsg.Elide(line, excerptLine)
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
				it.lines[j] = failuremsg.Elide(l, excerptLine)
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
			out = append(out, failuremsg.Elide(fmt.Sprintf("%s… and %d more %s; %s", problemStart, left, plural(left, "problem", "problems"), fullAt), excerptLine))
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
		out = append(out[:keep:keep], failuremsg.Elide(fmt.Sprintf("… and %d more %s; %s", left, plural(left, "line", "lines"), fullAt), excerptLine))
	}
	return strings.Join(append(out, last...), "\n")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
