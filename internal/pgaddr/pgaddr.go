// Package pgaddr says where the servers a connection string names are, as
// pgx dials them: "host:port" over TCP, or the path of a Unix-domain
// socket, "/dir/.s.PGSQL.port". The wire proxy listens for an instance and
// forwards to those addresses; the harness points the proxy's listeners at
// a server's new address after a restart.
package pgaddr

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Of lists the address of every server dsn names, in order, as pgx reads
// the string (its defaults, $PGHOST and the other environment variables
// included) and dials it: a host that is a directory (it starts with '/')
// is a Unix-domain socket there, named after the port as libpq names it.
// An address is listed once: pgx lists a host twice for sslmode prefer,
// with TLS and without.
func Of(dsn string) ([]string, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		// Not the DSN itself: it may hold a password.
		return nil, fmt.Errorf("read the servers of a connection string: %w", err)
	}
	var out []string
	for _, h := range append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port}}, cfg.Fallbacks...) {
		if addr := address(h.Host, h.Port); !slices.Contains(out, addr) {
			out = append(out, addr)
		}
	}
	return out, nil
}

func address(host string, port uint16) string {
	if IsSocket(host) {
		return filepath.Join(host, ".s.PGSQL."+strconv.Itoa(int(port)))
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// IsSocket reports whether addr (or a host) names a Unix-domain socket:
// an absolute path.
func IsSocket(addr string) bool { return strings.HasPrefix(addr, "/") }

// Network is the network to dial addr on: "unix" for a socket, else
// "tcp".
func Network(addr string) string {
	if IsSocket(addr) {
		return "unix"
	}
	return "tcp"
}
