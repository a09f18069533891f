package redact

import (
	"bytes"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// FuzzRedact: whatever the secret and the text around it, no stretch of
// the output between two masks holds the secret, as written or in the
// forms Add promises (percent-encoded, %q-quoted); and a Writer fed the
// text in two pieces, cut anywhere, writes what String returns.
func FuzzRedact(f *testing.F) {
	f.Add("hunter2", "password=", " host=db", uint16(3))
	f.Add("p@ss word'\\", "postgres://u:", "@h/db", uint16(17))
	f.Add("aaaa", "aaa", "aaaaa", uint16(5))
	f.Add("multi\nline", "x\nmulti", "\nline", uint16(8))
	f.Add("dact", "[re", "ed]", uint16(2))
	f.Fuzz(func(t *testing.T, secret, before, after string, cut uint16) {
		r := New()
		if !r.Add(secret) {
			if len(secret) >= MinLen {
				t.Fatalf("Add(%q) refused a secret of %d bytes", secret, len(secret))
			}
			return
		}
		for _, form := range []string{secret, url.QueryEscape(secret), strconv.Quote(secret)} {
			text := before + form + after
			got := r.String(text)
			for _, stretch := range strings.Split(got, Mask) {
				if strings.Contains(stretch, secret) {
					t.Fatalf("String(%q) = %q leaves the secret %q showing", text, got, secret)
				}
			}
			var out bytes.Buffer
			w := r.Writer(&out)
			n := int(cut) % (len(text) + 1)
			if _, err := w.Write([]byte(text[:n])); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write([]byte(text[n:])); err != nil {
				t.Fatal(err)
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if out.String() != got {
				t.Fatalf("written cut at %d: %q; String gives %q", n, out.String(), got)
			}
		}
	})
}
