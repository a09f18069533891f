package exec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/internal/redact"
)

// quoteOf writes stderr to a new quote in chunks of size bytes, as a pipe
// may deliver it, and returns the quote's summary.
func quoteOf(stderr string, size int) string {
	q := newStderrQuote(nil)
	for b := []byte(stderr); len(b) > 0; {
		n := min(size, len(b))
		_, _ = q.Write(b[:n])
		b = b[n:]
	}
	return q.Summary()
}

// checkBounded fails the test when a summary quotes more lines or bytes
// than the quote keeps.
func checkBounded(t *testing.T, summary string) {
	t.Helper()
	// The two parts, their line breaks, the gap between them and the words
	// around them.
	if most := reportBytes + endBytes + 3*(endLines+reportLines+1) + 80; len(summary) > most {
		t.Errorf("the summary has %d bytes; want at most %d:\n%s", len(summary), most, summary)
	}
	if lines := strings.Count(summary, " ⏎ ") + 1; lines > endLines+reportLines+1 {
		t.Errorf("the summary quotes %d lines; want at most %d:\n%s", lines, endLines+reportLines+1, summary)
	}
}

// TestStderrQuoteShowsTheCauseOfACrash quotes real crash dumps of children
// in several languages (testdata/stderr: node-postgres's pool without an
// 'error' listener when its connection is terminated, about 300 lines with
// the cause at the top; an uncaught TypeError and an unhandled rejection
// in Node.js, the former after a handled error was logged; a Go panic with its goroutine stacks; a Python program that
// logged a caught traceback and then crashed with another; a Java
// exception with its cause), each preceded by a few log lines, and a plain
// log. Each summary must show the line that says what went wrong, stay
// bounded, and not quote an earlier dump as the crash.
func TestStderrQuoteShowsTheCauseOfACrash(t *testing.T) {
	for _, c := range []struct {
		file   string
		shows  []string // the cause, and the last line
		report bool     // whether the crash report's start is quoted apart from the last lines
		hides  string   // an earlier dump or the lines in between, never quoted
	}{
		{"node-unhandled-error.txt", []string{"error: terminating connection due to administrator command", "Node.js v20.20.2"}, true, "_handleErrorEvent"},
		{"node-uncaught-exception.txt", []string{"TypeError: Cannot read properties of undefined (reading 'length')", "Node.js v20.20.2"}, true, "child: starting"},
		// A handled error logged with console.error, then a crash: only the
		// crash is quoted.
		{"node-logged-error-then-uncaught.txt", []string{"TypeError: Cannot read properties of undefined (reading 'length')", "Node.js v20.20.2"}, false, "ECONNREFUSED"},
		{"node-unhandled-rejection.txt", []string{"Error: connect ECONNREFUSED 127.0.0.1:1", "Node.js v20.20.2"}, true, "child: starting"},
		{"go-panic.txt", []string{"panic: runtime error: invalid memory address or nil pointer dereference", "main.go:33 +0x10e"}, true, "set up schema"},
		{"python-traceback.txt", []string{`psycopg2.OperationalError: connection to server at "127.0.0.1", port 1 failed: Connection refused`, "Is the server running on that host"}, true, "IndexError"},
		{"java-exception.txt", []string{`Exception in thread "main" java.lang.IllegalStateException: cannot claim harmless.double-delivery/1`, "... 3 more"}, true, "set up in schema"},
		{"plain-log.txt", []string{"lost the connection; reconnecting", "connected to the database again"}, false, "concurrent-delivery/35 "},
	} {
		t.Run(c.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "stderr", c.file))
			if err != nil {
				t.Fatal(err)
			}
			whole := quoteOf(string(data), len(data))
			t.Logf("%d lines quoted as: %s", strings.Count(string(data), "\n"), whole)
			for _, size := range []int{1, 7, 4096} {
				if got := quoteOf(string(data), size); got != whole {
					t.Errorf("written %d bytes at a time, the summary is\n%s\nwritten at once, it is\n%s", size, got, whole)
				}
			}
			for _, want := range c.shows {
				if !strings.Contains(whole, want) {
					t.Errorf("the summary does not show %q:\n%s", want, whole)
				}
			}
			if got := strings.Contains(whole, "last crash report starts: "); got != c.report {
				t.Errorf("the summary quotes a crash report apart: %t; want %t:\n%s", got, c.report, whole)
			}
			if strings.Contains(whole, c.hides) {
				t.Errorf("the summary quotes %q, which is not part of the crash or the last lines:\n%s", c.hides, whole)
			}
			checkBounded(t, whole)
		})
	}
}

