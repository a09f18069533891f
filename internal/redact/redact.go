// Package redact keeps known secrets, such as the password of the DSN a run
// connects with, out of what harmless writes: the terminal, the JSON
// certificate, the JUnit and Markdown reports, and the quotes of a child's
// stderr.
//
// A [Redactor] holds the secrets a run knows of and replaces each
// occurrence of one with [Mask]. It is applied where text leaves harmless
// (a few sinks) rather than where each message is made, so that a message
// nobody thought of (a child that prints its DSN before it crashes, a
// driver error that echoes a connection string) is covered too.
//
// Only known secrets are masked: text that merely looks like a password is
// left alone. A secret shorter than [MinLen] is not masked at all (see
// MinLen for why), and a secret is found only as written or in the few
// encodings harmless or its reports produce (see [Redactor.Add]).
package redact

import (
	"bytes"
	"encoding/json"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/harmless-dev/harmless/internal/connstr"
)

// Mask replaces each occurrence of a secret.
const Mask = "[redacted]"

// MinLen is the length, in bytes, below which a secret is not masked. A
// shorter one would mask every occurrence of its letters wherever they
// appear (a password "pg" would garble every "pg_" and "postgres"), making
// reports unreadable, while hiding almost nothing: a password that short
// falls to guessing in moments. Callers warn when a secret is too short
// (see [Redactor.Add]).
const MinLen = 4

// Redactor masks the secrets added to it. It is safe for concurrent use:
// secrets can be added while writers that use it are written to. The nil
// *Redactor masks nothing.
type Redactor struct {
	mu      sync.RWMutex
	secrets []string // every form of every secret, longest first
	first   [256]bool
	newline bool // whether a form contains a newline
}

// New returns a Redactor of secrets; see [Redactor.Add].
func New(secrets ...string) *Redactor {
	r := &Redactor{}
	for _, s := range secrets {
		r.Add(s)
	}
	return r
}

