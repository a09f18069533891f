package provision

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// dockerDirs returns a directory holding an executable named docker, as
// an installed client is, and an empty one, for PATH.
func dockerDirs(t *testing.T) (installed, bare string) {
	t.Helper()
	installed, bare = t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(installed, "docker"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return installed, bare
}

// deadSocket returns the path of a unix socket that nothing listens on any
// more: the state of /var/run/docker.sock after dockerd died.
func deadSocket(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFindDockerTellsTheStatesApart: Docker not installed, installed with
// its daemon down (no socket, or a socket nothing listens on), something
// that is not a daemon on the socket, and a daemon that answers its ping
// are each said as such, never as testcontainers-go's "rootless Docker not
// found".
func TestFindDockerTellsTheStatesApart(t *testing.T) {
	installed, bare := dockerDirs(t)
	absent := filepath.Join(t.TempDir(), "docker.sock")
	dead := deadSocket(t)

	// A socket where something answers /_ping as a daemon does, and one
	// where something answers otherwise.
	serve := func(status int) string {
		path := filepath.Join(t.TempDir(), "d.sock")
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/_ping" {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(status)
			_, _ = w.Write([]byte("OK"))
		})}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
		return path
	}
	answering, notADaemon := serve(http.StatusOK), serve(http.StatusTeapot)

	for _, tc := range []struct {
		name, path, host, want string
	}{
		{"not installed, no socket", bare, "unix://" + absent, "Docker is not installed (no docker or dockerd on PATH) and no daemon is running at " + absent + " (no socket there)"},
		{"installed, no socket", installed, "unix://" + absent, "Docker is installed (" + filepath.Join(installed, "docker") + ") but its daemon is not running at " + absent + " (no socket there)"},
		{"installed, nothing listens", installed, "unix://" + dead, "Docker is installed (" + filepath.Join(installed, "docker") + ") but its daemon is not running at " + dead + " (the socket is there, but nothing listens on it)"},
		{"not installed, nothing listens", bare, "unix://" + dead, "Docker is not installed (no docker or dockerd on PATH) and no daemon is running at " + dead},
		{"not a daemon", installed, "unix://" + notADaemon, "something listens at " + notADaemon + " but does not answer as a Docker daemon: ping: 418"},
		{"answers", bare, "unix://" + answering, ""},
	} {
		host, err := FindDocker(testCtx(t, 10*time.Second), getenvOf(env("PATH", tc.path, "DOCKER_HOST", tc.host)))
		switch {
		case host != tc.host:
			t.Errorf("%s: host %q, want %q", tc.name, host, tc.host)
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v; want the daemon found", tc.name, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%s: %v\nwant: %s", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "rootless") {
			t.Errorf("%s: %v names rootless Docker", tc.name, err)
		}
	}

	// Without DOCKER_HOST, the default socket is the one looked at.
	if host, _ := FindDocker(testCtx(t, 10*time.Second), getenvOf(env("PATH", bare))); host != DefaultDockerHost {
		t.Errorf("without DOCKER_HOST: host %q, want %q", host, DefaultDockerHost)
	}
}

// TestNoContainerSaysTheClusterComesNext: when the container way fails in
// the automatic order, its reason is logged with what happens next, so
// that it does not read as the run's end.
func TestNoContainerSaysTheClusterComesNext(t *testing.T) {
	var lines []string
	logf := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	down := func(context.Context, string, func(string, ...any)) (Container, error) {
		return nil, errors.New("Docker is installed but its daemon is not running at /var/run/docker.sock")
	}
	_, err := Open(testCtx(t, time.Minute), Options{BinDir: t.TempDir(), LookupEnv: env(), Logf: logf, Container: down})
	if !errors.Is(err, ErrNoDatabase) {
		t.Fatalf("Open = %v, want ErrNoDatabase (no binaries in BinDir)", err)
	}
	want := "no container: Docker is installed but its daemon is not running at /var/run/docker.sock; starting a throwaway cluster instead"
	if !slices.Contains(lines, want) {
		t.Errorf("log %q\nlacks %q", lines, want)
	}
}
