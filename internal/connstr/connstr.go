// Package connstr reads and writes PostgreSQL keyword/value connection
// strings ("host=h port=5432 user='it\'s'") exactly as pgx reads them, so
// that the harness can change one setting (the application_name it gives
// connections as a courtesy, the hosts and ports of its wire proxy) without changing
// any other. Editing such a string as text is a trap: "password= dbname=x"
// gives the password the value "dbname=x", and "dbname=" at the end gives
// dbname an empty value that swallows whatever is appended after it.
//
// [PartsOf] splits a connection string of either form, URL or keywords,
// into hosts, ports, user, password, database and the other settings, as
// pgx reads them, for the exec protocol's setup, which gives them to
// implementations whose drivers cannot read the string.
package connstr

import (
	"errors"
	"fmt"
	"strings"
)

// Setting is one keyword and its value, unescaped.
type Setting struct {
	Key, Value string
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// Parse splits a keyword/value connection string into its settings, in
// order, as pgx (and libpq) read it: keyword, optional spaces, '=',
// optional spaces, then a value, single-quoted or not, in which a
// backslash takes the next character literally. A keyword may repeat: the
// last one counts when connecting.
func Parse(s string) ([]Setting, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, errors.New("a NUL byte in the connection string")
	}
	var out []Setting
	s = strings.TrimLeft(s, " \t\n\r\v\f")
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return nil, fmt.Errorf("%q is not followed by =", s)
		}
		key := strings.Trim(s[:eq], " \t\n\r\v\f")
		if key == "" || strings.ContainsAny(key, " \t\n\r\v\f") {
			return nil, fmt.Errorf("%q is not a keyword followed by =", s[:eq])
		}
		s = strings.TrimLeft(s[eq+1:], " \t\n\r\v\f")
		var raw string
		switch {
		case s == "":
		case s[0] != '\'':
			end := 0
			for ; end < len(s) && !isSpace(s[end]); end++ {
				if s[end] == '\\' {
					end++
					if end == len(s) {
						break // a trailing backslash is dropped
					}
				}
			}
			raw, s = s[:end], s[end:]
		default:
			end := 1
			for ; end < len(s) && s[end] != '\''; end++ {
				if s[end] == '\\' {
					end++
				}
			}
			if end >= len(s) {
				return nil, fmt.Errorf("the value of %q lacks its closing quote", key)
			}
			raw, s = s[1:end], s[end+1:]
		}
		out = append(out, Setting{Key: key, Value: unescape(raw)})
		s = strings.TrimLeft(s, " \t\n\r\v\f")
	}
	return out, nil
}

// unescape drops each backslash and keeps the character after it.
func unescape(raw string) string {
	if !strings.Contains(raw, `\`) {
		return raw
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		if raw[i] == '\\' {
			i++
			if i == len(raw) {
				break
			}
		}
		b.WriteByte(raw[i])
	}
	return b.String()
}

// Format writes settings as a keyword/value connection string that Parse,
// pgx and libpq read back as the same settings: every value quoted, with
// its quotes and backslashes escaped.
func Format(settings []Setting) string {
	parts := make([]string, len(settings))
	for i, s := range settings {
		parts[i] = s.Key + "=" + Quote(s.Value)
	}
	out := strings.Join(parts, " ")
	if IsURL(out) {
		// A keyword that looks like a URL's scheme ("postgres://") would
		// make pgx read the string as a URL; a leading space keeps it a
		// keyword/value string, as it was parsed.
		out = " " + out
	}
	return out
}

// Quote writes v as a quoted keyword/value value.
func Quote(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// Set returns settings with key set to value: every earlier setting of key
// is dropped and one is added at the end.
func Set(settings []Setting, key, value string) []Setting {
	out := make([]Setting, 0, len(settings)+1)
	for _, s := range settings {
		if s.Key != key {
			out = append(out, s)
		}
	}
	return append(out, Setting{Key: key, Value: value})
}
