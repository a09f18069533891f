package certificate

import (
	"strconv"
	"strings"
	"testing"
)

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
