package certificate

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestElide(t *testing.T) {
	if got := elide("short", 10); got != "short" {
		t.Errorf("elide of a short line = %q", got)
	}
	line := "start " + strings.Repeat("é", 5000) + " the cause"
	got := elide(line, 200)
	if len(got) > 200 || !utf8.ValidString(got) || !strings.HasPrefix(got, "start é") || !strings.HasSuffix(got, "… the cause") {
		t.Errorf("elide(%d bytes, 200) = %q (%d bytes); want at most 200 bytes of valid UTF-8, the start and the end", len(line), got, len(got))
	}
	m := regexp.MustCompile(` …\((\d+) bytes left out\)… `).FindStringSubmatchIndex(got)
	if m == nil {
		t.Fatalf("elide does not say what it left out: %q", got)
	}
	n, _ := strconv.Atoi(got[m[2]:m[3]])
	if kept := len(got) - (m[1] - m[0]); kept+n != len(line) {
		t.Errorf("elide kept %d bytes and says it left out %d, of %d", kept, n, len(line))
	}

	// Words are cut between, never inside.
	words := strings.Repeat("the marker was still stored yet the redelivery claimed it ", 20)
	got = elide(words, 200)
	head, tail, _ := strings.Cut(got, " …(")
	_, tail, _ = strings.Cut(tail, ")… ")
	for _, part := range []string{head, tail} {
		for w := range strings.FieldsSeq(part) {
			if !strings.Contains(" the marker was still stored yet redelivery claimed it ", " "+w+" ") {
				t.Errorf("elide cut inside a word: %q in %q", w, got)
			}
		}
	}
}

// TestSentencesAreKeptWhole: the lines that say what caused a failure are
// wrapped in an excerpt, never cut, and never dropped for lack of room.
func TestSentencesAreKeptWhole(t *testing.T) {
	hint := "This may mean: " + strings.Repeat("a key that depends on the calendar, ", 30) + "the end."
	var b strings.Builder
	b.WriteString("MUST some.rule violated: a doc")
	for i := range 50 {
		b.WriteString("\n- problem " + strconv.Itoa(i) + "\n  its evidence")
	}
	b.WriteString("\n" + hint)
	ex := excerpt(b.String(), 12, "see the JSON")
	lines := strings.Split(ex, "\n")
	if len(lines) > 12 {
		t.Errorf("excerpt of %d lines; want at most 12:\n%s", len(lines), ex)
	}
	var rejoined []string
	for _, l := range lines {
		if len(l) > excerptLine {
			t.Errorf("a line of %d bytes", len(l))
		}
		if strings.HasPrefix(l, "This may mean") || (len(rejoined) > 0 && strings.HasPrefix(l, "  ")) {
			rejoined = append(rejoined, strings.TrimPrefix(l, "  "))
		}
	}
	if got := strings.Join(rejoined, " "); got != hint {
		t.Errorf("the hint was not kept whole:\n%s\nwant\n%s", got, hint)
	}
}
