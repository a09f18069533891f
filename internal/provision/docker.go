package provision

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// DefaultDockerHost is where a Docker daemon listens unless DOCKER_HOST
// says otherwise.
const DefaultDockerHost = "unix:///var/run/docker.sock"

// dockerProbeTimeout bounds asking the daemon whether it answers: a daemon
// that does not answer within it is as good as none, and `harmless list`
// must not hang on it.
const dockerProbeTimeout = 3 * time.Second

// FindDocker says whether a Docker daemon answers at the address a run
// would use first, DOCKER_HOST (read with getenv; nil means os.Getenv),
// else DefaultDockerHost, without starting anything: it connects and asks
// the daemon's /_ping. It returns that address, and an error that tells
// apart the three states a machine is in, since each needs another fix:
// Docker is not installed (no docker or dockerd on PATH, and no socket);
// Docker is installed but its daemon is not running (no socket, or a
// socket nothing listens on); or something listens but does not answer
// as a daemon does (or refuses this user). testcontainers-go's own error
// for the first two, after it tried every place it knows, is its last
// try's, "rootless Docker not found", which names none of them.
func FindDocker(ctx context.Context, getenv func(string) string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	host := firstNonEmpty(getenv("DOCKER_HOST"), DefaultDockerHost)
	u, err := url.Parse(host)
	if err != nil {
		return host, fmt.Errorf("DOCKER_HOST=%s is not an address: %w", host, err)
	}
	var network, addr string
	switch u.Scheme {
	case "unix":
		network, addr = "unix", u.Path
	case "tcp", "http":
		network, addr = "tcp", u.Host
	default:
		// ssh://, npipe:// and the like: only the engine's client can tell.
		return host, fmt.Errorf("cannot probe a Docker daemon at %s (scheme %q) without its client", host, u.Scheme)
	}
	where := addr
	if network == "tcp" {
		where = host
	}
	installed := dockerInstalled(getenv("PATH"))
	// The messages begin with "Docker", a name: they are read after
	// "container engine: " or "no container: ".
	notRunning := func(detail string) error {
		if installed != "" {
			//lint:ignore ST1005 Docker is a proper noun, and the message follows a colon
			return fmt.Errorf("Docker is installed (%s) but its daemon is not running at %s (%s)", installed, where, detail)
		}
		//lint:ignore ST1005 Docker is a proper noun, and the message follows a colon
		return fmt.Errorf("Docker is not installed (no docker or dockerd on PATH) and no daemon is running at %s (%s)", where, detail)
	}
	if network == "unix" {
		if _, err := os.Stat(addr); errors.Is(err, os.ErrNotExist) {
			return host, notRunning("no socket there")
		}
	}
	ctx, cancel := context.WithTimeout(ctx, dockerProbeTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		if network == "unix" {
			return host, notRunning("the socket is there, but nothing listens on it")
		}
		return host, notRunning("connection refused")
	case errors.Is(err, syscall.EACCES) || errors.Is(err, os.ErrPermission):
		return host, fmt.Errorf("the Docker daemon's socket %s refuses this user (permission denied): add it to the docker group, or name a server with --dsn", where)
	case err != nil:
		return host, fmt.Errorf("cannot reach a Docker daemon at %s: %w", where, err)
	}
	conn.Close()
	if err := pingDocker(ctx, network, addr); err != nil {
		return host, fmt.Errorf("something listens at %s but does not answer as a Docker daemon: %w", where, err)
	}
	return host, nil
}

// pingDocker asks the daemon at addr for /_ping, which every Docker API
// version answers with 200 OK, and nothing heavier.
func pingDocker(ctx context.Context, network, addr string) error {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
		DisableKeepAlives: true,
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
	if err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ping: %s %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// dockerInstalled returns the path of docker (the client) or dockerd (the
// daemon) on path, or "" when neither is there.
func dockerInstalled(path string) string {
	for _, name := range []string{"docker", "dockerd"} {
		for _, dir := range filepath.SplitList(path) {
			if dir == "" {
				continue
			}
			p := filepath.Join(dir, name)
			if info, err := os.Stat(p); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
				return p
			}
		}
	}
	return ""
}
