// Package failuremsg writes the lines of a rule's failure message in the
// shape that suite/certificate's excerpts read: problems as "- " lines
// continued by lines indented by two spaces, every line bounded. The
// harness writes messages; a certificate reader only reads them, so the
// writing side lives here rather than in the public certificate package.
package failuremsg

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

const (
	// MaxLine bounds each line of a rule's message in the certificate,
	// in bytes (see [BoundLines]).
	MaxLine = 4096
	// ProblemStart starts the first line of a problem.
	ProblemStart = "- "
	// ProblemCont starts each further line of a problem.
	ProblemCont = "  "
)

// BoundLines cuts every line of s longer than [MaxLine] bytes in its
// middle, saying how many bytes it left out: the start of a line says what
// failed, the end of a wrapped error says why. A rule's message is kept
// whole, but no line of it may be unbounded: an error that quotes a 1 MiB
// id would make a certificate of megabytes.
func BoundLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = Elide(l, MaxLine)
	}
	return strings.Join(lines, "\n")
}

// Problem writes problem p as a line of a failure message: [ProblemStart]
// and its first line, each further line indented by [ProblemCont], every
// line bounded (see [BoundLines]), so that an excerpt can tell the
// problems apart.
func Problem(p string) string {
	return ProblemStart + BoundLines(strings.ReplaceAll(p, "\n", "\n"+ProblemCont))
}

// Elide returns line unchanged if it has at most limit bytes, else its
// start and its end with the middle left out and counted: the start of a
// message says what failed, the end of a wrapped error says why. It cuts
// between words where a space is near the cut (within wordReach bytes),
// else on a UTF-8 boundary: a word longer than that, such as a huge quoted
// id, is cut inside.
func Elide(line string, limit int) string {
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

// wordReach is how far Elide looks for a space to cut at.
const wordReach = 48

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
