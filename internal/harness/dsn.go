package harness

import (
	"net/url"
	"strings"
)

// setURLParam sets the query parameter key of a connection URL to value,
// dropping any earlier value of key. It leaves the rest of the URL as it
// was, byte for byte: re-encoding it would turn "%20" into "+", which libpq
// and pgx read as a literal plus, not a space.
//
// The URL is split as libpq and pgx split it, not as net/url does: an '@'
// before the first '/' ends the user information, even after a '?', so
// the query starts at the first '?' after that '@'
// ("postgres://?@h?x=1" is user "?", host h).
func setURLParam(dsn, key, value string) string {
	scheme, rest, _ := strings.Cut(dsn, "://")
	prefix := scheme + "://"
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		prefix, rest = prefix+rest[:i+1], rest[i+1:]
	}
	base, query, _ := strings.Cut(rest, "?")
	base = prefix + base
	var params []string
	for _, p := range strings.Split(query, "&") {
		k, _, _ := strings.Cut(p, "=")
		if k, err := url.PathUnescape(k); p == "" || (err == nil && k == key) {
			continue
		}
		params = append(params, p)
	}
	params = append(params, escapeQuery(key)+"="+escapeQuery(value))
	return base + "?" + strings.Join(params, "&")
}

// escapeQuery percent-encodes s for a connection URL's query, with a space
// as %20: connection URLs do not read "+" as a space.
func escapeQuery(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}
