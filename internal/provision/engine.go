package provision

import (
	"context"
	"fmt"
	"time"
)

// Container is a throwaway server in a container that a container engine
// started (Options.Container): ready, private as the package documentation
// says, and owned by this process. Package container's *Server is one;
// package suite's ContainerServer is the same interface, public.
type Container interface {
	// DSN is a superuser connection string with the password; it changes
	// on Restart (the engine maps a new host port).
	DSN() string
	// Secrets are the passwords DSN carries; they do not change on Restart.
	Secrets() []string
	// Version is the server's server_version.
	Version() string
	// Crash kills the container without a clean shutdown (SIGKILL).
	Crash(ctx context.Context) error
	// Restart starts the crashed container again and returns once the
	// server accepts connections, after crash recovery.
	Restart(ctx context.Context) error
	// Close removes the container.
	Close(ctx context.Context) error
	// String describes the container for logs, without credentials.
	String() string
}

// StartContainer starts a server from image in a throwaway container and
// returns it once it accepts connections; logf receives progress lines.
// Package container's Start is one. It is a hook rather than code of this
// package so that a program links the container machinery
// (testcontainers-go, the moby client, gopsutil) only when it asks for
// containers.
type StartContainer = func(ctx context.Context, image string, logf func(format string, args ...any)) (Container, error)

// Engine turns a function that starts some concrete kind of container
// server, such as package container's Start, into a StartContainer. On an
// error it returns a nil Container, never a typed nil.
func Engine[S Container](start func(ctx context.Context, image string, logf func(format string, args ...any)) (S, error)) StartContainer {
	return func(ctx context.Context, image string, logf func(format string, args ...any)) (Container, error) {
		c, err := start(ctx, image, logf)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}

// errNoContainerEngine is the container way's reason when the program did
// not link one: it says how to enable it.
const errNoContainerEngine = "not linked into this program: pass docker.Start from " +
	"github.com/harmless-dev/harmless/suite/docker (suite.WithContainers(docker.Start)); the harmless command links it"

// openContainer starts a throwaway server through st.container.
func openContainer(ctx context.Context, st settings) (*Server, error) {
	if st.container == nil {
		return nil, fmt.Errorf("%s", errNoContainerEngine)
	}
	c, err := st.container(ctx, st.image, st.logf)
	if err != nil {
		return nil, err
	}
	return &Server{Kind: KindContainer, Version: c.Version(), dsn: c.DSN(), b: containerBackend{c}, logf: st.logf, secrets: c.Secrets()}, nil
}

// containerBackend adapts a Container to a Server's backend.
type containerBackend struct{ c Container }

func (b containerBackend) crash(ctx context.Context) error { return b.c.Crash(ctx) }
func (b containerBackend) restart(ctx context.Context) (string, error) {
	if err := b.c.Restart(ctx); err != nil {
		return "", err
	}
	return b.c.DSN(), nil
}
func (b containerBackend) close(ctx context.Context) error { return b.c.Close(ctx) }
func (b containerBackend) describe() string                { return b.c.String() }

// Container returns the container behind a server of KindContainer, nil
// for any other, so that the container's own tests can look inside it.
func (s *Server) Container() Container {
	if b, ok := s.b.(containerBackend); ok {
		return b.c
	}
	return nil
}

// What package container shares with this package: the same superuser,
// password, readiness check and owner labels as a cluster, so that a
// container is as private, and its leftovers as recognisable, as a
// cluster's.

// Superuser is the role of every server harmless starts.
const Superuser = superuser

// LabelOwnerPID is the label key, on every container harmless starts, of
// the owning process's pid; filter on it to list harmless's containers.
const LabelOwnerPID = labelOwnerPID

// NewPassword returns a password for one server (see the package
// documentation).
func NewPassword() (string, error) { return newPassword() }

// OwnerLabels returns the labels that mark a container as this process's.
func OwnerLabels() map[string]string { return self().labels() }

// DeadOwner reports whether the process named by a container's owner labels
// is certainly gone, and its pid, so that its leftovers can be removed.
func DeadOwner(labels map[string]string) (pid int, dead bool) {
	o := ownerFromLabels(labels)
	return o.pid, o.dead()
}

// IsOwnedBySelf reports whether labels are this process's owner labels.
func IsOwnedBySelf(labels map[string]string) bool { return ownerFromLabels(labels) == self() }

// WaitReady polls the server at dsn until it accepts connections or timeout
// or ctx ends, and returns its server_version; lastWords, if not nil, adds
// context (such as the server's log) to the error.
func WaitReady(ctx context.Context, dsn string, timeout time.Duration, lastWords func() string) (string, error) {
	return waitReady(ctx, dsn, timeout, lastWords)
}

// LastLines returns the last n lines of s joined on one line, for errors.
func LastLines(s string, n int) string { return lastLines(s, n) }