func TestStderrQuoteEdgeCases(t *testing.T) {
	for _, c := range []struct {
		name, stderr, want string
	}{
		{"nothing", "", ""},
		{"blank lines", "\n  \n\t\n", ""},
		{"one line", "execchild: simulated crash\n", "; its stderr: execchild: simulated crash"},
		{"no final newline", "a\nb", "; its stderr: a ⏎ b"},
		{"carriage returns", "a\r\nb\r\n", "; its stderr: a ⏎ b"},
		{"invalid UTF-8", "bad \xff byte\n", "; its stderr: bad � byte"},
		{"more than the last lines", "1\n2\n3\n4\n5\n6\n7\n8\n", "; its stderr ends: 3 ⏎ 4 ⏎ 5 ⏎ 6 ⏎ 7 ⏎ 8"},
		// The crash report is among the last lines: quoted once.
		{"short report", "log\npanic: boom\n\ngoroutine 1 [running]:\nmain.main()\n", "; its stderr: log ⏎ panic: boom ⏎ goroutine 1 [running]: ⏎ main.main()"},
		// The report directly before the last lines: no gap between them.
		{"adjacent", "panic: boom\n1\n2\n3\n4\n5\n6\n", "; its stderr's last crash report starts: panic: boom ⏎ 1 ⏎ 2 ⏎ 3 ⏎ 4 ⏎ 5 ⏎ 6"},
		// A repanic continues the report it follows.
		{"repanic", "panic: boom [recovered]\n\tpanic: boom\n" + strings.Repeat("\tframe\n", 20), "; its stderr's last crash report starts: panic: boom [recovered] ⏎ panic: boom ⏎ frame ⏎ frame ⏎ [12 more lines] ⏎ frame ⏎ frame ⏎ frame ⏎ frame ⏎ frame ⏎ frame"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := quoteOf(c.stderr, len(c.stderr)+1); got != c.want {
				t.Errorf("summary of %q:\n got %q\nwant %q", c.stderr, got, c.want)
			}
		})
	}
}

// TestStderrQuoteIsBounded writes what a misbehaving child might: one line
// of 1 MiB without a line break, and lines of 10 KiB. The summary keeps the
// start of each line and stays bounded.
func TestStderrQuoteIsBounded(t *testing.T) {
	huge := "Error: " + strings.Repeat("x", 1<<20)
	got := quoteOf(huge, 64<<10)
	if !strings.HasPrefix(got, "; its stderr: Error: xxx") || !strings.HasSuffix(got, "…") {
		t.Errorf("a 1 MiB line without a line break is quoted as %.200q…", got)
	}
	checkBounded(t, got)

	long := strings.Repeat("Traceback (most recent call last):\n"+strings.Repeat("y", 10<<10)+"\n", 20)
	got = quoteOf(long, 4096)
	checkBounded(t, got)
	if !strings.Contains(got, "Traceback (most recent call last): ⏎ yyy") {
		t.Errorf("lines of 10 KiB are quoted as %s", got)
	}
}

