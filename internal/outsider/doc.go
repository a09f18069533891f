// Package outsider certifies Go implementations the way a user outside this
// module does: from a module of its own that requires
// github.com/harmless-dev/harmless (replaced by this checkout), with
// suite.Run in its tests, on a throwaway cluster so that every rule runs.
// The module gets harmless by the README's recipe (go mod edit -replace,
// then go mod tidy), run as written; another test installs the command
// from the checkout with the README's go install.
//
// Its test certifies the Go example of the Go guide the README links,
// extracted from docs/go.md as written, so that the example cannot drift
// from what works, and two implementations written from the README alone,
// when it held the guide (in testdata): one with a pool of 2 connections,
// one whose transaction pgx.BeginTxFunc owns.
//
// Another runs the guide's Ginkgo suite (suite.Register beside the
// suite's own BeforeSuite and spec), as written, with the guide's go test
// label filters that play one fixture, on a DSN, and checks the specs
// they ran and the certificate the suite wrote.
package outsider
