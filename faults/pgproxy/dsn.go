package pgproxy

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/harmless-dev/harmless/internal/connstr"
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
	if connstr.IsURL(upstreamDSN) {
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
	user, _, tail := connstr.SplitURL(dsn)

	path, fragment, hasFragment := strings.Cut(tail, "#")
	path, query, hasQuery := strings.Cut(path, "?")
	if hasQuery {
		values, err := url.ParseQuery(query)
		if err != nil {
			return "", fmt.Errorf("URL query: %w", err)
		}
		for k, vs := range values {
			for _, v := range vs {
				if err := checkTLS(k, v); err != nil {
					return "", err
				}
			}
		}
		// Not values.Encode: it would rewrite every other parameter ("%20"
		// as "+", which libpq reads as a plus).
		query = connstr.DropQueryParams(query, "host", "hostaddr", "port")
	}

	var b strings.Builder
	b.WriteString(user + net.JoinHostPort(host, port) + path)
	if hasQuery && query != "" {
		b.WriteString("?" + query)
	}
	if hasFragment {
		b.WriteString("#" + fragment)
	}
	return b.String(), nil
}

func rewriteKeywords(dsn, host, port string) (string, error) {
	settings, err := connstr.Parse(dsn)
	if err != nil {
		return "", err
	}
	out := []connstr.Setting{{Key: "host", Value: host}, {Key: "port", Value: port}}
	for _, s := range settings {
		if err := checkTLS(s.Key, s.Value); err != nil {
			return "", err
		}
		if !isAddressKey(s.Key) {
			out = append(out, s)
		}
	}
	return connstr.Format(out), nil
}
