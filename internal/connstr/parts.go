package connstr

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// DefaultPort is the port libpq and pgx connect to where a connection
// string names none.
const DefaultPort = 5432

// Parts are what a connection string says, split into the pieces a driver
// that cannot read the string itself is configured with: pgjdbc, whose URL
// has another syntax, and node-postgres, which reads one host only. The
// exec protocol's setup sends them beside the string.
//
// They are read from the string's text alone, as pgx reads it, never from
// the environment ($PGHOST, $PGUSER, $PGPASSWORD...), a password file or a
// service file: an implementation is given what the harness wrote, and
// reads its own environment as its driver does.
type Parts struct {
	// Hosts are the hosts, in order, as pgx tries them; one entry at
	// least. An entry is "" where the string names no host: the driver's
	// default (libpq's and pgx's: the Unix-socket directory, else
	// localhost). A host that starts with '/' is a Unix-socket directory.
	Hosts []string
	// Ports are the ports of Hosts, one each: a single port in the string
	// applies to every host, and a host without one has DefaultPort.
	Ports []int
	// User, Password and Database are "" where the string names none.
	User, Password, Database string
	// Params are every other setting, by the name libpq gives it
	// (sslmode, application_name, target_session_attrs, options, ...),
	// with its value as pgx reads it.
	Params map[string]string
}

// partsKeys are the settings Parts has fields for, by pgx's names.
var partsKeys = map[string]bool{"host": true, "port": true, "user": true, "password": true, "database": true}

// PartsOf reads the connection string dsn, a URL (postgres:// or
// postgresql://) or a keyword/value string, into its Parts, as pgx reads
// it: a URL as libpq parses one (percent-decoding, several hosts, an IPv6
// address in brackets, query parameters that override the rest, the last
// of a repeated one winning), keyword/value settings as [Parse] reads
// them; dbname is the database, and a port list must have one port, or one
// per host. It refuses what pgx refuses for its syntax, its ports or the
// count of its ports, and accepts values (an sslmode, a
// target_session_attrs) that pgx may refuse when it connects.
func PartsOf(dsn string) (Parts, error) {
	var settings map[string]string
	var err error
	if IsURL(dsn) {
		settings, err = urlSettings(dsn)
	} else {
		settings, err = keywordSettings(dsn)
	}
	if err != nil {
		return Parts{}, err
	}
	p := Parts{
		Hosts:    strings.Split(settings["host"], ","),
		User:     settings["user"],
		Password: settings["password"],
		Database: settings["database"],
		Params:   map[string]string{},
	}
	ports := strings.Split(settings["port"], ",")
	if len(ports) > 1 && len(ports) != len(p.Hosts) {
		return Parts{}, fmt.Errorf("%d ports for %d hosts: give one port, or one per host", len(ports), len(p.Hosts))
	}
	for i := range p.Hosts {
		text := ports[0]
		if len(ports) > 1 {
			text = ports[i]
		}
		port := DefaultPort
		if text != "" {
			// The text is not quoted: in a malformed URL a misplaced
			// password can land where the port is read.
			n, err := strconv.ParseUint(text, 10, 16)
			if err != nil || n == 0 {
				return Parts{}, fmt.Errorf("port %d of the connection string is not a number from 1 to 65535", i+1)
			}
			port = int(n)
		}
		p.Ports = append(p.Ports, port)
	}
	for k, v := range settings {
		if !partsKeys[k] {
			p.Params[k] = v
		}
	}
	return p, nil
}

// canonicalKey is pgx's name of a setting: dbname is database.
func canonicalKey(k string) string {
	if k == "dbname" {
		return "database"
	}
	return k
}

// keywordSettings reads a keyword/value string into settings, as pgx
// does: the last of a repeated keyword wins, and an empty user is no user.
func keywordSettings(dsn string) (map[string]string, error) {
	parsed, err := Parse(dsn)
	if err != nil {
		return nil, err
	}
	settings := map[string]string{}
	for _, s := range parsed {
		key := canonicalKey(s.Key)
		if key == "user" && s.Value == "" {
			continue
		}
		settings[key] = s.Value
	}
	return settings, nil
}

