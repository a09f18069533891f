package pgproxy

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// DSN returns upstreamDSN with its host and port replaced by the proxy's,
// so that a client connects through the proxy with everything else (user,
// password, database, parameters) unchanged. It takes a URL
// (postgres://... or postgresql://...) or a keyword/value string
// ("host=... port=... user=..."). Every host of a multi-host DSN is
// replaced by the proxy, and hostaddr is dropped.
//
// The proxy does not speak TLS (it answers SSLRequest with 'N'), so a DSN
// that insists on it (sslmode require, verify-ca or verify-full, or
// sslnegotiation direct) is refused rather than left to fail at connect.
// sslmode prefer (pgx's and libpq's default) and allow fall back to
// plaintext.
func (p *Proxy) DSN(upstreamDSN string) (string, error) {
	host, port, err := net.SplitHostPort(p.Addr())
	if err != nil {
		return "", fmt.Errorf("pgproxy: %w", err)
	}
	var dsn string
	if strings.HasPrefix(upstreamDSN, "postgres://") || strings.HasPrefix(upstreamDSN, "postgresql://") {
		dsn, err = rewriteURL(upstreamDSN, host, port)
	} else {
		dsn, err = rewriteKeywords(upstreamDSN, host, port)
	}
	if err != nil {
		// Not the DSN itself: it may hold a password.
		return "", fmt.Errorf("pgproxy: rewrite a DSN for the proxy: %w", err)
	}
	return dsn, nil
}

// checkTLS refuses settings that make the client insist on TLS.
func checkTLS(key, value string) error {
	switch {
	case key == "sslmode" && (value == "require" || value == "verify-ca" || value == "verify-full"):
	case key == "sslnegotiation" && value == "direct":
	default:
		return nil
	}
	return fmt.Errorf("%s=%s: the proxy does not speak TLS; use sslmode=disable, allow or prefer", key, value)
}

// isAddressKey reports whether a setting says where the server is.
func isAddressKey(k string) bool { return k == "host" || k == "hostaddr" || k == "port" }

func rewriteURL(dsn, host, port string) (string, error) {
	scheme, rest, _ := strings.Cut(dsn, "://")
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	userinfo := ""
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		userinfo = authority[:i+1]
	}

	path, fragment, hasFragment := strings.Cut(tail, "#")
	path, query, hasQuery := strings.Cut(path, "?")
	if hasQuery {
		values, err := url.ParseQuery(query)
		if err != nil {
			return "", fmt.Errorf("URL query: %w", err)
		}
		rewrite := false
		for k, vs := range values {
			for _, v := range vs {
				if err := checkTLS(k, v); err != nil {
					return "", err
				}
			}
			if isAddressKey(k) {
				delete(values, k)
				rewrite = true
			}
		}
		if rewrite {
			query = values.Encode()
		}
	}

	var b strings.Builder
	b.WriteString(scheme + "://" + userinfo + net.JoinHostPort(host, port) + path)
	if hasQuery && query != "" {
		b.WriteString("?" + query)
	}
	if hasFragment {
		b.WriteString("#" + fragment)
	}
	return b.String(), nil
}

// setting is one keyword=value of a keyword/value DSN, with the value as
// written (quoted or not).
type setting struct{ key, raw string }

func rewriteKeywords(dsn, host, port string) (string, error) {
	settings, err := parseKeywords(dsn)
	if err != nil {
		return "", err
	}
	out := []string{"host=" + quote(host), "port=" + port}
	for _, s := range settings {
		if err := checkTLS(s.key, unquote(s.raw)); err != nil {
			return "", err
		}
		if !isAddressKey(s.key) {
			out = append(out, s.key+"="+s.raw)
		}
	}
	return strings.Join(out, " "), nil
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// parseKeywords splits a keyword/value DSN as libpq does: keyword = value,
// the value single-quoted or not, backslash escaping the next character.
func parseKeywords(s string) ([]setting, error) {
	var out []setting
	i := 0
	skip := func() {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
	}
	for {
		skip()
		if i == len(s) {
			return out, nil
		}
		start := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[start:i]
		skip()
		if i == len(s) || s[i] != '=' {
			return nil, fmt.Errorf("keyword %q is not followed by =", key)
		}
		i++
		skip()
		vstart := i
		if i < len(s) && s[i] == '\'' {
			i++
			for {
				if i >= len(s) {
					return nil, fmt.Errorf("the value of %q lacks its closing quote", key)
				}
				if s[i] == '\\' {
					i += 2
					continue
				}
				i++
				if s[i-1] == '\'' {
					break
				}
			}
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' {
					i++
				}
				i++
			}
		}
		if i > len(s) {
			return nil, errors.New("a keyword/value DSN ends with a lone backslash")
		}
		out = append(out, setting{key: key, raw: s[vstart:i]})
	}
}

// unquote is the value of a keyword/value setting as written.
func unquote(raw string) string {
	raw = strings.TrimSuffix(strings.TrimPrefix(raw, "'"), "'")
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		if raw[i] == '\\' && i+1 < len(raw) {
			i++
		}
		b.WriteByte(raw[i])
	}
	return b.String()
}

// quote writes v as a keyword/value setting's value.
func quote(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\n\r\f\v'\\") {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}
