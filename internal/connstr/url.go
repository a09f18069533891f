package connstr

import (
	"net/url"
	"slices"
	"strings"
)

// IsURL reports whether dsn is a connection URL (postgres:// or
// postgresql://) rather than a keyword/value string.
func IsURL(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// SetParam returns dsn, a connection URL or a keyword/value string, with
// the run-time parameter or setting key set to value and nothing else
// changed: in a URL as [SetURLParam] sets it, in a keyword/value string
// read as pgx reads it and written back (see [Parse]).
func SetParam(dsn, key, value string) (string, error) {
	if IsURL(dsn) {
		return SetURLParam(dsn, key, value), nil
	}
	settings, err := Parse(dsn)
	if err != nil {
		return "", err
	}
	return Format(Set(settings, key, value)), nil
}

// SplitURL splits a connection URL as libpq and pgx split it, not as
// net/url does: user is the scheme and the user information up to an '@'
// before the first '/' (an '@' ends it even after a '?': in
// "postgres://?@h?x=1" the user is "?" and the host h), hosts runs from
// there to the first '/', '?' or '#', and rest is what follows.
// user+hosts+rest is the URL.
func SplitURL(dsn string) (user, hosts, rest string) {
	scheme, rest, _ := strings.Cut(dsn, "://")
	user = scheme + "://"
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		user, rest = user+rest[:i+1], rest[i+1:]
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	return user, rest[:end], rest[end:]
}

// SetURLParam returns the connection URL dsn with its query parameter key
// set to value, dropping every earlier value of key. The rest of the URL
// stays as it was, byte for byte: re-encoding it, as url.Values.Encode
// does, would turn "%20" into "+", which libpq reads as a literal plus,
// not a space. The URL is split as [SplitURL] splits it.
func SetURLParam(dsn, key, value string) string {
	user, hosts, rest := SplitURL(dsn)
	base, query, _ := strings.Cut(rest, "?")
	base = user + hosts + base
	query = DropQueryParams(query, key)
	if query != "" {
		query += "&"
	}
	return base + "?" + query + escapeQuery(key) + "=" + escapeQuery(value)
}

// DropQueryParams returns query, a connection URL's query without its '?',
// without the parameters named keys. The others stay as they were, byte
// for byte (see [SetURLParam]), and so does their order.
func DropQueryParams(query string, keys ...string) string {
	var params []string
	for _, p := range strings.Split(query, "&") {
		k, _, _ := strings.Cut(p, "=")
		if k, err := url.PathUnescape(k); p == "" || (err == nil && slices.Contains(keys, k)) {
			continue
		}
		params = append(params, p)
	}
	return strings.Join(params, "&")
}

// escapeQuery percent-encodes s for a connection URL's query, with a space
// as %20: libpq does not read "+" as a space.
func escapeQuery(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}
