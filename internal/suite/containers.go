package suite

import (
	"context"

	"github.com/harmless-dev/harmless/internal/provision"
)

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
func WithContainers[S provision.Container](start func(ctx context.Context, image string, logf func(format string, args ...any)) (S, error)) Option {
	engine := provision.Engine(start)
	return func(c *config) { c.provision.Container = engine }
}
