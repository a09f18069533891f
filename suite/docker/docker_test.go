package docker

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestADownDaemonIsSaidAsSuch points DOCKER_HOST at a socket nothing
// listens on, as /var/run/docker.sock is after dockerd died: the reason
// must say that Docker's daemon is not running there, not
// testcontainers-go's "rootless Docker not found".
func TestADownDaemonIsSaidAsSuch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_HOST", "unix://"+path)
	ctx, cancel := context.WithTimeout(t.Context(), 2*engineProbeTimeout)
	defer cancel()
	p, err := detectEngine(ctx, logAdapter(t.Logf))
	if err == nil {
		p.Close()
		t.Skip("testcontainers-go found a daemon elsewhere than DOCKER_HOST")
	}
	want := "no daemon is running at " + path + " (the socket is there, but nothing listens on it)"
	if docker, lookErr := exec.LookPath("docker"); lookErr == nil {
		want = "Docker is installed (" + docker + ") but its daemon is not running at " + path + " (the socket is there, but nothing listens on it)"
	}
	if msg := err.Error(); !strings.Contains(msg, want) || strings.Contains(msg, "rootless") {
		t.Errorf("no engine: %v\nwant it to say %q, and no word of rootless Docker", err, want)
	}
}