// urlSettings reads a connection URL into settings as pgx (v5.12) and
// libpq read one (libpq's conninfo_uri_parse_options): the user
// information up to an '@' before the first '/'; a comma-separated list of
// hosts, each a name or an IPv6 address in brackets, with an optional
// ':port', kept as positionally aligned comma-separated host and port
// lists; a database after '/'; then query parameters, each exactly one
// '=', which override everything before them. Every part is
// percent-decoded (see [uriDecode]); a host list is decoded whole, so
// "%2C" separates hosts as a comma does. "ssl=true" means
// sslmode=require, as in pgx.
func urlSettings(dsn string) (map[string]string, error) {
	if strings.IndexByte(dsn, 0) >= 0 {
		return nil, errors.New("a NUL byte in the connection string")
	}
	_, p, _ := strings.Cut(dsn, "://")
	settings := map[string]string{}
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		user, password, hasPassword := strings.Cut(p[:i], ":")
		p = p[i+1:]
		if user != "" {
			v, err := uriDecode(user, "the user")
			if err != nil {
				return nil, err
			}
			settings["user"] = v
		}
		if hasPassword && password != "" {
			v, err := uriDecode(password, "the password")
			if err != nil {
				return nil, err
			}
			settings["password"] = v
		}
	}
	var hosts, ports strings.Builder
	for {
		if strings.HasPrefix(p, "[") {
			end := strings.IndexByte(p, ']')
			switch {
			case end < 0:
				return nil, errors.New(`an IPv6 host address lacks its closing "]"`)
			case end == 1:
				return nil, errors.New("an IPv6 host address is empty")
			}
			hosts.WriteString(p[1:end])
			p = p[end+1:]
			if p != "" && !strings.ContainsRune(":/?,", rune(p[0])) {
				return nil, fmt.Errorf(`an IPv6 host address is followed by %q, not ":", "/", "?" or ","`, p[0])
			}
		} else {
			i := strings.IndexAny(p, ":/?,")
			if i < 0 {
				i = len(p)
			}
			hosts.WriteString(p[:i])
			p = p[i:]
		}
		if strings.HasPrefix(p, ":") {
			p = p[1:]
			i := strings.IndexAny(p, "/?,")
			if i < 0 {
				i = len(p)
			}
			ports.WriteString(p[:i])
			p = p[i:]
		}
		if !strings.HasPrefix(p, ",") {
			break
		}
		p = p[1:]
		hosts.WriteByte(',')
		ports.WriteByte(',')
	}
	if hosts.Len() > 0 {
		v, err := uriDecode(hosts.String(), "the hosts")
		if err != nil {
			return nil, err
		}
		settings["host"] = v
	}
	if ports.Len() > 0 {
		v, err := uriDecode(ports.String(), "the ports")
		if err != nil {
			return nil, err
		}
		settings["port"] = v
	}
	if strings.HasPrefix(p, "/") {
		database, query, hasQuery := strings.Cut(p[1:], "?")
		p = ""
		if hasQuery {
			p = "?" + query
		}
		if database != "" {
			v, err := uriDecode(database, "the database")
			if err != nil {
				return nil, err
			}
			settings["database"] = v
		}
	}
	if query, ok := strings.CutPrefix(p, "?"); ok {
		if err := urlQuery(query, settings); err != nil {
			return nil, err
		}
	}
	return settings, nil
}

// urlQuery reads a connection URL's query into settings, over what is
// there: '&'-separated pairs of exactly one '=' each, both sides
// percent-decoded, the last of a repeated key winning. ssl=true, when it
// comes after every sslmode, means sslmode=require.
func urlQuery(query string, settings map[string]string) error {
	params := map[string]string{}
	sslLast := false
	for query != "" {
		pair, rest, _ := strings.Cut(query, "&")
		query = rest
		rawKey, rawValue, found := strings.Cut(pair, "=")
		if !found || strings.Contains(rawValue, "=") {
			return fmt.Errorf("a query parameter of the connection URL is not one key, one '=' and a value")
		}
		key, err := uriDecode(rawKey, "a query parameter's name")
		if err != nil {
			return err
		}
		key = canonicalKey(key)
		value, err := uriDecode(rawValue, "the value of query parameter "+strconv.Quote(key))
		if err != nil {
			return err
		}
		switch key {
		case "ssl":
			sslLast = true
		case "sslmode":
			sslLast = false
		}
		params[key] = value
	}
	if params["ssl"] == "true" {
		delete(params, "ssl")
		if sslLast {
			params["sslmode"] = "require"
		}
	}
	for k, v := range params {
		settings[k] = v
	}
	return nil
}

// uriDecode percent-decodes part of a connection URL as libpq does: '%'
// and two hex digits make a byte (not %00); spaces before and after are
// dropped, and one inside is an error. what names the part in an error,
// which never quotes it: it may be a password.
func uriDecode(raw, what string) (string, error) {
	raw = strings.TrimLeft(raw, " ")
	trimmed := strings.TrimRight(raw, " ")
	if strings.Contains(trimmed, " ") {
		return "", fmt.Errorf("%s of the connection URL holds a space: write it %%20", what)
	}
	var b strings.Builder
	for i := 0; i < len(trimmed); i++ {
		if trimmed[i] != '%' {
			b.WriteByte(trimmed[i])
			continue
		}
		if i+2 >= len(trimmed) || !isHex(trimmed[i+1]) || !isHex(trimmed[i+2]) {
			return "", fmt.Errorf("%s of the connection URL holds a '%%' that is not followed by two hex digits", what)
		}
		c := unhex(trimmed[i+1])<<4 | unhex(trimmed[i+2])
		if c == 0 {
			return "", fmt.Errorf("%s of the connection URL holds %%00", what)
		}
		b.WriteByte(c)
		i += 2
	}
	return b.String(), nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
