package suite

import (
	"context"

	"github.com/harmless-dev/harmless/internal/provision"
)

// ContainerServer is a throwaway PostgreSQL server in a container, such as
// the *Server that package github.com/harmless-dev/harmless/suite/docker
// starts: the suite owns it, crashes and restarts it for the crash-recovery
// fixtures, and removes it at the end.
type ContainerServer interface {
	// DSN is a superuser connection string with the password; it changes
	// on Restart.
	DSN() string
	// Secrets are the passwords DSN carries; the suite masks them.
	Secrets() []string
	// Version is the server's server_version.
	Version() string
	// Crash kills the container without a clean shutdown.
	Crash(ctx context.Context) error
	// Restart starts the crashed container again, after crash recovery.
	Restart(ctx context.Context) error
	// Close removes the container.
	Close(ctx context.Context) error
	// String describes the container, without credentials.
	String() string
}

// WithContainers lets the suite start PostgreSQL in a throwaway container
// when no DSN is given (WithDSN, $HARMLESS_DSN, $DATABASE_URL): pass
// docker.Start from package github.com/harmless-dev/harmless/suite/docker.
//
//	suite.RunWith(t, []suite.Option{suite.WithContainers(docker.Start)}, adapter)
//
// The suite does not link the container machinery (testcontainers-go, the
// moby client, gopsutil) itself, so that a program that never asks for a
// container does not carry it. Without this option the suite goes from a
// DSN straight to a throwaway cluster from local server binaries, and
// WithProvisioning("container") fails saying to pass docker.Start.
func WithContainers[S ContainerServer](start func(ctx context.Context, image string, logf func(format string, args ...any)) (S, error)) Option {
	engine := provision.Engine(start)
	return func(c *config) { c.provision.Container = engine }
}
