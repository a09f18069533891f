package exec

import (
	"bytes"
	"strings"
	"sync"
)

// tailBytes is how much of a child's stderr is kept.
const tailBytes = 8 << 10

// tail keeps the last bytes written to it: a child's stderr, quoted in the
// messages about that child.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
	cut bool // bytes were dropped from the front
}

func newTail(max int) *tail { return &tail{max: max} }

// Write keeps the last max bytes of everything written.
func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	return len(b), nil
}

// String returns what is kept.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// summaryLines and summaryBytes bound the stderr quoted in one message.
const (
	summaryLines = 6
	summaryBytes = 600
)

// Summary quotes the last lines of stderr on one line, for an error message
// that reports read only the first line of: "" when stderr is empty.
func (t *tail) Summary() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var lines []string
	for _, l := range bytes.Split(t.buf, []byte{'\n'}) {
		if s := strings.TrimSpace(string(l)); s != "" {
			lines = append(lines, s)
		}
	}
	if len(lines) == 0 {
		return ""
	}
	lines = lines[max(0, len(lines)-summaryLines):]
	s := strings.Join(lines, " ⏎ ")
	if len(s) > summaryBytes {
		s = "…" + strings.ToValidUTF8(s[len(s)-summaryBytes:], "")
	}
	return "; its stderr ends: " + s
}
