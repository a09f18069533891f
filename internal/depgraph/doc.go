// Package depgraph holds the test that asserts the module's import graph:
// what a program that imports harmless's public packages for implementers
// links. harmless is embedded in other people's tests and CI, so a package
// an implementer imports must not pull in the machinery that provisions
// PostgreSQL in containers (testcontainers, the moby client, gopsutil):
// that is package container, which the harmless command links and a Go test
// passes to the suite with suite.WithContainers(docker.Start) when it
// wants containers.
//
// It asks the go command (go list -deps), the same tool that decides what a
// build links, rather than reading import lines, so a dependency added two
// packages down is caught too.
package depgraph
