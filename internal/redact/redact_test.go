package redact

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestStringMasksEveryForm(t *testing.T) {
	const secret = `s3cr'et p@ss\word`
	r := New(secret)
	for _, text := range []string{
		"dsn: password=" + secret + " host=h",
		"url: postgres://u:s3cr%27et%20p%40ss%5Cword@h/db",
		`keyword: password='s3cr\'et p@ss\\word'`,
		fmt.Sprintf("go: %q", secret),
	} {
		got := r.String(text)
		if strings.Contains(got, "s3cr") || !strings.Contains(got, Mask) {
			t.Errorf("String(%q) = %q: the secret is not masked", text, got)
		}
	}
	if got := r.String("nothing secret here"); got != "nothing secret here" {
		t.Errorf("String changed a text without a secret: %q", got)
	}
}

func TestShortSecretsAreNotMasked(t *testing.T) {
	r := New()
	if r.Add("abc") {
		t.Error("Add of a 3-byte secret reports that it will be masked")
	}
	if !r.Add("abcd") {
		t.Error("Add of a 4-byte secret reports that it will not be masked")
	}
	if got := r.String("abc abcd"); got != "abc "+Mask {
		t.Errorf("String = %q, want %q", got, "abc "+Mask)
	}
	var none *Redactor
	if got := none.String("abcd"); got != "abcd" {
		t.Errorf("a nil Redactor changed the text: %q", got)
	}
}

func TestLongerSecretIsMaskedWhole(t *testing.T) {
	r := New("secret", "secret-and-more")
	if got := r.String("x secret-and-more y"); got != "x "+Mask+" y" {
		t.Errorf("String = %q, want the longer secret masked whole", got)
	}
}

// TestWriterMatchesString writes texts holding secrets through a Writer in
// random pieces, down to single bytes: what comes out must be what String
// gives for the whole text, whichever way the secrets were split.
func TestWriterMatchesString(t *testing.T) {
	r := New("hunter2hunter2", "correct horse", "multi\nline secret")
	rng := rand.New(rand.NewPCG(1, 2))
	texts := []string{
		"plain line\nhunter2hunter2 at the start of a line\nand correct horse at its end: correct horse",
		"hunter2hunter2hunter2hunter2 twice, and a near miss: hunter2hunte\n",
		"a multi\nline secret, then multi\nline but not the secret\n",
		strings.Repeat("x", 100) + "correct hors", // ends in a part of a secret
	}
	for _, text := range texts {
		want := r.String(text)
		for range 200 {
			var out bytes.Buffer
			w := r.Writer(&out)
			for rest := text; rest != ""; {
				n := min(len(rest), 1+rng.IntN(20))
				if _, err := w.Write([]byte(rest[:n])); err != nil {
					t.Fatal(err)
				}
				rest = rest[n:]
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if out.String() != want {
				t.Fatalf("written in pieces: %q\nwant %q", out.String(), want)
			}
		}
	}
}

// TestWriterPassesCompleteLines checks that a line is passed on when it is
// written, not held back for the next write, when no secret spans lines.
func TestWriterPassesCompleteLines(t *testing.T) {
	var out bytes.Buffer
	w := New("a long secret of many bytes").Writer(&out)
	fmt.Fprintf(w, "[  1.0s] progress\n")
	if out.String() != "[  1.0s] progress\n" {
		t.Errorf("after a complete line, the writer passed on %q", out.String())
	}
	fmt.Fprintf(w, "partial")
	if out.String() != "[  1.0s] progress\n" {
		t.Errorf("a partial line shorter than the secret was passed on: %q", out.String())
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "[  1.0s] progress\npartial" {
		t.Errorf("Flush left %q", out.String())
	}
}

func TestPasswords(t *testing.T) {
	t.Setenv("PGPASSWORD", "")
	t.Setenv("PGPASSFILE", "/nonexistent")
	for _, tc := range []struct {
		dsn  string
		want []string // each must be among the passwords found
	}{
		{"postgres://u:hunter2@h:5432/db", []string{"hunter2"}},
		{"postgresql://u:p%40ss%2Fword@h/db?sslmode=disable", []string{"p@ss/word", "p%40ss%2Fword"}},
		{"postgres://u@h/db?password=from%20query", []string{"from query"}},
		{"host=h user=u password='it\\'s secret' dbname=db", []string{"it's secret"}},
		{"host=h password=plain dbname=db", []string{"plain"}},
		{"host=h sslpassword=keypass", []string{"keypass"}},
		// Strings that do not parse, as a driver's error would quote them.
		{"postgres://u:unencoded@at@h:notaport/db", []string{"unencoded@at"}},
		{"host=h password='unclosed", []string{"unclosed"}},
		{"host=h password='unclosed two words", []string{"unclosed two words", "unclosed", "words"}},
		{"postgres://u:pass@word@h:notaport/db", []string{"pass@word", "pass", "word"}},
		{"host=h port=notaport password=badport", []string{"badport"}},
	} {
		got := Passwords(tc.dsn)
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("Passwords(%q) = %q, missing %q", tc.dsn, got, w)
			}
		}
	}
	if got := Passwords("postgres://u@h/db"); len(got) != 0 {
		t.Errorf("a DSN without a password has passwords %q", got)
	}
	if got := Passwords(""); len(got) != 0 {
		t.Errorf("no DSN has passwords %q", got)
	}
}

// TestPasswordsReadsPGPASSWORD checks that a DSN without a password gets
// the one pgx would connect with, from $PGPASSWORD.
func TestPasswordsReadsPGPASSWORD(t *testing.T) {
	t.Setenv("PGPASSWORD", "from-the-environment")
	if got := Passwords("postgres://u@h/db"); !slices.Contains(got, "from-the-environment") {
		t.Errorf("Passwords = %q, missing $PGPASSWORD", got)
	}
}