// TestStderrQuoteMasksSecrets quotes a child that prints its DSN, the
// password across the place where a long line is cut and across the chunks
// a pipe delivers, then crashes: the quote must never show the password,
// nor a part of it, and still show the crash.
func TestStderrQuoteMasksSecrets(t *testing.T) {
	const password = "Zq7-secret-pw-9Xk"
	secrets := redact.New()
	secrets.AddDSN("postgres://harmless:" + password + "@127.0.0.1:5432/db")
	const before = len("postgres://harmless:") // the line's bytes before the password, besides the padding
	for _, pad := range []int{0, lineBytes - before - 8, lineBytes - before - len(password), lineBytes - before - len(password) + 1, lineBytes - before, lineBytes} {
		stderr := "connecting\n" + strings.Repeat("x", pad) + "postgres://harmless:" + password + "@127.0.0.1:5432/db\n" +
			"panic: cannot connect with password " + password + "\n\ngoroutine 1 [running]:\nmain.main()\n"
		for _, size := range []int{1, 5, 4096} {
			q := newStderrQuote(secrets)
			for b := []byte(stderr); len(b) > 0; {
				n := min(size, len(b))
				_, _ = q.Write(b[:n])
				b = b[n:]
			}
			got := q.Summary()
			if strings.Contains(got, password[:6]) || strings.Contains(got, password[len(password)-6:]) {
				t.Errorf("pad %d, chunks of %d: the quote shows the password: %s", pad, size, got)
			}
			if !strings.Contains(got, "panic: cannot connect with password "+redact.Mask) {
				t.Errorf("pad %d, chunks of %d: the quote does not show the crash with the password masked: %s", pad, size, got)
			}
		}
	}
}

// excerptOf writes stderr to a new quote in chunks of size bytes and
// returns the quote's excerpt.
func excerptOf(stderr string, size int) string {
	q := newStderrQuote(nil)
	for b := []byte(stderr); len(b) > 0; {
		n := min(size, len(b))
		_, _ = q.Write(b[:n])
		b = b[n:]
	}
	return q.Excerpt()
}

// checkExcerptBounded fails the test when an excerpt quotes more than the
// first lines of a crash report and one more line, or their bytes.
func checkExcerptBounded(t *testing.T, excerpt string) {
	t.Helper()
	if most := reportBytes + lineBytes + 3*(reportLines+2) + 80; len(excerpt) > most {
		t.Errorf("the excerpt has %d bytes; want at most %d:\n%s", len(excerpt), most, excerpt)
	}
	if lines := strings.Count(excerpt, " ⏎ ") + 1; lines > reportLines+2 { // the gap counts as a line
		t.Errorf("the excerpt quotes %d lines; want at most %d:\n%s", lines, reportLines+2, excerpt)
	}
}

