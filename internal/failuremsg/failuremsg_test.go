package failuremsg

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestElide(t *testing.T) {
	if got := Elide("short", 10); got != "short" {
		t.Errorf("Elide of a short line = %q", got)
	}
	line := "start " + strings.Repeat("é", 5000) + " the cause"
	got := Elide(line, 200)
	if len(got) > 200 || !utf8.ValidString(got) || !strings.HasPrefix(got, "start é") || !strings.HasSuffix(got, "… the cause") {
		t.Errorf("Elide(%d bytes, 200) = %q (%d bytes); want at most 200 bytes of valid UTF-8, the start and the end", len(line), got, len(got))
	}
	m := regexp.MustCompile(` …\((\d+) bytes left out\)… `).FindStringSubmatchIndex(got)
	if m == nil {
		t.Fatalf("Elide does not say what it left out: %q", got)
	}
	n, _ := strconv.Atoi(got[m[2]:m[3]])
	if kept := len(got) - (m[1] - m[0]); kept+n != len(line) {
		t.Errorf("Elide kept %d bytes and says it left out %d, of %d", kept, n, len(line))
	}

	// Words are cut between, never inside.
	words := strings.Repeat("the marker was still stored yet the redelivery claimed it ", 20)
	got = Elide(words, 200)
	head, tail, _ := strings.Cut(got, " …(")
	_, tail, _ = strings.Cut(tail, ")… ")
	for _, part := range []string{head, tail} {
		for w := range strings.FieldsSeq(part) {
			if !strings.Contains(" the marker was still stored yet redelivery claimed it ", " "+w+" ") {
				t.Errorf("Elide cut inside a word: %q in %q", w, got)
			}
		}
	}
}