// Add adds secret, and reports whether it will be masked: false when it is
// empty or shorter than MinLen. Besides secret as it is, Add masks the forms
// in which harmless's outputs can spell it: percent-encoded as in a
// connection URL, backslash-escaped as in a quoted keyword/value connection
// string, and quoted as Go's %q and JSON write it.
func (r *Redactor) Add(secret string) bool {
	if len(secret) < MinLen {
		return false
	}
	forms := []string{
		secret,
		url.QueryEscape(secret),
		strings.ReplaceAll(url.QueryEscape(secret), "+", "%20"),
		url.PathEscape(secret),
		strings.TrimPrefix(url.UserPassword("", secret).String(), ":"),
		strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(secret),
		strings.Trim(strconv.Quote(secret), `"`),
	}
	if b, err := json.Marshal(secret); err == nil {
		forms = append(forms, strings.Trim(string(b), `"`))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range forms {
		if slices.Contains(r.secrets, f) {
			continue
		}
		r.secrets = append(r.secrets, f)
		r.first[f[0]] = true
		r.newline = r.newline || strings.Contains(f, "\n")
	}
	// Longest first: where two secrets match at one place, the longer is
	// masked whole.
	slices.SortStableFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	return true
}

// AddDSN adds the passwords of the connection string dsn (see [Passwords])
// and returns them, so that the caller can pass them on, or warn about those
// too short to be masked.
func (r *Redactor) AddDSN(dsn string) []string {
	pws := Passwords(dsn)
	for _, p := range pws {
		r.Add(p)
	}
	return pws
}

// String returns s with every secret masked.
func (r *Redactor) String(s string) string {
	if r == nil || s == "" {
		return s
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if len(r.secrets) == 0 {
		return s
	}
	out, _ := r.replace([]byte(s), len(s))
	return string(out)
}

// replace masks the secrets in b[:limit], where a secret may start, and
// returns the result and how much of b it consumed: limit, or more where a
// secret that starts before limit ends after it. The caller holds r.mu.
func (r *Redactor) replace(b []byte, limit int) ([]byte, int) {
	var out []byte
	last, i := 0, 0
	for i < limit {
		if !r.first[b[i]] {
			i++
			continue
		}
		n := 0
		for _, s := range r.secrets {
			if bytes.HasPrefix(b[i:], []byte(s)) {
				n = len(s)
				break
			}
		}
		if n == 0 {
			i++
			continue
		}
		out = append(append(out, b[last:i]...), Mask...)
		i += n
		last = i
	}
	return append(out, b[last:i]...), i
}

// maxLen is the length of the longest form of a secret. The caller holds
// r.mu.
func (r *Redactor) maxLen() int {
	if len(r.secrets) == 0 {
		return 0
	}
	return len(r.secrets[0])
}

// MaxLen is the length of the longest form of a secret added so far: a
// reader that keeps only part of a text keeps that much more, so that a
// secret cut in two at its edge can still be recognised.
func (r *Redactor) MaxLen() int {
	if r == nil {
		return 0
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.maxLen()
}

// Writer masks the secrets of r in what is written through it to an
// underlying writer. A secret may be split across writes, so it holds back
// the end of what it was given, at most the length of the longest secret,
// until the next write or Flush; a complete line is passed on at once when
// no secret spans lines.
type Writer struct {
	r   *Redactor
	w   io.Writer
	mu  sync.Mutex
	buf []byte
}

// Writer returns a Writer that masks r's secrets in what it passes to w.
// Call Flush when done.
func (r *Redactor) Writer(w io.Writer) *Writer { return &Writer{r: r, w: w} }

// Write masks what it can of b and passes it on; see [Writer].
func (w *Writer) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	if err := w.pass(false); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Flush masks and passes on everything held back.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pass(true)
}

// pass writes what of w.buf is safe to write: all of it when all is set.
// The caller holds w.mu.
func (w *Writer) pass(all bool) error {
	if w.r == nil {
		_, err := w.w.Write(w.buf)
		w.buf = w.buf[:0]
		return err
	}
	w.r.mu.RLock()
	// A secret not yet complete in buf starts within its last maxLen-1
	// bytes, or, when no secret spans lines, after its last newline.
	limit := len(w.buf)
	if !all {
		limit = len(w.buf) - max(w.r.maxLen()-1, 0)
		if nl := bytes.LastIndexByte(w.buf, '\n'); !w.r.newline && nl+1 > limit {
			limit = nl + 1
		}
	}
	if limit <= 0 {
		w.r.mu.RUnlock()
		return nil
	}
	out, used := w.r.replace(w.buf, limit)
	w.r.mu.RUnlock()
	w.buf = w.buf[:copy(w.buf, w.buf[used:])]
	if len(out) == 0 {
		return nil
	}
	_, err := w.w.Write(out)
	return err
}

// Passwords returns the passwords in the connection string dsn, a URL or
// keyword/value string: the password and sslpassword settings, as written
// and decoded, and the password pgx would connect with, which may come from
// $PGPASSWORD or a password file. It is best effort for a string that does
// not parse, which is when a driver's error is most likely to quote it:
// what looks like a password is taken, and each of its words, since pgx's
// own masking of such a string can leave some of them showing.
func Passwords(dsn string) []string {
	if strings.TrimSpace(dsn) == "" {
		return nil
	}
	var out []string
	add := func(vs ...string) {
		for _, v := range vs {
			if v != "" && !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	cfg, err := pgconn.ParseConfig(dsn)
	if err == nil {
		add(cfg.Password)
	}
	if rest, ok := cutScheme(dsn); ok {
		add(urlPasswords(rest)...)
	} else if settings, err := connstr.Parse(dsn); err == nil {
		for _, s := range settings {
			if isPasswordKey(s.Key) {
				add(s.Value)
			}
		}
	}
	// As written, for a string that does not parse either way.
	for _, m := range keywordPassword.FindAllStringSubmatch(dsn, -1) {
		v := m[1]
		if strings.HasPrefix(v, "'") {
			v = strings.TrimSuffix(strings.TrimPrefix(v, "'"), "'")
		}
		add(v, strings.NewReplacer(`\\`, `\`, `\'`, `'`).Replace(v))
	}
	if err != nil {
		// pgx quotes a string it cannot parse in its error, masking what
		// its own patterns take for the password: for a malformed one
		// (an unclosed quote, an unencoded '@') that can be a part, which
		// leaves the rest of it showing. Each word of it is masked too.
		for _, v := range slices.Clone(out) {
			add(strings.FieldsFunc(v, func(r rune) bool { return r == '@' || unicode.IsSpace(r) })...)
		}
		// What is too short to mask is left out: these are guesses, and
		// parts, not passwords too short to mask, which callers warn
		// about; and a DSN that does not parse connects with none.
		out = slices.DeleteFunc(out, func(v string) bool { return len(v) < MinLen })
	}
	return out
}

// keywordPassword finds a password setting in a keyword/value string, or in
// a URL's query, as written: quoted, or up to a space or an ampersand.
var keywordPassword = regexp.MustCompile(`(?i)(?:^|[\s?&])(?:ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'?|[^\s&]+)`)

// isPasswordKey reports whether a connection setting holds a password.
func isPasswordKey(key string) bool {
	return key == "password" || key == "sslpassword"
}

// cutScheme returns the part of a connection URL after its scheme.
func cutScheme(dsn string) (string, bool) {
	for _, prefix := range []string{"postgres://", "postgresql://"} {
		if rest, ok := strings.CutPrefix(dsn, prefix); ok {
			return rest, true
		}
	}
	return "", false
}

// urlPasswords returns the passwords of a connection URL without its
// scheme: the userinfo's, as pgx reads it (up to the first '@' before any
// '/') and, in case the password holds an unencoded '@' or '/', up to the
// last '@'; and the password and sslpassword query values; each as written
// and decoded.
func urlPasswords(rest string) []string {
	var out []string
	both := func(v string) {
		out = append(out, v)
		if d, err := url.PathUnescape(v); err == nil {
			out = append(out, d)
		}
	}
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		if _, pw, ok := strings.Cut(rest[:i], ":"); ok {
			both(pw)
		}
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		if _, pw, ok := strings.Cut(rest[:i], ":"); ok {
			both(pw)
		}
	}
	if _, query, ok := strings.Cut(rest, "?"); ok {
		for _, kv := range strings.Split(query, "&") {
			k, v, _ := strings.Cut(kv, "=")
			if k, err := url.QueryUnescape(k); err == nil && isPasswordKey(k) {
				both(v)
			}
		}
	}
	return out
}