// TestStderrExcerptQuotesTheStartOfTheCrash quotes the real crash dumps of
// testdata/stderr as a list of crashes does: the first lines of the crash
// report, and the exception a Python traceback ends with; the last lines
// of a plain log. Never the object dump, nor the end of Node.js's report.
func TestStderrExcerptQuotesTheStartOfTheCrash(t *testing.T) {
	for _, c := range []struct {
		file  string
		shows []string
		hides []string
	}{
		{"node-unhandled-error.txt", []string{"crash report starts: error: terminating connection due to administrator command ⏎ at parseErrorMessage"}, []string{"reportStreamError", "Node.js v20", "child: deliver"}},
		{"node-uncaught-exception.txt", []string{"crash report starts: TypeError: Cannot read properties of undefined (reading 'length')"}, []string{"Node.js v20"}},
		{"node-logged-error-then-uncaught.txt", []string{"crash report starts: TypeError: Cannot read properties of undefined"}, []string{"ECONNREFUSED"}},
		{"node-unhandled-rejection.txt", []string{"crash report starts: Error: connect ECONNREFUSED 127.0.0.1:1"}, []string{"Node.js v20"}},
		{"go-panic.txt", []string{"crash report starts: panic: runtime error: invalid memory address or nil pointer dereference"}, []string{"set up schema"}},
		{"python-traceback.txt", []string{"crash report starts: Traceback (most recent call last):", ` more lines] ⏎ psycopg2.OperationalError: connection to server at "127.0.0.1", port 1 failed: Connection refused`}, []string{"IndexError", "Is the server running"}},
		{"java-exception.txt", []string{`crash report starts: Exception in thread "main" java.lang.IllegalStateException: cannot claim harmless.double-delivery/1`}, []string{"Caused by"}},
		{"plain-log.txt", []string{"its stderr ends: ", "connected to the database again"}, []string{"concurrent-delivery/38 "}},
	} {
		t.Run(c.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "stderr", c.file))
			if err != nil {
				t.Fatal(err)
			}
			whole := excerptOf(string(data), len(data))
			t.Logf("excerpt: %s", whole)
			for _, size := range []int{1, 7, 4096} {
				if got := excerptOf(string(data), size); got != whole {
					t.Errorf("written %d bytes at a time, the excerpt is\n%s\nwritten at once, it is\n%s", size, got, whole)
				}
			}
			for _, want := range c.shows {
				if !strings.Contains(whole, want) {
					t.Errorf("the excerpt does not show %q:\n%s", want, whole)
				}
			}
			for _, hide := range c.hides {
				if strings.Contains(whole, hide) {
					t.Errorf("the excerpt quotes %q, which is not the start of the crash:\n%s", hide, whole)
				}
			}
			checkExcerptBounded(t, whole)
		})
	}
}

func TestStderrExcerptEdgeCases(t *testing.T) {
	for _, c := range []struct {
		name, stderr, want string
	}{
		{"nothing", "", ""},
		{"one line", "execchild: simulated crash\n", "; its stderr: execchild: simulated crash"},
		{"no final newline", "a\nb", "; its stderr: a ⏎ b"},
		{"no report, more than its lines", "1\n2\n3\n4\n5\n6\n", "; its stderr ends: 3 ⏎ 4 ⏎ 5 ⏎ 6"},
		{"short report", "log\npanic: boom\n\ngoroutine 1 [running]:\n", "; its stderr's last crash report starts: panic: boom ⏎ goroutine 1 [running]:"},
		// An error the report names further down, right after its first lines.
		{"adjacent cause", "Traceback (most recent call last):\n  File \"a\"\n    x()\n  File \"b\"\nKeyError: 'k'\n", "; its stderr's last crash report starts: Traceback (most recent call last): ⏎ File \"a\" ⏎ x() ⏎ File \"b\" ⏎ KeyError: 'k'"},
		// A later report replaces the earlier, and its cause with it.
		{"second report", "Traceback (most recent call last):\n  File \"a\"\n  File \"b\"\n  File \"c\"\n  File \"d\"\nKeyError: 'k'\nlog\npanic: boom\n", "; its stderr's last crash report starts: panic: boom"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := excerptOf(c.stderr, len(c.stderr)+1); got != c.want {
				t.Errorf("excerpt of %q:\n got %q\nwant %q", c.stderr, got, c.want)
			}
		})
	}
}

// TestStderrExcerptIsBounded: one line of 1 MiB and lines of 10 KiB are
// cut as in the summary, and the excerpt stays bounded.
func TestStderrExcerptIsBounded(t *testing.T) {
	huge := "Error: " + strings.Repeat("x", 1<<20)
	checkExcerptBounded(t, excerptOf(huge+"\n", 64<<10))
	checkExcerptBounded(t, excerptOf(strings.Repeat(strings.Repeat("z", 10<<10)+"\n", 20), 4096))
	long := "Traceback (most recent call last):\n" + strings.Repeat("  "+strings.Repeat("y", 10<<10)+"\n", 20) + "ValueError: " + strings.Repeat("v", 10<<10) + "\n"
	got := excerptOf(long, 4096)
	checkExcerptBounded(t, got)
	if !strings.Contains(got, "ValueError: vvv") {
		t.Errorf("the exception after long lines is not quoted: %s", got)
	}
}
