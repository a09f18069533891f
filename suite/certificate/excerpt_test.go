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
	if len(got) > 200 || !utf8.ValidString(got) || !strings.HasPrefix(got, "start é") || !strings.HasSuffix(got, "é the cause") {
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
}
