package pgproxy

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/harmless-dev/harmless/internal/connstr"
	"github.com/harmless-dev/harmless/internal/pgaddr"
)

// DSN returns upstreamDSN with every host replaced by client's listener
// for it, so that the client connects through the proxy with everything
// else (user, password, database, parameters) unchanged. For each host of
// upstreamDSN, in order, it takes the client's listener whose upstream is
// that host:port, and opens one ([Proxy.Listen]) when the client has none
// yet. A DSN that names several hosts (a replicated database, with
// target_session_attrs) stays so, in the same order: a driver that tries
// the hosts in turn reaches each server through a listener of its own. It
// takes a URL (postgres://... or postgresql://...) or a keyword/value
// string ("host=... port=... user=..."); hostaddr is dropped. The hosts
// are read as pgx reads them, defaults and PGHOST included; a host that is
// a Unix-domain socket's directory is reached there, while the client
// connects to the listener over TCP.
//
// The proxy does not speak TLS (it answers SSLRequest with 'N'), so a DSN
// that insists on it (sslmode require, verify-ca or verify-full, or
// sslnegotiation direct) is refused rather than left to fail at connect.
// sslmode prefer (pgx's and libpq's default) and allow fall back to
// plaintext.
func (p *Proxy) DSN(client, upstreamDSN string) (string, error) {
	// Errors never quote the DSN: it may hold a password.
	if err := checkDSNTLS(upstreamDSN); err != nil {
		return "", fmt.Errorf("pgproxy: rewrite a DSN for the proxy: %w", err)
	}
	upstreams, err := upstreamsOf(upstreamDSN)
	if err != nil {
		return "", fmt.Errorf("pgproxy: rewrite a DSN for the proxy: %w", err)
	}
	var addrs []string
	for _, up := range upstreams {
		l, err := p.listenerFor(client, up)
		if err != nil {
			return "", err
		}
		addrs = append(addrs, l.Addr())
	}
	var dsn string
	if connstr.IsURL(upstreamDSN) {
		dsn, err = rewriteURL(upstreamDSN, addrs)
	} else {
		dsn, err = rewriteKeywords(upstreamDSN, addrs)
	}
	if err != nil {
		return "", fmt.Errorf("pgproxy: rewrite a DSN for the proxy: %w", err)
	}
	return dsn, nil
}

// listenerFor is client's listener whose upstream is upstream, opened if
// there is none.
func (p *Proxy) listenerFor(client, upstream string) (*Listener, error) {
	for _, l := range p.Listeners(client) {
		if l.Upstream() == upstream {
			return l, nil
		}
	}
	return p.Listen(client, upstream)
}

// upstreamsOf lists the address of every server dsn names, in order, as
// pgx reads and dials it: host:port, or a Unix-domain socket's path.
func upstreamsOf(dsn string) ([]string, error) { return pgaddr.Of(dsn) }

// checkDSNTLS refuses a DSN whose settings make the client insist on TLS.
func checkDSNTLS(dsn string) error {
	if connstr.IsURL(dsn) {
		_, _, tail := connstr.SplitURL(dsn)
		tail, _, _ = strings.Cut(tail, "#")
		_, query, ok := strings.Cut(tail, "?")
		if !ok {
			return nil
		}
		values, err := url.ParseQuery(query)
		if err != nil {
			return fmt.Errorf("URL query: %w", err)
		}
		for k, vs := range values {
			for _, v := range vs {
				if err := checkTLS(k, v); err != nil {
					return err
				}
			}
		}
		return nil
	}
	settings, err := connstr.Parse(dsn)
	if err != nil {
		return err
	}
	for _, s := range settings {
		if err := checkTLS(s.Key, s.Value); err != nil {
			return err
		}
	}
	return nil
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

// rewriteURL puts addrs (host:port each) in the URL's host list, and drops
// the query's host, hostaddr and port.
func rewriteURL(dsn string, addrs []string) (string, error) {
	user, _, tail := connstr.SplitURL(dsn)

	path, fragment, hasFragment := strings.Cut(tail, "#")
	path, query, hasQuery := strings.Cut(path, "?")
	if hasQuery {
		// Not url.Values.Encode: it would rewrite every other parameter
		// ("%20" as "+", which libpq reads as a plus).
		query = connstr.DropQueryParams(query, "host", "hostaddr", "port")
	}

	var b strings.Builder
	b.WriteString(user + strings.Join(addrs, ",") + path)
	if hasQuery && query != "" {
		b.WriteString("?" + query)
	}
	if hasFragment {
		b.WriteString("#" + fragment)
	}
	return b.String(), nil
}

// rewriteKeywords sets host and port to addrs (host:port each), as lists
// when there are several, and drops hostaddr.
func rewriteKeywords(dsn string, addrs []string) (string, error) {
	settings, err := connstr.Parse(dsn)
	if err != nil {
		return "", err
	}
	hosts, ports := make([]string, len(addrs)), make([]string, len(addrs))
	for i, a := range addrs {
		var err error
		if hosts[i], ports[i], err = net.SplitHostPort(a); err != nil {
			return "", err
		}
	}
	out := []connstr.Setting{{Key: "host", Value: strings.Join(hosts, ",")}, {Key: "port", Value: strings.Join(ports, ",")}}
	for _, s := range settings {
		if !isAddressKey(s.Key) {
			out = append(out, s)
		}
	}
	return connstr.Format(out), nil
}
