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
//
// It also holds the test that keeps the public API small (issue 23): an
// export of a public package that only the harness's machinery (internal/,
// cmd/), tests or nothing use fails it, unless it is on the shrinking list
// in testdata/harness-only-api.txt. That test reads every package's code,
// and the integrations module's, with golang.org/x/tools/go/packages:
// what counts is which objects identifiers refer to, not their spelling.
package depgraph
